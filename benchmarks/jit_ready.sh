# Sourced by GPU scripts: make FlashInfer's JIT cache ready before timed sweeps.
# .whl/jit.tgz carried (docs/GPU_RUNS.md): backdate the reinstalled sources and unpack it;
# otherwise, with a GPU, compile PRESET's kernels with benchmarks/jit_warm.sh (~3.5 min on an
# H200 for the default preset).  Usage: jit_ready PRESET SCRATCH_DIR
jit_ready() {
  local preset="$1" scratch="$2" started
  if [[ -f .whl/jit.tgz && ! -d .whl/jit ]]; then
    find /tmp/site -type f -exec touch -d '2020-01-01' {} + 2>/dev/null
    tar xzf .whl/jit.tgz -C .whl && echo "jit: cache unpacked"
  elif [[ ! -d .whl/jit ]] && "${PYTHON:-python3}" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
    started=$(date +%s)
    benchmarks/jit_warm.sh "$preset" "$scratch" >/dev/null
    echo "jit: compiled in $(($(date +%s) - started)) s"
  fi
}
