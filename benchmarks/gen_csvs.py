"""Grow a real harness CSV to many rows, for timing the summarizer on what the harness writes.

The rows are the template's own (tests/fixtures/real_csv/: H100 output with non-ASCII kernel
names, quoted cells, full-precision floats, head-to-head, serving and run-condition columns),
resampled: row ``i`` copies template row ``i % n`` and becomes a case of its own by a new value
of one case parameter (``seq_len_kv`` or ``seq_len``) per copy of the template; its times are scaled by a random factor
and bandwidth, TFLOPS and the %-of-peak columns follow, written as the harness writes floats.
``--candidate`` makes the matching candidate: the same cases, times within +-1 %, and every
50th case 10 % slower.  Every ``--failed-every``-th row is a failed case.

    python benchmarks/gen_csvs.py --template tests/fixtures/real_csv/h100_decode_default.csv \
        --rows 200000 --out /tmp/decode.csv [--candidate]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

# run from a checkout, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fi_attn_bench.results.schema import format_cell  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = tuple(sorted((ROOT / "tests" / "fixtures" / "real_csv").glob("*.csv")))
GROWN_COLUMNS = ("seq_len_kv", "seq_len")  # the first one a template has becomes unique
TIME_COLUMNS = ("time_ms", "time_min_ms", "time_q1_ms", "time_q3_ms", "time_max_ms")
THROUGHPUT_COLUMNS = ("bandwidth_GB_s", "tflops", "pct_peak_bw", "pct_peak_tflops")
EMPTIED_WHEN_FAILED = (*TIME_COLUMNS, *THROUGHPUT_COLUMNS, "samples", "noise_pct", "drift_pct")


def read_template(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def grown_column(header: list[str]) -> str:
    return next(name for name in GROWN_COLUMNS if name in header)


def time_factors(rows: int, seed: int, candidate: bool) -> np.ndarray:
    """Per-row scale of the template's times; the candidate's differ a little from the base."""
    base = np.random.default_rng(seed).uniform(0.9, 1.1, rows)
    if not candidate:
        return base
    factors = base * np.random.default_rng(seed + 1).uniform(0.99, 1.01, rows)
    factors[::50] *= 1.10
    return factors


def grown_row(template: dict[str, str], block: int, column: str, factor: float) -> dict:
    """One new case: the template row with a unique ``column`` value and scaled times."""
    row = dict(template)
    row[column] = str(int(template[column]) * 100_000 + block)
    for name in TIME_COLUMNS:
        if row.get(name):
            row[name] = format_cell(float(row[name]) * factor)
    for name in THROUGHPUT_COLUMNS:
        if row.get(name):
            row[name] = format_cell(float(row[name]) / factor)
    return row


def failed_row(row: dict) -> dict:
    """The row as the harness writes a case that raised (result_record's failed layout)."""
    failed = {**row, "status": "failed", "error_type": "RuntimeError"}
    failed["error"] = "CUDA error: out of memory (tried to allocate 2.00 GiB; 1.31 GiB free)"
    for name in (*EMPTIED_WHEN_FAILED, "paired_ratio", "paired_ratio_lo", "paired_ratio_hi"):
        if name in failed:
            failed[name] = ""
    return failed


def write_grown(template: Path, rows: int, out: Path, *, candidate: bool, failed_every: int):
    header, body = read_template(template)
    column = grown_column(header)
    factors = time_factors(rows, seed=len(body), candidate=candidate)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        for index in range(rows):
            block, position = divmod(index, len(body))
            row = grown_row(body[position], block, column, float(factors[index]))
            if failed_every and index % failed_every == failed_every - 1:
                row = failed_row(row)
            writer.writerow(row)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", type=Path, required=True, help="a real harness CSV")
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--candidate", action="store_true")
    parser.add_argument("--failed-every", type=int, default=1000, metavar="N")
    args = parser.parse_args(argv)
    write_grown(
        args.template,
        args.rows,
        args.out,
        candidate=args.candidate,
        failed_every=args.failed_every,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
