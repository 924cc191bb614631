#!/usr/bin/env bash
# The serving preset of all four scripts with --imbalance, twice (an A/A pair), then the
# summary with plots, the imbalance table and plot, and the summarizer's 5 % gate between the
# two sweeps (README, "Serving-shaped batches").
#
#   benchmarks/serving_sweep.sh OUT_DIR [warm] [a] [b] [report]      (default: all four steps)
#
#   warm    compile FlashInfer's kernels for the preset: one short unchecked serving sweep into a
#           temporary directory (removed after; its log is OUT_DIR/jit_warm.log)
#   a, b    one serving sweep each: bench_all.py --preset serving --imbalance -> OUT_DIR/a, /b
#   report  OUT_DIR/summary.md + plots/, imbalance.md + imbalance.png, aa.md + aa.json (A/A
#           gate: summarize_results.py --fail-on-regression 5; its exit code is printed)
#
# SWEEP_ARGS (e.g. "--device cpu --filter batch_size<=4") is appended to each sweep's command.
# Everything is packed into OUT_DIR/serving.tgz at the end. Exit: 0 when both sweeps had no
# failed case and the A/A gate passed, else 1.
set -uo pipefail
OUT="${1:?usage: benchmarks/serving_sweep.sh OUT_DIR [warm] [a] [b] [report]}"
shift
STEPS="${*:-warm a b report}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
status=0
started=$(date +%s)
stamp() { echo "[$(($(date +%s) - started)) s] $*"; }

for step in $STEPS; do
  case "$step" in
  warm)
    stamp "warm: JIT for the serving preset"
    warm_dir=$(mktemp -d)
    $PY bench_all.py --preset serving --imbalance --timer events --no-check --warmup-ms 1 \
      --sustain-ms 0 --min-time-ms 0 --enough-samples 10 --max-time-per-case 0.05 \
      --output-dir "$warm_dir" ${SWEEP_ARGS:-} >"$OUT/jit_warm.log" 2>&1 ||
      echo "warm: a case failed (see $OUT/jit_warm.log)"
    rm -rf "$warm_dir"
    ;;
  a | b)
    stamp "sweep $step"
    $PY bench_all.py --preset serving --imbalance --output-dir "$OUT/$step" ${SWEEP_ARGS:-} >"$OUT/$step.log" 2>&1 || status=1
    grep -E "^\[|wall time|failed" "$OUT/$step.log" | cut -c1-160
    ;;
  report)
    stamp "report"
    $PY summarize_results.py "$OUT"/a/*.csv --output "$OUT/summary.md" --plot-dir "$OUT/plots" || status=1
    $PY benchmarks/serving_report.py "$OUT" "$OUT"/a/*.csv || status=1
    if [[ -d "$OUT/b" ]]; then
      $PY summarize_results.py --baseline "$OUT"/a/*.csv --candidate "$OUT"/b/*.csv \
        --fail-on-regression 5 --output "$OUT/aa.md" --json "$OUT/aa.json"
      gate=$?
      echo "A/A gate (5 %): exit $gate"
      head -n 12 "$OUT/aa.md"
      [[ $gate -eq 0 ]] || status=1
    fi
    ;;
  *)
    echo "unknown step $step (warm, a, b, report)" >&2
    exit 2
    ;;
  esac
done
tar czf "$OUT/serving.tgz" -C "$OUT" --exclude serving.tgz . 2>/dev/null
stamp "done, exit $status"
exit $status
