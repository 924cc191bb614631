# Sourced by GPU scripts: make FlashInfer's JIT cache ready before timed sweeps.
# .whl/jit.tgz carried (a tar of the cache, docs/VALIDATION.md "Measuring them again"): backdate
# the reinstalled sources and unpack it; otherwise, with a GPU, compile PRESET's kernels: the
# four scripts side by side at the cheapest timing (benchmarks/validate_harness.py's warm-up
# options; ~3.5 min on an H200 for the default preset), CSVs and logs in SCRATCH_DIR.
# Usage: jit_ready PRESET SCRATCH_DIR
jit_ready() {
  local preset="$1" scratch="$2" started script status=0
  if [[ -f .whl/jit.tgz && ! -f ".whl/jit/.ready_$preset" ]]; then
    find /tmp/site -type f -exec touch -d '2020-01-01' {} + 2>/dev/null
    tar xzf .whl/jit.tgz -C .whl && touch ".whl/jit/.ready_$preset" && echo "jit: cache unpacked"
  elif [[ ! -f ".whl/jit/.ready_$preset" ]] && "${PYTHON:-python3}" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
    started=$(date +%s)
    mkdir -p "$scratch"
    local pids=()
    for script in bench_batch_decode.py bench_batch_prefill_paged.py \
      bench_batch_prefill_ragged.py bench_batch_mla.py; do
      "${PYTHON:-python3}" "$script" --preset "$preset" --timer events --no-check \
        --warmup-ms 1 --sustain-ms 0 --min-time-ms 0 --enough-samples 10 \
        --max-time-per-case 0.05 --output-dir "$scratch" >"$scratch/${script%.py}.log" 2>&1 &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    echo "jit: compiled in $(($(date +%s) - started)) s (exit $status; logs in $scratch)"
    # a marker, not the folder: importing flashinfer creates .whl/jit before anything is compiled
    [[ $status -eq 0 ]] && mkdir -p .whl/jit && touch ".whl/jit/.ready_$preset"
  fi
}
