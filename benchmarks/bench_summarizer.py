"""Time summarize_results.py as users run it, against the seed's summarizer in the same run.

    python benchmarks/bench_summarizer.py [--repeat 5] [--seed-repeat 1] [--rows 200000]
        [--data-dir /tmp/fi-summarizer-bench]

For each real H100 CSV in tests/fixtures/real_csv/ it grows a 200,000-row baseline and a
candidate (benchmarks/gen_csvs.py: the real rows resampled, their text and float formats
kept), then times, each as a fresh process: the summary of the baseline and the regression
of candidate against baseline, by this project's summarizer (``--repeat`` times) and by the
seed's (tests/seed_oracle/summarize_results.py, ``--seed-repeat`` times).  Wall time is
reported as the best and the median run (on a shared machine other processes only ever add
time), CPU time (user + system) of the best run, and the peak RSS of all runs; the table
goes to stdout and to benchmarks/results/summarizer_<date>_<time>.md.  A regression reads its
two sides in two processes, so one more untimed run of each scenario polls /proc for the
peak RSS of the whole process tree (wait4 gives only the largest process's).  Both
summarizers' modules are compiled to bytecode first, as an installed package's are.
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
SEED = ROOT / "tests" / "seed_oracle" / "summarize_results.py"
GENERATOR = ROOT / "benchmarks" / "gen_csvs.py"
TEMPLATES = tuple(sorted((ROOT / "tests" / "fixtures" / "real_csv").glob("*.csv")))


@dataclass(frozen=True)
class Target:
    """The limits a scenario must stay within (time, memory, speedup over the seed)."""

    wall_s: float
    rss_mb: float
    speedup: float  # at least this many times faster than the seed


TARGETS = {"summary": Target(1.5, 400.0, 4.0), "regression": Target(3.0, 800.0, 20.0)}


@dataclass(frozen=True)
class Measurement:
    wall_s: float
    cpu_s: float
    max_rss_mb: float
    exit_code: int


@dataclass(frozen=True)
class Result:
    """One scenario on one file: this summarizer's runs and the seed's."""

    kind: str
    template: str
    ours: tuple[Measurement, ...]
    seed: tuple[Measurement, ...]
    tree_rss_mb: float = 0.0  # the peak of the summed RSS of this summarizer's process tree


def ensure_inputs(data_dir: Path, template: Path, rows: int) -> tuple[Path, Path]:
    """The grown baseline and candidate of one template, generated on first use."""
    paths = []
    for suffix, extra in (("", []), (".cand", ["--candidate"])):
        path = data_dir / f"{template.stem}.{rows}{suffix}.csv"
        if not path.exists():
            command = [sys.executable, str(GENERATOR), "--template", str(template)]
            command += ["--rows", str(rows), "--out", str(path), *extra]
            subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        paths.append(path)
    return paths[0], paths[1]


def arguments(kind: str, base: Path, cand: Path, out: Path) -> list[str]:
    if kind == "summary":
        return [str(base), "--output", str(out)]
    return ["--baseline", str(base), "--candidate", str(cand), "--output", str(out)]


def measure(command: list[str]) -> Measurement:
    """One fresh process: wall time, CPU time and peak RSS from wait4."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    return Measurement(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        max_rss_mb=usage.ru_maxrss / 1024.0,
        exit_code=os.waitstatus_to_exitcode(status),
    )


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def tree_peak_rss_mb(command: list[str], poll_s: float = 0.01) -> float:
    """The peak of the summed RSS of a command's process tree (0 where /proc is missing)."""
    if not Path("/proc/self/status").exists():
        return 0.0
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT
    )
    peak = 0
    while process.poll() is None:
        peak = max(peak, sum(_rss_bytes(pid) for pid in _tree(process.pid)))
        time.sleep(poll_s)
    return peak / 2**20


def run_scenario(kind, template, base, cand, out_dir, repeat, seed_repeat) -> Result:
    """This summarizer and the seed's, interleaved, so load changes hit both alike."""
    ours, seed = [], []
    for index in range(max(repeat, seed_repeat)):
        if index < repeat:
            args = arguments(kind, base, cand, out_dir / "ours.md")
            ours.append(measure([sys.executable, str(SUMMARIZER), *args]))
        if index < seed_repeat:
            args = arguments(kind, base, cand, out_dir / "seed.md")
            seed.append(measure([sys.executable, str(SEED), *args]))
    tree = tree_peak_rss_mb(
        [sys.executable, str(SUMMARIZER), *arguments(kind, base, cand, out_dir / "ours.md")]
    )
    return Result(kind, template.name, tuple(ours), tuple(seed), tree)


