#!/usr/bin/env bash
# One device call on the lent H200: warm FlashInfer's JIT cache, then validate the harness.
#
#   source .whl/preamble.sh && benchmarks/h200_session.sh BUDGET_S [h200_validate.py options]
#
# A fresh machine has no JIT cache; the four default sweeps compile about 5 minutes of kernel
# variants one after the other. Here the four scripts' default presets first run side by side
# with the cheapest timing (their numbers are thrown away), so the compiles overlap; FlashInfer
# guards each module's build with a file lock. The cache is then packed into $OUT/jit.tgz for
# the next call (docs/GPU_RUNS.md). If .whl/jit.tgz was carried, it is unpacked instead.
#
# Then h200_validate.py runs with --deadline-s set so that the call ends inside BUDGET_S, and
# everything it wrote is packed into $OUT/v.tgz (the device tool returns at most 8 files).
set -uo pipefail
budget_s="${1:?usage: h200_session.sh BUDGET_S [h200_validate.py options]}"
shift
started=$(date +%s)
elapsed() { echo $(($(date +%s) - started)); }
out="${OUT:-/tmp/out}"
mkdir -p "$out" /tmp/v /tmp/warm .whl/cache
cp benchmarks/results/peaks_h200.json .whl/cache/peaks.json
export FI_ATTN_BENCH_CACHE="$PWD/.whl/cache"

if [[ -f .whl/jit.tgz ]]; then
  # The preamble reinstalled FlashInfer's sources with fresh timestamps: backdate them so
  # ninja keeps the carried objects.
  find /tmp/site -type f -exec touch -d '2020-01-01' {} + 2>/dev/null
  tar xzf .whl/jit.tgz -C .whl
  echo "jit: cache unpacked"
else
  for script in bench_batch_decode.py bench_batch_prefill_paged.py bench_batch_prefill_ragged.py bench_batch_mla.py; do
    timeout 420 python3 "$script" --preset default --timer events --min-time-ms 0 \
      --enough-samples 10 --sustain-ms 0 --warmup-ms 1 --no-check --max-time-per-case 0.05 \
      --output "/tmp/warm/${script%.py}.csv" > "/tmp/warm/${script%.py}.log" 2>&1 &
  done
  wait
  echo "jit: compiled in $(elapsed) s"
  tail -n 1 /tmp/warm/*.log
  tar czf "$out/jit.tgz" -C .whl jit
fi

left=$((budget_s - $(elapsed)))
echo "validate: $left s left"
timeout $((left - 15)) python3 benchmarks/h200_validate.py --out /tmp/v --report /tmp/v/validation.md \
  --deadline-s $((left - 150)) "$@" > /tmp/v/log.txt 2>&1
echo "validate: rc $? after $(elapsed) s"
tail -n 3 /tmp/v/log.txt
tar czf "$out/v.tgz" -C /tmp v
