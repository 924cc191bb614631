#!/usr/bin/env bash
# One GPU call (about 9.5 min on a fresh H200) that measures what the head-to-head, serving and
# sharding features promise, at reduced scope so it fits the device's 10-minute limit:
#   1. FlashInfer's JIT cache for the default preset (benchmarks/jit_ready.sh);
#   2. head to head, interleaved A/A over the decode script's default cases (+ the cost ratio);
#   3. head to head, the same kernel plus a 2 % spin against itself (decode);
#   4. the serving preset twice (--imbalance, --min-time-ms 100) and the 5 % A/A gate;
#   5. torchrun --nproc-per-node 1 over the smoke preset against a plain run (5 % gate).
# Each step has its own time limit, so a slow one leaves the rest their share; whatever ran is
# packed into $OUT/features.tgz (or WORK_DIR/features.tgz without $OUT).
#
#   source .whl/preamble.sh >/dev/null && benchmarks/validate_features.sh WORK_DIR
set -uo pipefail
work="${1:?usage: validate_features.sh WORK_DIR}"
mkdir -p "$work"
started=$(date +%s)
stamp() { echo "[$(($(date +%s) - started)) s] $*"; }

source benchmarks/jit_ready.sh
stamp "jit"
jit_ready default "$work/jit_warm" >"$work/jit.log" 2>&1
tail -1 "$work/jit.log"

stamp "head to head: A/A (decode)"
timeout 150 python3 benchmarks/head_to_head.py "$work/h2h" --part aa --scripts decode >"$work/h2h_aa.log" 2>&1
echo "exit $?"; tail -25 "$work/h2h_aa.log"

stamp "head to head: 2 % spin (decode)"
timeout 80 python3 benchmarks/head_to_head.py "$work/h2h" --part spin --scripts decode >"$work/h2h_spin.log" 2>&1
echo "exit $?"; tail -12 "$work/h2h_spin.log"

stamp "serving A/A"
SWEEP_ARGS="--min-time-ms 100" timeout 130 benchmarks/serving_sweep.sh "$work/serving" a b report >"$work/serving.log" 2>&1
echo "exit $?"; grep -E "A/A gate|Verdict|imbalance|wall time" "$work/serving.log" | head -20

stamp "torchrun smoke"
timeout 60 benchmarks/sharded_two_gpu.sh "$work/sharded" one >"$work/sharded.log" 2>&1
echo "exit $?"; tail -12 "$work/sharded.log"

stamp "packing"
rm -rf "$work/jit_warm"
tar czf "${OUT:-$work}/features.tgz" -C "$work" --exclude=features.tgz . && stamp "done"