def best(runs) -> Measurement:
    return min(runs, key=lambda run: run.wall_s)


def table(results: list[Result]) -> list[str]:
    lines = [
        "| Scenario | File | Best wall s | Median wall s | CPU s | Peak RSS MB (tree) | Exit "
        "| Seed best wall s | Seed CPU s | Seed RSS MB | Speedup (wall) | Targets | Met |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for result in results:
        ours, seed, target = best(result.ours), best(result.seed), TARGETS[result.kind]
        rss = max(result.tree_rss_mb, *(run.max_rss_mb for run in result.ours))
        speedup = seed.wall_s / ours.wall_s
        met = ours.wall_s <= target.wall_s and rss <= target.rss_mb and speedup >= target.speedup
        lines.append(
            f"| {result.kind} | {result.template} | {ours.wall_s:.2f} | "
            f"{statistics.median(run.wall_s for run in result.ours):.2f} | {ours.cpu_s:.2f} | "
            f"{rss:.0f} | {ours.exit_code} | {seed.wall_s:.2f} | {seed.cpu_s:.2f} | "
            f"{max(run.max_rss_mb for run in result.seed):.0f} | {speedup:.1f}x | "
            f"<= {target.wall_s:g} s, <= {target.rss_mb:g} MB, >= {target.speedup:g}x | "
            f"{'yes' if met else 'NO'} |"
        )
    return lines


def commit() -> str:
    """The commit measured, and whether the summarizer's files differed from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "fi_attn_bench"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout.strip()
    except OSError:
        return "- Commit: unknown (no git)"
    return f"- Commit: `{head or 'unknown'}`" + (" plus uncommitted changes" if dirty else "")


def compile_bytecode() -> str:
    """Both summarizers' modules compiled to bytecode before timing, as ``pip install`` does:
    where PYTHONDONTWRITEBYTECODE is set, each run would otherwise compile every module from
    source (40-50 ms of this project's imports)."""
    import compileall

    for folder in (ROOT / "fi_attn_bench", SEED.parent):
        compileall.compile_dir(folder, quiet=1)
    setting = os.environ.get("PYTHONDONTWRITEBYTECODE")
    return (
        "- Bytecode: compiled before timing (`compileall`, both summarizers); "
        f"PYTHONDONTWRITEBYTECODE={setting or 'unset'}"
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
        f"- Python {platform.python_version()}, pandas {pandas.__version__}, "
        f"numpy {numpy.__version__}",
        f"- Load average when started: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed-repeat", type=int, default=1)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/fi-summarizer-bench"))
    parser.add_argument("--results-dir", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--kinds", nargs="+", choices=sorted(TARGETS), default=sorted(TARGETS))
    args = parser.parse_args(argv)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    header = [*machine(), commit(), compile_bytecode()]
    results = []
    for template in TEMPLATES:
        base, cand = ensure_inputs(args.data_dir, template, args.rows)
        for kind in args.kinds:
            result = run_scenario(
                kind, template, base, cand, args.data_dir, args.repeat, args.seed_repeat
            )
            results.append(result)
            print(
                f"{kind} {template.name}: "
                + ", ".join(f"{r.wall_s:.2f}s" for r in result.ours)
                + " | seed "
                + ", ".join(f"{r.wall_s:.2f}s" for r in result.seed),
                flush=True,
            )
    stamp = datetime.datetime.now(datetime.timezone.utc)
    command = " ".join(["python", "benchmarks/bench_summarizer.py", *(argv or sys.argv[1:])])
    lines = [
        f"# summarize_results.py timing, {stamp:%Y-%m-%d %H:%M} UTC",
        "",
        *header,
        f"- Command: `{command}`",
        f"- Inputs: {args.rows} rows grown from each real CSV by `benchmarks/gen_csvs.py` "
        "(candidate: times within 1 %, every 50th case 10 % slower; every 1000th row failed)",
        f"- Load average when finished: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        f"- Best of {args.repeat} (seed: {args.seed_repeat}) fresh processes, interleaved",
        "",
        *table(results),
        "",
        "Exit 1 is expected: the inputs hold failed cases (and the candidate regressions).",
    ]
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / f"summarizer_{stamp:%Y%m%d_%H%M}.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
