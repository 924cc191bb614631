"""``python -m validation PART [options]``: one part of the GPU validation (``--help`` lists them)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    """A validation part: the module whose ``main(argv) -> int`` runs it, and what it measures."""

    module: str
    measures: str


PARTS = {
    "harness": Part("harness", "cost, repeatability, false alarms and fidelity of default sweeps"),
    "head-to-head": Part(
        "head_to_head", "interleaved A/A, sensitivity to a 2 % spin, cost, fa2 vs fa3"
    ),
    "gate-sensitivity": Part(
        "gate_sensitivity", "the regression gate against injected 3/5/8 % slowdowns"
    ),
    "throttle-policy": Part(
        "throttle_policy", "--throttle-policy off/discard/pause on power-capped cases"
    ),
    "energy": Part("energy_check", "energy_mJ's repeatability and agreement with integrated power"),
    "integrity": Part(
        "integrity", "GPU exploits, false flags over the default preset, the checks' cost"
    ),
    "serving": Part(
        "serving", "serving batches twice with --imbalance, their summary and A/A gate"
    ),
    "imbalance": Part("imbalance", "the imbalance table of serving sweeps' CSVs (no GPU)"),
    "sharded": Part("sharded", "torchrun sweeps on one or two GPUs against one process"),
    "shard-report": Part(
        "shard_report", "a sharded run's shards and cases against one process (no GPU)"
    ),
    "full-preset": Part("full_preset", "the full preset's predicted and measured sweep time"),
    "history-series": Part(
        "history_series",
        "the same sweep in fresh processes again and again: a real run history, its noise, the gate",
    ),
    "features": Part(
        "features", "head to head, serving and sharding at reduced scope, in one call"
    ),
}


def usage() -> str:
    width = max(map(len, PARTS))
    lines = [f"  {name:<{width}}  {part.measures}" for name, part in PARTS.items()]
    return (
        "usage: python -m validation PART [options]   (PART --help for its options)\n\nparts:\n"
        + "\n".join(lines)
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    part = PARTS.get(argv[0])
    if part is None:
        print(f"error: unknown part {argv[0]!r}; choose from {', '.join(PARTS)}", file=sys.stderr)
        return 2
    sys.argv[0] = f"python -m validation {argv[0]}"  # the part's usage lines name it so
    return importlib.import_module(f"validation.{part.module}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
