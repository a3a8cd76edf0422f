"""Surface `sampling`: predict's sampling flags (--temperature, --top_k, --top_p, --seed) at
and beyond their ranges, and in combinations that contradict each other.
"""

from .common import case, ok, predict_case, predictions, score_args

SURFACE = "sampling"

# (name, flags of predict, expect); an error names the flag given last.
FLAGS = [
  ("temperature_nan", ("--temperature=nan",), "error"),
  ("temperature_inf", ("--temperature=inf",), "error"),
  ("temperature_negative", ("--temperature=-1",), "error"),
  ("temperature_tiny", ("--temperature=1e-300",), "either"),
  ("temperature_huge", ("--temperature=1e308",), "either"),
  ("temperature_subnormal", ("--temperature=5e-324",), "either"),
  ("top_p_zero", ("--temperature=1", "--top_p=0"), "error"),
  ("top_p_nan", ("--temperature=1", "--top_p=nan"), "error"),
  ("top_p_above_1", ("--temperature=1", "--top_p=1.5"), "error"),
  ("top_p_tiny", ("--temperature=1", "--top_p=1e-300"), "either"),
  ("top_k_negative", ("--temperature=1", "--top_k=-1"), "error"),
  ("top_k_1e12", ("--temperature=1", "--top_k=1000000000000"), "either"),
  ("top_k_beyond_int64", ("--temperature=1", "--top_k=" + "9" * 30), "error"),
  ("top_k_1", ("--temperature=1", "--top_k=1"), "either"),
  ("seed_2_32", ("--temperature=1", "--seed=4294967296"), "error"),
  ("seed_minus_1", ("--temperature=1", "--seed=-1"), "error"),
  ("seed_2_64", ("--temperature=1", "--seed=18446744073709551616"), "error"),
  ("beam_with_temperature", ("--temperature=1", "--beam_size=4"), "error"),
  ("top_k_without_temperature", ("--top_k=5",), "error"),
  ("top_p_without_temperature", ("--top_p=0.5",), "error"),
  ("temperature_string", ("--temperature=hot",), "error"),
]
INTACT = ("--temperature=1", "--top_k=5", "--top_p=0.9", "--seed=3")

CASES = [
  case(
    "sampling_intact",
    SURFACE,
    lambda ctx: score_args(ctx, ctx.base["W0"], "out.jsonl", "predict", *INTACT),
    **ok(predictions(), "out.jsonl"),
  ),
  *(predict_case(f"sampling_{name}", SURFACE, flags, expect) for name, flags, expect in FLAGS),
]
