"""`python run.py --mode=build_world --output_dir=D [--seed=0 --scale=1.0 --world_version=4]`.

Builds the embedded synthetic temporal world (tlm/synthetic/; docs/reproduction.md, "The
synthetic world") and prints its headline counts, then the full counts as one JSON line.
numpy only: this mode never imports jax.
"""

import json
import time

from tlm.configs import check_value
from tlm.errors import ConfigError


def build_world(flags) -> dict:
  """Checks the flags, writes the world to `--output_dir` and prints its counts.

  Args:
    flags: parsed absl flags with `output_dir`, `seed`, `scale` and `world_version`.

  Returns:
    The counts returned by `tlm.synthetic.build_world`.
  """
  if not flags.output_dir:
    raise ConfigError("--output_dir is required for --mode=build_world")
  # The ranges of the config keys these flags set (tlm.configs.schema says why).
  check_value("data.world_scale", flags.scale, "--scale")
  check_value("data.world_seed", flags.seed, "--seed")
  check_value("data.world_version", flags.world_version, "--world_version")
  from tlm import synthetic
  from tlm.workdir_lock import WorkdirLock

  start = time.perf_counter()
  with WorkdirLock.beside(flags.output_dir, "build_world"):
    counts = synthetic.build_world(
      flags.output_dir, seed=flags.seed, scale=flags.scale, version=flags.world_version
    )
  seconds = time.perf_counter() - start
  for line in summary(counts, flags.output_dir, seconds):
    print(line)
  print(json.dumps(counts))
  return counts


def summary(counts: dict, output_dir: str, seconds: float) -> list[str]:
  """Human-readable lines for the counts of one world."""
  kinds = ", ".join(f"{k} {n}" for k, n in counts["entities_by_kind"].items())
  facts = ", ".join(f"{r} {n}" for r, n in counts["facts_by_relation"].items())
  pairs = sum(counts["templama_subjects"].values())
  queries = sum(counts["templama_queries"].values())
  per_year = ", ".join(
    f"{y}: {counts['documents_per_year'][y]}/{counts['sentences_per_year'][y]}"
    for y in counts["documents_per_year"]
  )
  sets = ", ".join(f"{k} {n}" for k, n in counts["future_relations"].items())
  return [
    f"synthetic world v{counts.get('world_version', 3)} (seed {counts['seed']}, scale "
    f"{counts['scale']}) written to {output_dir} "
    f"in {seconds:.1f} s",
    f"entities: {counts['entities']} ({kinds})",
    f"facts: {counts['facts']} ({facts})",
    f"TempLAMA-eligible: {pairs} (subject, relation) pairs with more than one object, "
    f"{queries} queries 2010-2020",
    f"news: {counts['documents']} documents, {counts['sentences']} sentences "
    f"(documents/sentences per year {per_year})",
    f"sentences with an explicit year: {100 * counts['explicit_year_sentence_share']:.1f}% "
    f"(publication year {100 * counts['publication_year_sentence_share']:.1f}%)",
    f"future-relations queries: {sets}",
    f"vocabulary: {counts['vocab_pieces']} SentencePiece pieces + 100 sentinels",
  ]
