"""Serving-shaped batches: the serving preset of all four scripts with ``--imbalance``, twice
(an A/A pair), then the summary with plots, the imbalance table and the summarizer's 5 % gate
between the two sweeps.

    python -m validation serving OUT_DIR [--steps warm,a,b,report] [--sweep-args '...']

warm: compile FlashInfer's kernels for the preset (one short unchecked sweep; log in
OUT_DIR/jit_warm.log); a, b: one serving sweep each into OUT_DIR/a and OUT_DIR/b; report:
OUT_DIR/summary.md with plots/, imbalance.md (+ .png), aa.md and aa.json (A/A gate).
Exit 0 when both sweeps had no failed case and the A/A gate passed, else 1; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import shlex
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from validation import imbalance
from validation.jit import WARM_UP_OPTIONS
from validation.running import python, run_logged, tail

STEPS = ("warm", "a", "b", "report")
SWEEP = ("bench_all.py", "--preset", "serving", "--imbalance")
GATE_PCT = "5"


def warm(out: Path, extra: Sequence[str]) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        argv = python(*SWEEP, *WARM_UP_OPTIONS, "--output-dir", scratch, *extra)
        done = run_logged(argv, out / "jit_warm.log")
    if done.exit_code:
        print(f"warm: a case failed (see {out / 'jit_warm.log'})")
    return 0


def sweep(out: Path, step: str, extra: Sequence[str]) -> int:
    done = run_logged(python(*SWEEP, "--output-dir", str(out / step), *extra), out / f"{step}.log")
    print(tail(out / f"{step}.log", 8))
    return 0 if done.exit_code == 0 else 1


def report(out: Path) -> int:
    first = sorted(str(p) for p in (out / "a").glob("*.csv"))
    if not first:
        print(f"report: no CSV in {out / 'a'}")
        return 1
    status = run_logged(
        python("summarize_results.py", *first, "--output", str(out / "summary.md"),
               "--plot-dir", str(out / "plots")),
        out / "summary.log",
    ).exit_code  # fmt: skip
    status |= imbalance.main([str(out), *first])
    second = sorted(str(p) for p in (out / "b").glob("*.csv"))
    if second:
        gate = run_logged(
            python("summarize_results.py", "--baseline", *first, "--candidate", *second,
                   "--fail-on-regression", GATE_PCT, "--output", str(out / "aa.md"),
                   "--json", str(out / "aa.json")),
            out / "aa.log",
        ).exit_code  # fmt: skip
        print(f"A/A gate ({GATE_PCT} %): exit {gate}")
        print(tail(out / "aa.md", 12))
        status |= gate
    return 0 if status == 0 else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m validation serving", description=__doc__.partition("\n\n")[0]
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", default=",".join(STEPS), help="some of warm,a,b,report")
    parser.add_argument("--sweep-args", default="", help="more options for every sweep, one string")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    if unknown := sorted(set(steps) - set(STEPS)):
        parser.error(f"unknown --steps {', '.join(unknown)}; choose from {', '.join(STEPS)}")
    extra = shlex.split(args.sweep_args)
    args.out.mkdir(parents=True, exist_ok=True)
    started, status = time.monotonic(), 0
    for step in steps:
        print(f"[{time.monotonic() - started:.0f} s] {step}", flush=True)
        if step == "warm":
            status |= warm(args.out, extra)
        elif step == "report":
            status |= report(args.out)
        else:
            status |= sweep(args.out, step, extra)
    print(f"[{time.monotonic() - started:.0f} s] done, exit {status}")
    return status
