"""The head-to-head, serving and sharding features' numbers at reduced scope, in one GPU call
of about 9.5 minutes on a fresh H200:

1. FlashInfer's JIT cache for the default preset;
2. head to head, interleaved A/A over the decode script's default cases (+ the cost ratio);
3. head to head, the same kernel plus a 2 % spin against itself (decode);
4. the serving preset twice (``--imbalance``, ``--min-time-ms 100``) and the 5 % A/A gate;
5. ``torchrun --nproc-per-node 1`` over the smoke preset against a plain run (5 % gate).

    python -m validation features WORK_DIR

Each step has its own time limit, so a slow one leaves the rest their share; each step's log is
WORK_DIR/<step>.log and its files are under WORK_DIR.  Exit 0 when every step exited 0, else 1.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from validation.jit import warm_jit
from validation.running import SCRIPTS, python, run_logged, tail


@dataclass(frozen=True)
class Step:
    """One part of the call: ``python -m validation PART ARGS`` within ``limit_s``."""

    name: str
    part_args: tuple[str, ...]  # after the part; {w} is WORK_DIR
    limit_s: float
    shown_lines: int


STEPS = (
    Step("h2h_aa", ("head-to-head", "{w}/h2h", "--part", "aa", "--scripts", "decode"), 150, 25),
    Step("h2h_spin", ("head-to-head", "{w}/h2h", "--part", "spin", "--scripts", "decode"), 80, 12),
    Step(
        "serving",
        ("serving", "{w}/serving", "--steps", "a,b,report", "--sweep-args", "--min-time-ms 100"),
        130,
        20,
    ),
    Step("sharded", ("sharded", "{w}/sharded", "--mode", "one"), 60, 12),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m validation features", description=__doc__.partition("\n\n")[0]
    )
    parser.add_argument("work", type=Path)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    started, status = time.monotonic(), 0
    print(f"[0 s] jit: {warm_jit(args.work / 'jit_warm', SCRIPTS, 'default'):.0f} s", flush=True)
    for step in STEPS:
        print(f"[{time.monotonic() - started:.0f} s] {step.name}", flush=True)
        part = [a.replace("{w}", str(args.work)) for a in step.part_args]
        log = args.work / f"{step.name}.log"
        done = run_logged(python("-m", "validation", *part), log, step.limit_s)
        print(f"exit {done.exit_code}\n{tail(log, step.shown_lines)}", flush=True)
        status |= int(done.exit_code != 0)
    print(f"[{time.monotonic() - started:.0f} s] done")
    return status
