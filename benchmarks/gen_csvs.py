"""Generate large synthetic benchmark CSVs for timing the summarizer.

The rows follow the seed's schema-v1 decode layout (``bench_batch_decode.py``), so the
seed's summarizer and ours read the same files.  Every row is a distinct case, so a
baseline and a candidate generated with the same ``--rows`` match one to one.

    python benchmarks/gen_csvs.py --rows 200000 --out /tmp/base.csv
    python benchmarks/gen_csvs.py --rows 200000 --out /tmp/cand.csv --candidate
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
HEAD_DIMS = (64, 128, 256)
STAT_COLUMNS = ("samples", "time_q1_ms", "time_q3_ms", "noise_pct", "timer", "l2", "device")


def decode_cases(rows: int) -> dict[str, np.ndarray]:
    """Distinct decode cases: batch size and head dim cycle, seq_len_kv grows."""
    index = np.arange(rows)
    head_dim = np.asarray(HEAD_DIMS)[(index // len(BATCH_SIZES)) % len(HEAD_DIMS)]
    return {
        "batch_size": np.asarray(BATCH_SIZES)[index % len(BATCH_SIZES)],
        "seq_len_q": np.ones(rows, dtype=np.int64),
        "seq_len_kv": 128 + index // (len(BATCH_SIZES) * len(HEAD_DIMS)),
        "num_qo_heads": np.full(rows, 32),
        "num_kv_heads": np.where(head_dim == 64, 8, 4),
        "head_dim": head_dim,
    }


def timings(cases: dict[str, np.ndarray], rng: np.random.Generator, slower: float):
    """Plausible time/bandwidth/tflops with the writer's formulas."""
    tokens = cases["batch_size"] * cases["seq_len_kv"]
    io_bytes = 2.0 * tokens * cases["num_kv_heads"] * cases["head_dim"] * 2
    flops = 4.0 * tokens * cases["num_qo_heads"] * cases["head_dim"]
    time_ms = (io_bytes / 3.0e9 + 0.005) * rng.uniform(0.9, 1.1, tokens.size) * slower
    return time_ms, io_bytes / time_ms / 1e6, flops / time_ms / 1e9


def build_rows(rows: int, seed: int, candidate: bool, failed_every: int, stats: bool):
    """One table of rows as column arrays, in the seed writer's column order."""
    import pandas as pd

    rng = np.random.default_rng(seed + (1 if candidate else 0))
    cases = decode_cases(rows)
    time_ms, bandwidth, tflops = timings(cases, rng, 1.02 if candidate else 1.0)
    frame = pd.DataFrame(
        {"schema_version": "1", "api": "BatchDecodeWithPagedKVCacheWrapper"}, index=range(rows)
    )
    for name, values in cases.items():
        frame[name] = values
    failed = np.zeros(rows, dtype=bool)
    if failed_every:
        failed[::failed_every] = True
    frame["status"] = np.where(failed, "failed", "ok")
    for name, values in (("time_ms", time_ms), ("bandwidth_GB_s", bandwidth), ("tflops", tflops)):
        frame[name] = np.where(failed, np.nan, values)
    frame["error_type"] = np.where(failed, "RuntimeError", "")
    frame["error"] = np.where(failed, "CUDA error: out of memory", "")
    if stats:
        frame["samples"] = 100
        frame["time_q1_ms"] = time_ms * 0.99
        frame["time_q3_ms"] = time_ms * 1.01
        frame["noise_pct"] = 2.0
        frame["timer"] = "profiler"
        frame["l2"] = "cold"
        frame["device"] = "NVIDIA H200"
    return frame


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--candidate", action="store_true", help="2%% slower timings")
    parser.add_argument("--failed-every", type=int, default=0, help="every Nth row failed")
    parser.add_argument("--stats", action="store_true", help="add statistics columns")
    args = parser.parse_args(argv)
    frame = build_rows(args.rows, args.seed, args.candidate, args.failed_every, args.stats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False, float_format="%.6g")
    print(f"wrote {args.rows} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
