"""The full preset of all four scripts on one GPU, for ``benchmarks/shard_balance.py``: the
predicted and the measured sweep wall time of what ran.

    python -m validation full-preset WORK_DIR [--shard I/N] [--sweep-args '...']

With ``--shard I/N`` only shard I of N runs (the full preset predicts about 391 s of sweeps on
an H200, so on a fresh machine, where the JIT compile comes first, two calls with 0/2 and 1/2
fit a 10-minute call); the CSVs of both calls in one folder are the whole preset.  Then, on any
machine: ``python benchmarks/shard_balance.py WORK_DIR``.  Exit: bench_all.py's.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from validation.jit import gpu_available, warm_jit
from validation.running import ROOT, SCRIPTS, python, run_logged
from validation.sweep_log import sweep_wall_s


def predicted(shard: str, extra: Sequence[str]) -> str:
    """bench_all.py's own prediction of the shard's sweep time (the first line of --list)."""
    argv = python("bench_all.py", "--preset", "full", "--list", "--shard", shard, *extra)
    listing = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True).stdout
    return listing.partition("\n")[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m validation full-preset", description=__doc__.partition("\n\n")[0]
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--shard", help="I/N: only this shard")
    parser.add_argument("--sweep-args", default="", help="more options for both calls, one string")
    args = parser.parse_args(argv)
    extra = shlex.split(args.sweep_args)
    args.out.mkdir(parents=True, exist_ok=True)
    if gpu_available():  # the full preset uses the default preset's kernel variants
        with tempfile.TemporaryDirectory() as scratch:
            warm_jit(Path(scratch), SCRIPTS, "default")
    shard = ["--shard", args.shard] if args.shard else []
    log = args.out / f"measure_full{'_' + args.shard.replace('/', 'of') if args.shard else ''}.log"
    sweep = python(
        "bench_all.py", "--preset", "full", "--output-dir", str(args.out), *shard, *extra
    )
    done = run_logged(sweep, log)
    sweeps_s = sweep_wall_s(log.read_text(errors="replace"))
    print(f"predicted: {predicted(args.shard or '0/1', extra)}")
    csvs = len(list(args.out.glob("*.csv")))
    print(
        f"measured:  bench_all.py exit {done.exit_code}, {done.wall_s:.0f} s wall, its sweeps "
        f"{sweeps_s:.0f} s; {csvs} CSV(s) in {args.out}"
    )
    return done.exit_code
