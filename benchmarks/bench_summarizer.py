"""Time summarize_results.py as users run it: whole command, wall clock and peak RSS.

    python benchmarks/bench_summarizer.py [--repeat 5] [--data-dir /tmp/fi-summarizer-bench]

Generates the CSVs once (benchmarks/gen_csvs.py: as the harness writes them, every
registered column, quoted ``repro`` and ``kernels``, 200,000 rows), runs each scenario
``--repeat`` times as a fresh process, and writes
benchmarks/results/summarizer_<date>_<time>.md with the machine description.  Wall time
is reported as the best and the median run: on a shared machine other processes only
ever add time; CPU time (user + system) is reported too.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUMMARIZER = ROOT / "summarize_results.py"
GENERATOR = ROOT / "benchmarks" / "gen_csvs.py"


@dataclass(frozen=True)
class Scenario:
    """One command to time and the limits issue 21 sets for it."""

    name: str
    args: tuple[str, ...]
    wall_limit_s: float
    rss_limit_mb: float | None
    seed_s: float | None  # the seed's time on a 2-core machine, from issue 21


@dataclass(frozen=True)
class Measurement:
    wall_s: float
    cpu_s: float
    max_rss_mb: float
    exit_code: int


def ensure_inputs(data_dir: Path) -> dict[str, Path]:
    """The input files, generated on first use."""
    files = {
        "s200k": (200_000, []),
        "c200k": (200_000, ["--candidate"]),
    }
    paths = {}
    for name, (rows, extra) in files.items():
        path = data_dir / f"{name}.csv"
        if not path.exists():
            command = [sys.executable, str(GENERATOR), "--rows", str(rows), "--out", str(path)]
            environment = {**os.environ, "PYTHONPATH": str(ROOT)}
            subprocess.run(
                [*command, "--failed-every", "1000", *extra], check=True, env=environment
            )
        paths[name] = path
    return paths


def scenarios(paths: dict[str, Path], out: Path) -> list[Scenario]:
    report = ("--output", str(out / "report.md"))
    return [
        Scenario("summary 200k rows", (str(paths["s200k"]), *report), 1.3, 400.0, 6.76),
        Scenario(
            "regression 200k vs 200k",
            ("--baseline", str(paths["s200k"]), "--candidate", str(paths["c200k"]))
            + ("--fail-on-regression", "5", *report),
            2.5,
            700.0,
            65.5,
        ),
    ]


def measure(args: tuple[str, ...], command: tuple[str, ...] | None = None) -> Measurement:
    """One fresh process: wall time, CPU time and peak RSS from wait4."""
    start = time.perf_counter()
    process = subprocess.Popen(
        list(command or (sys.executable, str(SUMMARIZER), *args)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    return Measurement(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        max_rss_mb=usage.ru_maxrss / 1024.0,
        exit_code=process.returncode,
    )


def floor(repeat: int) -> str:
    """What no summary can beat: the interpreter starting and importing numpy."""
    runs = [measure((), (sys.executable, "-c", "import numpy")).wall_s for _ in range(repeat)]
    return (
        f"- Floor, `python -c 'import numpy'`: best {min(runs):.2f} s, "
        f"median {statistics.median(runs):.2f} s"
    )


def commit() -> str:
    """The commit measured, and whether the working tree differed from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--",
                "summarize_results.py",
                "fi_attn_bench/summarizer",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout.strip()
    except OSError:
        return "- Commit: unknown (no git)"
    return f"- Commit: `{head or 'unknown'}`" + (
        " plus uncommitted summarizer changes" if dirty else ""
    )


def machine() -> list[str]:
    import numpy
    import pandas

    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return [
        f"- CPU: {model}; nproc: {os.cpu_count()}",
        f"- Python {platform.python_version()}, pandas {pandas.__version__}, numpy {numpy.__version__}",
        f"- OS: {platform.platform()}",
        f"- Load average when started: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
    ]


def table(results: list[tuple[Scenario, list[Measurement]]]) -> list[str]:
    lines = [
        "| Scenario | Best wall s | Median wall s | Limit s | Seed s | CPU s (best run) "
        "| Peak RSS MB | RSS limit MB | Exit | Within limits |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for scenario, runs in results:
        best = min(runs, key=lambda run: run.wall_s)
        rss = max(run.max_rss_mb for run in runs)
        ok = best.wall_s <= scenario.wall_limit_s and (
            scenario.rss_limit_mb is None or rss <= scenario.rss_limit_mb
        )
        lines.append(
            f"| {scenario.name} | {best.wall_s:.2f} | "
            f"{statistics.median(r.wall_s for r in runs):.2f} | {scenario.wall_limit_s:g} | "
            f"{scenario.seed_s:g} | {best.cpu_s:.2f} | {rss:.0f} | "
            f"{scenario.rss_limit_mb or '-'} | {best.exit_code} | {'yes' if ok else 'NO'} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/fi-summarizer-bench"))
    parser.add_argument("--results-dir", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    paths = ensure_inputs(args.data_dir)
    header = [*machine(), commit()]
    results = []
    for scenario in scenarios(paths, args.data_dir):
        runs = [measure(scenario.args) for _ in range(args.repeat)]
        results.append((scenario, runs))
        print(f"{scenario.name}: " + ", ".join(f"{r.wall_s:.2f}s" for r in runs), flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc)
    lines = [
        f"# summarize_results.py timing, {stamp:%Y-%m-%d %H:%M} UTC",
        "",
        *header,
        f"- Command: `python benchmarks/bench_summarizer.py --repeat {args.repeat}`",
        "- Inputs: `benchmarks/gen_csvs.py` (as the harness writes them: every registered "
        "column, quoted repro and kernels; decode cases; every 1000th row failed; candidate "
        "2% slower)",
        f"- Load average when finished: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        "",
        *table(results),
        "",
        floor(args.repeat),
        "",
        "Wall: whole command in a fresh process (interpreter start, imports, reading, "
        "report writing). Exit 1 is expected: the inputs hold failed cases.",
    ]
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / f"summarizer_{stamp:%Y%m%d_%H%M}.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
