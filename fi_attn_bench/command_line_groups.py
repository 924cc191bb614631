"""Argument groups of the four scripts' command line that stand apart from the sweep's core
options: serving-shaped batches and FlashInfer-Bench datasets (``command_line`` builds the
parser)."""

from __future__ import annotations

import argparse


def add_serving_arguments(parser: argparse.ArgumentParser) -> None:
    """Varied-length batches (README, "Serving-shaped batches")."""
    group = parser.add_argument_group("serving-shaped batches")
    group.add_argument(
        "--batch",
        action="append",
        default=[],
        metavar="SPEC",
        help="a varied-length batch instead of the preset, e.g. '8d@4k+2p512@2k' or "
        "'64d@lognormal:median=1k,sigma=1,min=16,max=32k' (repeatable; lengths drawn from --seed)",
    )
    group.add_argument(
        "--workload",
        action="append",
        default=[],
        metavar="FILE[:LINE]",
        help="JSON Lines file, one batch per line (ours or flashinfer-bench's); each line is a case",
    )
    group.add_argument(
        "--imbalance",
        action="store_true",
        help="also time each varied case's uniform twin (as many requests and tokens) and "
        "write uniform_twin_ms and imbalance_pct",
    )


def add_fib_arguments(parser: argparse.ArgumentParser) -> None:
    """FlashInfer-Bench datasets in and traces out (docs/FIB.md)."""
    group = parser.add_argument_group("FlashInfer-Bench (docs/FIB.md)")
    group.add_argument(
        "--fib",
        metavar="DIR",
        help="a FlashInfer-Bench dataset (definitions/, workloads/, solutions/) or a "
        "FLASHINFER_TRACE_DUMP_DIR: each workload of a definition this script measures is a "
        "case, on the workload's own inputs; its solutions can run as --impl fib:NAME",
    )
    group.add_argument(
        "--fib-traces",
        metavar="DIR",
        help="write one FlashInfer-Bench trace per case and implementation into DIR/traces/ "
        "(new files only; intervals and noise beside them in DIR/fi-attn-bench/)",
    )
