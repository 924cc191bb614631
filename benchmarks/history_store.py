"""Size of the history store and time and memory of ``fi-attn-history add``, on real output.

    python benchmarks/history_store.py [--rows 200000] [--runs 20] [--checkout DIR]
        [--data-dir /tmp/fi-history-store-bench]

Two scenarios, each a fresh store:

- real: tests/fixtures/real_csv/h100_decode_default.csv (27 H100 cases) as ``--runs`` runs,
  each a copy with its own run_id, timestamp and times scaled by up to +-2 %, added one by one;
- grown: benchmarks/gen_csvs.py grows the same file to ``--rows`` cases (each a case of its
  own), written as two runs (their own run_id and timestamp), added one by one, then the first
  added again (a no-op the store answers from the file's hash).

Each ``add`` is a fresh process (``python -m fi_attn_bench.history add``); its wall time and
peak RSS (wait4) are reported, and the store's size against the bytes of the CSVs it holds.
``--checkout DIR`` measures another checkout of the project (an older commit) the same way.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "tests" / "fixtures" / "real_csv" / "h100_decode_default.csv"
GENERATOR = ROOT / "benchmarks" / "gen_csvs.py"


@dataclass(frozen=True)
class Add:
    label: str
    wall_s: float
    max_rss_mb: float
    exit_code: int


def timed_add(checkout: Path, csv_path: Path, store: Path, label: str) -> Add:
    command = [sys.executable, "-m", "fi_attn_bench.history", "add", str(csv_path)]
    command += ["--store", str(store)]
    environment = {**os.environ, "PYTHONPATH": str(checkout)}
    start = time.perf_counter()
    # cwd: ``python -m`` imports from the working directory first
    process = subprocess.Popen(command, env=environment, cwd=checkout, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    return Add(label, wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status))


def run_copy(source: Path, out: Path, index: int, jitter: float) -> Path:
    """``source`` as run ``index``: its own run_id and timestamp, times scaled by a factor."""
    rng = np.random.default_rng(index)
    with open(source, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        header = list(reader.fieldnames or [])
        header += [] if "run_id" in header else ["run_id"]
        with open(out, "w", encoding="utf-8", newline="") as target:
            writer = csv.DictWriter(target, fieldnames=header, lineterminator="\n")
            writer.writeheader()
            factor = 1 + rng.uniform(-jitter, jitter)
            for row in reader:
                row["run_id"] = f"bench-run-{index:03d}"
                row["timestamp_utc"] = f"2026-01-{1 + index // 24:02d}T{index % 24:02d}:00:00Z"
                if row.get("time_ms"):
                    row["time_ms"] = repr(float(row["time_ms"]) * factor)
                writer.writerow(row)
    return out


def grown_template(data_dir: Path, rows: int) -> Path:
    path = data_dir / f"grown.{rows}.csv"
    if not path.exists():
        command = [sys.executable, str(GENERATOR), "--template", str(TEMPLATE)]
        command += ["--rows", str(rows), "--out", str(path)]
        subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return path


def measure(checkout: Path, data_dir: Path, rows: int, runs: int) -> list[str]:
    lines = [f"checkout {checkout}", ""]
    store = data_dir / "real.sqlite"
    store.unlink(missing_ok=True)
    paths = [run_copy(TEMPLATE, data_dir / f"real.{i}.csv", i, 0.02) for i in range(runs)]
    adds = [timed_add(checkout, path, store, f"real run {i}") for i, path in enumerate(paths)]
    csv_bytes = sum(path.stat().st_size for path in paths)
    lines.append(
        f"real: {runs} runs of {TEMPLATE.name}: CSVs {csv_bytes:,} B, store "
        f"{store.stat().st_size:,} B ({store.stat().st_size / csv_bytes:.2f}x); slowest add "
        f"{max(a.wall_s for a in adds):.2f} s, peak RSS {max(a.max_rss_mb for a in adds):.0f} MB"
    )
    grown = grown_template(data_dir, rows)
    store = data_dir / "grown.sqlite"
    store.unlink(missing_ok=True)
    big = [run_copy(grown, data_dir / f"grown.{i}.csv", i, 0.01) for i in range(2)]
    results = [
        timed_add(checkout, path, store, f"{rows}-row run {i}") for i, path in enumerate(big)
    ]
    results.append(timed_add(checkout, big[0], store, f"{rows}-row run 0 again"))
    for add in results:
        lines.append(
            f"{add.label}: {add.wall_s:.2f} s, peak RSS {add.max_rss_mb:.0f} MB, exit {add.exit_code}"
        )
    csv_bytes = sum(path.stat().st_size for path in big)
    lines.append(
        f"grown: 2 runs of {rows} rows: CSVs {csv_bytes:,} B, store {store.stat().st_size:,} B "
        f"({store.stat().st_size / csv_bytes:.2f}x)"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--checkout", type=Path, default=ROOT)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/fi-history-store-bench"))
    args = parser.parse_args(argv)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    print("\n".join(measure(args.checkout.resolve(), args.data_dir, args.rows, args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
