"""A run history on a real GPU: the same sweep again and again, each in a fresh process, as a
CI job would run it, so the change-point detector can be measured on real noise.

    python -m validation history-series OUT_DIR [--for-seconds 480] [--runs 200]
        [--sweep-args '--scripts bench_batch_decode bench_batch_prefill_ragged ...']

Each run is ``bench_all.py SWEEP_ARGS --output-dir OUT_DIR/runs/<UTC time>``; no new run
starts once ``--for-seconds`` have passed, so a device call cut at its limit keeps every whole
run.  ``benchmarks/history_detection.py --real OUT_DIR/runs`` reads them (steps are injected
there; the runs themselves are step-free).  Exit 0 when every run exited 0, else 1; 2 bad
arguments, or sweep options the first run refused.
"""

from __future__ import annotations

import argparse
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from validation.running import python, run_logged, tail

SWEEP_ARGS = (
    "--scripts bench_batch_decode bench_batch_prefill_ragged --preset default "
    "--min-time-ms 100 --no-check"
)  # memory-bound decode and power-capped prefill; a fifth of the default timing budget


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m validation history-series", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("out", type=Path, help="folder for runs/ and the logs")
    parser.add_argument("--for-seconds", type=float, default=480.0)
    parser.add_argument("--runs", type=int, default=200, help="at most this many runs")
    parser.add_argument("--run-timeout", type=float, default=240.0, help="seconds per run")
    parser.add_argument("--sweep-args", default=SWEEP_ARGS)
    arguments = parser.parse_args(argv)
    if arguments.runs < 1 or arguments.for_seconds <= 0:
        parser.error("--runs and --for-seconds must be positive")
    return arguments


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_args(argv or [])
    runs = arguments.out / "runs"
    deadline = time.monotonic() + arguments.for_seconds
    failed = 0
    for index in range(arguments.runs):
        if time.monotonic() >= deadline:
            break
        name = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{index:03d}"  # sorts by time
        argv = python(
            "bench_all.py", *shlex.split(arguments.sweep_args), "--output-dir", str(runs / name)
        )
        done = run_logged(argv, arguments.out / "logs" / f"{name}.log", arguments.run_timeout)
        failed += done.exit_code != 0
        print(f"run {index + 1} ({name}): exit {done.exit_code}, {done.wall_s:.1f} s", flush=True)
        if done.exit_code:
            print(tail(arguments.out / "logs" / f"{name}.log", 5))
        if done.exit_code == 2:  # the sweep's options were refused: every run would be
            return 2
    return 1 if failed else 0
