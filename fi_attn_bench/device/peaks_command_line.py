"""fi-attn-peaks' command line: parsed once into a frozen ``PeaksRequest``.  The words a user
types live here: the GEMM dtype names and the cache's environment variable."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fi_attn_bench import VERSION_TEXT
from fi_attn_bench.program import program_name as shared_program_name

CACHE_ENV = "FI_ATTN_BENCH_CACHE"
DTYPE_ALIASES: Mapping[str, str] = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "torch.bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "torch.float16": "float16",
}


@dataclass(frozen=True)
class PeaksRequest:
    """What to print, measure and keep; None sizes take the device's defaults."""

    device: str
    dtypes: tuple[str, ...]
    save: bool
    show: bool
    markdown: Path | None
    copy_mib: int | None
    gemm_n: int | None
    reps: int | None
    published_only: bool


def program_name(argv0: str) -> str:
    """How the user ran this program: the console script's name, or ``python -m ...``."""
    return shared_program_name("python -m fi_attn_bench.device.peaks", argv0)


def prog() -> str:
    return program_name(sys.argv[0] if sys.argv else "")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog(),
        description="Measure a device's copy bandwidth and dense GEMM rate, print them as "
        "a Markdown table and optionally cache them for pct_peak_* columns.",
    )
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    parser.add_argument("--device", default="cuda", help="torch device (default: cuda)")
    parser.add_argument(
        "--dtype",
        nargs="+",
        default=["bf16"],
        choices=sorted(DTYPE_ALIASES),
        help="GEMM dtype(s) (default: bf16); the copy is measured once for all",
    )
    parser.add_argument("--save", action="store_true", help=f"write to the cache ({CACHE_ENV})")
    parser.add_argument("--show", action="store_true", help="also print the published peaks table")
    parser.add_argument("--markdown", type=Path, help="also write the measured table here")
    parser.add_argument("--copy-mib", type=int, help="copy size in MiB (default 1024 on GPU)")
    parser.add_argument("--gemm-n", type=int, help="GEMM size n (default 8192 on GPU)")
    parser.add_argument("--reps", type=int, help="timed calls per measurement")
    parser.add_argument(
        "--published-only", action="store_true", help="print the published table; measure nothing"
    )
    return parser


def parse_peaks_command_line(argv: Sequence[str] | None = None) -> PeaksRequest:
    """The request; argparse exits (0 after --help, 2 after a bad argument)."""
    args = build_parser().parse_args(argv)
    return PeaksRequest(
        device=args.device,
        dtypes=tuple(args.dtype),
        save=args.save,
        show=args.show,
        markdown=args.markdown,
        copy_mib=args.copy_mib,
        gemm_n=args.gemm_n,
        reps=args.reps,
        published_only=args.published_only,
    )
