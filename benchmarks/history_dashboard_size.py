"""The dashboard's size and time for a store of many cases, through the public commands.

Two runs of ``--rows`` cases (``benchmarks/gen_csvs.py`` grows the real H100 decode CSV: the
run and its ``--candidate``, every 50th case 10 % slower) go into a fresh store with
``fi-attn-history add``; ``report --html --md`` then draws the dashboard.  Prints the page's
bytes, the charts it draws and each command's wall time and peak RSS (children's, from
``resource``).  The target: at most 10 MB for 200,000 cases.

    python benchmarks/history_dashboard_size.py [--rows 200000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "tests" / "fixtures" / "real_csv" / "h100_decode_default.csv"
TARGET_BYTES = 10_000_000


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB of the children so far) of one command."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return time.perf_counter() - start, peak_kb / 1024


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keep", type=Path, help="work here and keep the files")
    args = parser.parse_args(argv)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="dash_size_"))
    folder.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    for name, extra in (("run_1.csv", []), ("run_2.csv", ["--candidate"])):
        grow = [python, "benchmarks/gen_csvs.py", "--template", str(TEMPLATE)]
        timed([*grow, "--rows", str(args.rows), "--out", str(folder / name), *extra])
    history = [python, "-m", "fi_attn_bench.history"]
    store, page, digest = folder / "h.sqlite", folder / "dash.html", folder / "dash.md"
    for name in ("run_1.csv", "run_2.csv"):
        wall, _ = timed([*history, "add", str(folder / name), "--store", str(store)])
        print(f"add {name}: {wall:.1f} s")
    wall, peak = timed(
        [*history, "report", "--store", str(store), "--html", str(page), "--md", str(digest)]
    )
    size = page.stat().st_size
    charts = len(re.findall(r'"title":', page.read_text(encoding="utf-8")))
    print(
        f"report of {args.rows} cases x 2 runs: {wall:.1f} s, peak RSS (any child) {peak:.0f} MB;"
        f" dashboard {size / 1e6:.2f} MB ({charts} charts drawn), target <= {TARGET_BYTES / 1e6:g} MB:"
        f" {'met' if size <= TARGET_BYTES else 'MISSED'}"
    )
    return 0 if size <= TARGET_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
