"""Measure this GPU's copy bandwidth and dense GEMM rate and record them.

Run once per device, on the GPU machine, from the repository root:

    python3 benchmarks/measure_peaks.py --markdown peaks.md

It measures the device-to-device copy once and the dense GEMM for bf16 and fp16
(``fi_attn_bench.device.peaks.measure_peaks``), prints the published table and the measured one
(device, dtype, copy GB/s, GEMM TFLOP/s, share of published, date, torch version),
and caches the numbers (``$FI_ATTN_BENCH_CACHE`` or ``~/.cache/fi-attn-bench``) so
that later runs fill the ``pct_peak_*`` columns. Any ``fi-attn-peaks`` option may
follow (``--device cuda:1``, ``--gemm-n 4096``, ``--reps 100``...). Exit 2 without a GPU.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fi_attn_bench.device import peaks

DEFAULT_ARGS = ("--dtype", "bf16", "fp16", "--save", "--show")


def main(argv: Sequence[str] | None = None) -> int:
    extra = list(sys.argv[1:] if argv is None else argv)
    return peaks.main([*DEFAULT_ARGS, *extra])


if __name__ == "__main__":
    sys.exit(main())
