#!/usr/bin/env bash
# Run a benchmark script against FlashInfer 0.2.6 (the base of MetaX's port) on a CUDA 13 machine.
#
# 0.2.6 JIT-compiles its kernels with nvcc. CUDA 13's nvcc makes __global__ function templates
# static by default (-static-global-template-stub=true), and 0.2.6 declares its kernel templates
# in one translation unit and instantiates them in another, so every link fails with
# "relocation R_X86_64_PC32 against undefined hidden symbol ...Kernel...". Passing
# -static-global-template-stub=false restores the old behaviour; nothing else is changed.
#
#   WHEEL_DIR=.whl026 benchmarks/flashinfer026_on_cuda13.sh bench_batch_decode.py --preset smoke
#   benchmarks/flashinfer026_on_cuda13.sh    # no arguments: install (once) and print the version
#
# The wheel is built here from the 0.2.6 sdist (pip wheel --no-deps --no-build-isolation, after
# adding the empty 3rdparty/spdlog/include folder the sdist lacks).
set -euo pipefail
WHEEL_DIR=${WHEEL_DIR:-.whl026}
SITE=${SITE:-/tmp/site026}
if [ ! -d "$SITE/flashinfer" ]; then  # install and patch once; later calls may run in parallel
  python3 -m pip install -q --no-index --no-deps --target "$SITE" "$WHEEL_DIR"/*.whl
  sed -i 's/"-use_fast_math",/"-use_fast_math", "-static-global-template-stub=false",/' \
    "$SITE/flashinfer/jit/core.py"
fi
grep -q static-global-template-stub "$SITE/flashinfer/jit/core.py"
export PYTHONPATH="$SITE" FLASHINFER_WORKSPACE_BASE="${FLASHINFER_WORKSPACE_BASE:-/tmp/jit026}"
export PATH="$SITE/bin:$PATH"
python3 -c 'import flashinfer; print("flashinfer", flashinfer.__version__)'
[ $# -eq 0 ] && exit 0  # no script: install only
exec python3 "$@"
