#!/usr/bin/env bash
# Sharded sweeps on the GPU (issues 25 and 26), each against a one-process run at the 5 % gate.
#
#   source .whl/preamble.sh >/dev/null && benchmarks/sharded_two_gpu.sh WORK_DIR [two|one|both]
#
# two  (issue 26, needs 2 GPUs): torchrun --nproc-per-node 2 over the default preset of all four
#      scripts into WORK_DIR/two/A, then one process of the same preset into WORK_DIR/two/B; prints
#      each shard's CSV, device name and cuda:N, what both GPUs' utilization reached during A,
#      whether the shards hold B's cases once each, both wall times and their ratio; then
#      summarize_results.py --baseline B --candidate A --fail-on-regression 5.
# one  (issue 25, one GPU): torchrun --nproc-per-node 1 over the smoke preset against a plain run
#      of it, the same checks.
# both (default): one, then two when two GPUs are visible.
#
# FlashInfer's JIT cache: unpacked from .whl/jit.tgz when carried (benchmarks/jit_ready.sh), else the
# default preset is compiled first by benchmarks/jit_ready.sh (about 3.5 minutes on an H200).
# Everything written under WORK_DIR comes back as $OUT/sharded.tgz when $OUT is set.
# Exit status: 0 when every part ran with the same cases and no regression, else 1.
set -uo pipefail
out="${1:?usage: sharded_two_gpu.sh WORK_DIR [two|one|both]}"
mode="${2:-both}"
py="${PYTHON:-python3}"
mkdir -p "$out"
status=0

extra=(${BENCH_EXTRA:-})  # options for every sweep, e.g. "--device cpu --preset cpu" (a CPU dry run)

gpus=$("$py" -c 'import torch; print(torch.cuda.device_count())')
echo "GPUs visible: $gpus"
nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader 2>/dev/null

source benchmarks/jit_ready.sh
jit_ready default /tmp/jit_warm_default

# timed DIR LOG CMD...: runs CMD with its output in LOG, prints and stores its wall seconds
timed() {
  local dir="$1" log="$2"
  shift 2
  mkdir -p "$dir"
  local t0 t1
  t0=$(date +%s%N)
  "$@" >"$log" 2>&1
  local rc=$?
  t1=$(date +%s%N)
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  echo "  $(basename "$dir"): exit $rc, ${wall} s  ($*)"
  [[ $rc -eq 0 ]] || { status=1; tail -n 5 "$log"; }
}

# part NAME NPROC PRESET: sharded run into A, one process into B, then the checks
part() {
  local name="$1" nproc="$2" preset="$3" dir="$out/$1"
  echo
  echo "== $name: torchrun --nproc-per-node $nproc vs one process, preset $preset"
  rm -rf "$dir" && mkdir -p "$dir"
  nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader -lms 500 \
    >"$dir/gpu_use.csv" 2>/dev/null &
  local smi=$!
  timed "$dir/A" "$dir/A.out" "$py" -m torch.distributed.run --nproc-per-node "$nproc" \
    bench_all.py --preset "$preset" --output-dir "$dir/A" "${extra[@]}"
  local wall_a=$wall
  kill "$smi" 2>/dev/null
  timed "$dir/B" "$dir/B.out" "$py" bench_all.py --preset "$preset" --output-dir "$dir/B" \
    "${extra[@]}"
  local wall_b=$wall
  echo "GPU utilization during A (highest %, most memory MiB per GPU index):"
  awk -F', ' '{u=$2+0; m=$3+0; if (u>U[$1]) U[$1]=u; if (m>M[$1]) M[$1]=m}
    END {for (i in U) printf "  cuda:%s  %d %%  %d MiB\n", i, U[i], M[i]}' "$dir/gpu_use.csv"
  "$py" benchmarks/shard_run_report.py --sharded "$dir/A" --single "$dir/B" \
    --rank0-log "$dir/A.out" --sharded-wall-s "$wall_a" --single-wall-s "$wall_b" \
    | tee "$dir/report.txt" || status=1
  "$py" summarize_results.py --baseline "$dir"/B/*.csv --candidate "$dir"/A/*.csv \
    --fail-on-regression 5 --output "$dir/regression.md" >"$dir/summarize.out" 2>&1
  local rc=$?
  echo "summarize_results.py --fail-on-regression 5: exit $rc ($dir/regression.md)"
  tail -n 8 "$dir/summarize.out"
  [[ $rc -eq 0 ]] || status=1
}

if [[ "$mode" == one || "$mode" == both ]]; then
  part one 1 smoke
fi
if [[ "$mode" == two || "$mode" == both ]]; then
  if [[ "$gpus" -ge 2 || "$mode" == two ]]; then
    part two 2 default
  else
    echo "two: skipped, $gpus GPU(s) visible (needs nvidia-h200-x2; 'two' forces it)"
  fi
fi
if [[ -n "${OUT:-}" ]]; then  # the device tool brings back $OUT: one archive of everything
  tar czf "$OUT/sharded.tgz" -C "$(dirname "$out")" "$(basename "$out")" 2>/dev/null
fi
exit $status
