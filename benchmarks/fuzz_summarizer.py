"""Run the summarizer fuzz properties long: at least 10,000 examples in all.

    python benchmarks/fuzz_summarizer.py [--examples 10000]

Runs tests/test_summarizer_fuzz.py (the same properties CI runs with ~100 examples
each) with random, non-derandomized search and writes the outcome to
benchmarks/results/fuzz_summarizer_<date>.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE = "tests/test_summarizer_fuzz.py"
# Share of the examples per property: the regression property costs the most per example.
PROPERTIES = (
    ("test_generated_csv_verdicts", 0.25),
    ("test_arbitrary_bytes_never_crash_and_readers_agree", 0.25),
    ("test_regression_mode_never_crashes", 0.15),
    ("test_scan_and_pandas_summaries_agree", 0.1),  # the pandas-free summary path
    ("test_scan_and_pandas_comparisons_agree", 0.2),  # the pandas-free regression path
    ("test_scan_case_codes_name_their_stripped_text", 0.05),
)


def run_property(name: str, examples: int) -> tuple[int, float, str]:
    """(pytest exit code, seconds, statistics text) of one property."""
    env = {**os.environ, "SUMMARIZER_FUZZ_EXAMPLES": str(examples)}
    command = [sys.executable, "-m", "pytest", f"{MODULE}::{name}", "-q", "-p", "no:cacheprovider"]
    command.append("--hypothesis-show-statistics")
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    return result.returncode, time.perf_counter() - start, (result.stdout + result.stderr)[-4000:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000, help="total over all properties")
    parser.add_argument("--results-dir", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    stamp = datetime.datetime.now(datetime.timezone.utc)
    lines = [
        f"# Summarizer fuzz, {stamp:%Y-%m-%d %H:%M} UTC",
        "",
        f"- Commit: {commit}; Python {platform.python_version()}; nproc {os.cpu_count()}",
        f"- Command: `python benchmarks/fuzz_summarizer.py --examples {args.examples}`",
        "- Properties: exit code in {0, 1, 2}; no exception from main(); exit 2 for every "
        "input the generator broke; no temporary file left; the report is whole (title "
        "first, newline last, Input Errors on exit 2); the fast and exact CSV readers agree; "
        "the pandas-free summary and regression paths give the pandas path's report, "
        "output and exit code.",
        "",
        "| Property | Examples asked | pytest exit | Seconds |",
        "|---|---:|---:|---:|",
    ]
    details = []
    failed = False
    for name, share in PROPERTIES:
        examples = max(1, round(args.examples * share))
        code, seconds, output = run_property(name, examples)
        failed |= code != 0
        lines.append(f"| {name} | {examples} | {code} | {seconds:.0f} |")
        details += [f"## {name}", "", "```", output.strip(), "```", ""]
        print(f"{name}: exit {code} in {seconds:.0f}s", flush=True)
    lines += ["", f"Result: {'FAILED' if failed else 'all properties held'}", "", *details]
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / f"fuzz_summarizer_{stamp:%Y%m%d_%H%M}.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"written to {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
