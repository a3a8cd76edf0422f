#!/usr/bin/env bash
# The accelerator check: one command, at most 8 minutes on one GPU (or TPU host).
#
#   bash benchmarks/accelerator.sh
#
# Prints one JSON line per benchmark:
# 1. benchmarks/train.py: the t5-v1_1-large train step in bfloat16 on T5X's published shape
#    (packed rows of 512 input + 128 target tokens), its tokens/s, FLOP/s and MFU against the
#    device's peak (benchmarks/train.py PEAK_FLOPS), and HF transformers on the same examples
#    when torch sees a GPU (otherwise --no_hf: torch on the host CPU would take the budget);
# 2. benchmarks/decode.py: greedy decoding and candidate ranking throughput.
# Each is cut off by `timeout` (300 s + 170 s); a benchmark that fails or runs out of time
# prints {"benchmark": ..., "error": ...} instead, and the other one still runs.
set -u
cd "$(dirname "$0")/.."
# jax would otherwise reserve 75% of the GPU's memory, leaving torch too little.
export XLA_PYTHON_CLIENT_PREALLOCATE=false

hf_flag=""
if ! python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null
then
  hf_flag="--no_hf"
fi

run() {  # NAME SECONDS COMMAND...: the command's last line (its JSON), or an error line
  local name=$1 seconds=$2 out rc
  shift 2
  out=$(timeout "$seconds" "$@" 2>/tmp/tlm_accelerator_"$name".log)
  rc=$?
  if [ $rc -eq 0 ]; then
    printf '%s\n' "$out" | tail -n 1
  else
    printf '{"benchmark": "%s", "error": "exit status %s (124: timed out), stderr in %s"}\n' \
      "$name" "$rc" "/tmp/tlm_accelerator_$name.log"
  fi
}

run train 300 python benchmarks/train.py --preset t5-v1_1-large --dtype bfloat16 \
  --input_length 512 --target_length 128 --rows 16 --steps 5 $hf_flag
run decode 170 python benchmarks/decode.py --repeats 5
