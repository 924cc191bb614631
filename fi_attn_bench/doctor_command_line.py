"""fi-attn-bench-doctor's command line: parsed once into a frozen ``DoctorRequest``, bad
arguments refused (exit 2) before any check runs."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fi_attn_bench import VERSION_TEXT

PROG = "fi-attn-bench-doctor"


@dataclass(frozen=True)
class DoctorRequest:
    """Where the reports go and the device the checks run on."""

    output_dir: str
    device: torch.device


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Self-test of the timers, telemetry and FlashInfer API on this machine; "
        "writes a Markdown and a JSON report for bug reports.",
        epilog="Exit codes: 0 no check failed (unavailable checks included), 1 a check failed, "
        "2 bad arguments or a report that cannot be written.",
    )
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    parser.add_argument("--output-dir", default=".", help="where the reports go (default .)")
    parser.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda if available)")
    return parser


def parse_doctor_command_line(argv: Sequence[str] | None = None) -> DoctorRequest | int:
    """The request, or the exit code when there is nothing to run: 0 after --help or
    --version, 2 after a bad argument (its one-line error printed)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    if os.path.exists(args.output_dir) and not os.path.isdir(args.output_dir):
        return _refused(f"--output-dir {args.output_dir!r} is not a directory")
    try:
        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError as exc:
        return _refused(f"--device {args.device!r}: {exc}")
    if device.type == "cuda" and torch.cuda.is_available():
        if (device.index or 0) >= torch.cuda.device_count():
            return _refused(f"--device {device}: no such GPU")
    return DoctorRequest(args.output_dir, device)


def _refused(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2
