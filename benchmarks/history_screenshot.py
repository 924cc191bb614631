"""The README's picture of the history dashboard, drawn by headless Chromium.

30 runs built from the real H100 decode rows (tests/fixtures/real_csv/): each run's times
get 0.4 % noise and a run-wide factor, run 17 is power-throttled (clock 5 % down, times up
by as much), and two cases become 4 % slower from run 20 on.  The runs go into a fresh
store, ``fi-attn-history report --html`` draws the dashboard, and Chromium screenshots it.

    python benchmarks/history_screenshot.py [--out docs/images/history_dashboard.png]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fi_attn_bench.history.command_line import main as history_main  # noqa: E402

DECODE = ROOT / "tests" / "fixtures" / "real_csv" / "h100_decode_default.csv"
RUNS, THROTTLED_RUN, STEP_RUN, STEPPED_CASES, STEP = 30, 17, 20, (3, 11), 1.04


def write_runs(directory: Path, seed: int = 3) -> list[Path]:
    base = pd.read_csv(DECODE, dtype=str, keep_default_na=False)
    rng = np.random.default_rng(seed)
    times = base["time_ms"].astype(float).to_numpy()
    clocks = base["sm_clock_mean_MHz"].astype(float).to_numpy()
    paths = []
    for run in range(RUNS):
        factor = np.exp(rng.normal(0, 0.004, len(base)) + rng.normal(0, 0.003))
        clock = clocks.copy()
        if run == THROTTLED_RUN:
            clock, factor = clock * 0.95, factor / 0.95
        if run >= STEP_RUN:
            factor[list(STEPPED_CASES)] *= STEP
        frame = base.copy()
        frame["time_ms"] = [repr(float(t)) for t in times * factor]
        frame["sm_clock_mean_MHz"] = [repr(float(c)) for c in clock]
        frame["timestamp_utc"] = f"2026-11-{1 + run:02d}T03:00:00Z"
        frame["git_commit"] = hashlib.sha1(f"commit {run}".encode()).hexdigest()
        frame["run_id"] = f"nightly-{run}"
        path = directory / f"run_{run:02d}.csv"
        frame.to_csv(path, index=False)
        paths.append(path)
    return paths


def screenshot(html: Path, out: Path, size: str) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("error: chromium not found (Debian: apt-get install -y chromium)")
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--virtual-time-budget=5000",
            f"--window-size={size}",
            f"--screenshot={out.resolve()}",
            html.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "images" / "history_dashboard.png"))
    parser.add_argument("--window-size", default="1280,900")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        paths = write_runs(work)
        store, html = work / "h.sqlite", work / "history.html"
        if history_main(["add", *map(str, paths), "--store", str(store), "--branch", "main"]):
            return 2
        if history_main(["report", "--store", str(store), "--html", str(html)]):
            return 2
        screenshot(html, Path(args.out), args.window_size)
    print(f"{args.out}: {Path(args.out).stat().st_size / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
