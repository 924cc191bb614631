#!/usr/bin/env bash
# Measure the full preset of all four scripts on one GPU, for benchmarks/shard_balance.py.
#
#   source .whl/preamble.sh >/dev/null && benchmarks/measure_full.sh WORK_DIR [I/N]
#
# With I/N, only shard I of N (--shard): the full preset predicts about 391 s of sweeps on an
# H200 (bench_all.py --preset full --list --shard 0/1), so on a fresh machine, where the JIT
# compile comes first (~3.5 min), two calls with 0/2 and 1/2 (~195 s each) stay inside a
# 10-minute call; the CSVs of both calls in one directory are the whole preset.  Prints the
# predicted and the measured sweep wall time of what it ran; CSVs and the log go to WORK_DIR,
# and into $OUT/full[_IofN].tgz when $OUT is set.
# Then, on any machine: python benchmarks/shard_balance.py DIR_WITH_BOTH_CALLS_CSVS
set -uo pipefail
out="${1:?usage: measure_full.sh WORK_DIR [I/N]}"
shard=()
[[ -n "${2:-}" ]] && shard=(--shard "$2")
py="${PYTHON:-python3}"
extra=(${BENCH_EXTRA:-})  # options for both calls, e.g. "--device cpu --preset cpu" (a CPU dry run)
log="$out/measure_full${2:+_${2/\//of}}.log"
mkdir -p "$out"
source benchmarks/jit_ready.sh
jit_ready default /tmp/jit_warm_default  # full uses the same kernel variants (head dims, heads)
predicted=$("$py" bench_all.py --preset full --list --shard "${2:-0/1}" "${extra[@]}" | awk 'NR == 1')
started=$(date +%s)
"$py" bench_all.py --preset full --output-dir "$out" "${shard[@]}" "${extra[@]}" \
  >"$log" 2>&1
rc=$?
wall=$(($(date +%s) - started))
sweeps=$(grep -o 'Sweep wall time [0-9.]* s' "$log" | awk '{s += $4} END {printf "%.0f", s}')
echo "predicted: $predicted"
echo "measured:  bench_all.py exit $rc, ${wall} s wall, its sweeps ${sweeps} s; $(ls "$out"/*.csv | wc -l) CSV(s) in $out"
if [[ -n "${OUT:-}" ]]; then  # the device tool brings back $OUT: one archive per call
  tar czf "$OUT/full${2:+_${2/\//of}}.tgz" -C "$(dirname "$out")" "$(basename "$out")"
fi
exit $rc
