"""Run the summarizer fuzz properties long: at least 10,000 examples in all.

    python benchmarks/fuzz_summarizer.py [--examples 10000]

Runs tests/test_summarizer_fuzz.py (the same properties CI runs with ~100 examples
each) with random, non-derandomized search and writes the outcome to
benchmarks/results/fuzz_summarizer_<date>.md.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE = "tests/test_summarizer_fuzz.py"
# Relative shares of the examples; a property not named here gets 1.  A regression example
# runs two summaries.
WEIGHTS = {"test_regression_mode_never_crashes": 0.6}


def properties(module: Path = ROOT / MODULE) -> list[str]:
    """The module's hypothesis properties: its test functions decorated with ``@given``."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and node.name.startswith("test_")
        and any(_is_given(decorator) for decorator in node.decorator_list)
    ]


def _is_given(decorator: ast.expr) -> bool:
    return (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Name)
        and decorator.func.id == "given"
    )


def examples_per_property(names: list[str], total: int) -> dict[str, int]:
    """``total`` split by WEIGHTS, at least one example each."""
    weights = {name: WEIGHTS.get(name, 1.0) for name in names}
    whole = sum(weights.values())
    return {name: max(1, round(total * weight / whole)) for name, weight in weights.items()}


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
        f"- Properties: the `@given` tests of `{MODULE}` (each test says what it asserts)",
        "",
        "| Property | Examples asked | pytest exit | Seconds |",
        "|---|---:|---:|---:|",
    ]
    details = []
    failed = False
    for name, examples in examples_per_property(properties(), args.examples).items():
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
