#!/usr/bin/env bash
# Compile FlashInfer's kernel variants for a preset of all four scripts in parallel (one process
# per script), so that the timed sweeps that follow find the JIT cache warm. Timing here is
# minimal and its CSVs go to a scratch folder: the GPU is shared by four processes.
#
#   benchmarks/jit_warm.sh [preset] [scratch dir]
#   PYTHON=benchmarks/flashinfer026_on_cuda13.sh benchmarks/jit_warm.sh smoke   # FlashInfer 0.2.6
set -uo pipefail
PRESET=${1:-default}
SCRATCH=${2:-/tmp/jit_warm}
mkdir -p "$SCRATCH"
for script in bench_batch_decode.py bench_batch_prefill_paged.py bench_batch_prefill_ragged.py \
  bench_batch_mla.py; do
  ${PYTHON:-python3} "$script" --preset "$PRESET" --no-check --sustain-ms 0 --min-measure-ms 0 \
    --max-time-per-case 0.05 --output-dir "$SCRATCH" >"$SCRATCH/${script%.py}.log" 2>&1 &
done
status=0
for job in $(jobs -p); do wait "$job" || status=1; done
tail -n 2 "$SCRATCH"/*.log
exit $status
