"""Generate large benchmark CSVs, as the harness writes them, for timing the summarizer.

Every registered column (``fi_attn_bench.results.schema.csv_fieldnames``), in the
writer's order, with the cells the harness fills on a GPU: statistics, timer, L2,
kernels and repro (both quoted: they hold commas), environment, run metadata and
conditions.  The case parameters follow the decode layout; every row is a distinct
case, so a baseline and a candidate generated with the same ``--rows`` match one to one.

    python benchmarks/gen_csvs.py --rows 200000 --out /tmp/base.csv
    python benchmarks/gen_csvs.py --rows 200000 --out /tmp/cand.csv --candidate
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

# run from a checkout, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fi_attn_bench.results.schema import HARNESS_VERSION, csv_fieldnames  # noqa: E402

API = "BatchDecodeWithPagedKVCacheWrapper"
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
HEAD_DIMS = (64, 128, 256)
CASE_FIELDS = ("batch_size", "seq_len_q", "seq_len_kv", "num_qo_heads", "num_kv_heads", "head_dim")
KERNELS = (
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 4u, "
    "8u, 16u, 1u, 8u, __half, __half, __half, int>(...);void flashinfer::MergeStatesKernel<8u, "
    "16u, 8u, 8u, __half, __half>(...)"
)


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


def build_rows(rows: int, seed: int, candidate: bool, failed_every: int):
    """One table of rows as the harness writes them (pandas DataFrame, writer's order)."""
    import pandas as pd

    rng = np.random.default_rng(seed + (1 if candidate else 0))
    cases = decode_cases(rows)
    tokens = cases["batch_size"] * cases["seq_len_kv"]
    io_bytes = 2.0 * tokens * cases["num_kv_heads"] * cases["head_dim"] * 2
    flops = 4.0 * tokens * cases["num_qo_heads"] * cases["head_dim"]
    time_ms = (io_bytes / 3.0e9 + 0.005) * rng.uniform(0.9, 1.1, rows) * (1.02 if candidate else 1)
    failed = np.zeros(rows, dtype=bool)
    if failed_every:
        failed[::failed_every] = True
    ok = ~failed

    def ok_only(values):
        return np.where(ok, values, np.nan)

    frame = pd.DataFrame({name: "" for name in csv_fieldnames(CASE_FIELDS)}, index=range(rows))
    frame["schema_version"], frame["api"] = "1", API
    for name, values in cases.items():
        frame[name] = values
    frame["status"] = np.where(failed, "failed", "ok")
    frame["time_ms"] = ok_only(time_ms)
    frame["bandwidth_GB_s"] = ok_only(io_bytes / time_ms / 1e6)
    frame["tflops"] = ok_only(flops / time_ms / 1e9)
    frame["error_type"] = np.where(failed, "RuntimeError", "")
    frame["error"] = np.where(failed, "CUDA error: out of memory", "")
    spread = rng.uniform(0.002, 0.03, rows)
    frame["samples"] = np.where(ok, rng.integers(100, 5000, rows), 0).astype(object)
    frame.loc[failed, "samples"] = ""
    for name, factor in (("time_min_ms", 0.97), ("time_q1_ms", 1 - spread / 2)):
        frame[name] = ok_only(time_ms * factor)
    frame["time_q3_ms"] = ok_only(time_ms * (1 + spread / 2))
    frame["time_max_ms"] = ok_only(time_ms * 1.2)
    frame["noise_pct"] = ok_only(spread * 100)
    frame["drift_pct"] = ok_only(rng.uniform(0.05, 1.0, rows))
    frame["power_capped_pct"] = ok_only(rng.uniform(0, 100, rows))
    frame["power_W"] = ok_only(rng.uniform(300, 700, rows))
    frame["timer"], frame["l2"], frame["kernels"] = "profiler", "cold", KERNELS
    frame["plan_ms"] = rng.uniform(0.01, 0.2, rows)
    frame["io_bytes"], frame["flops"] = io_bytes, flops
    frame["dtype"], frame["page_size"] = "float16", 16
    frame["repro"] = [
        f"python bench_batch_decode.py --filter batch_size={b},seq_len_q=1,seq_len_kv={kv},"
        f"num_qo_heads=32,num_kv_heads={h},head_dim={d} --dtype float16 --page-size 16"
        for b, kv, h, d in zip(
            cases["batch_size"].tolist(),
            cases["seq_len_kv"].tolist(),
            cases["num_kv_heads"].tolist(),
            cases["head_dim"].tolist(),
            strict=True,
        )
    ]
    environment = {
        "backend": "flashinfer",
        "device": "NVIDIA H200",
        "compute_capability": "9.0",
        "runtime": "12.8",
        "torch_version": "2.8.0+cu128",
        "flashinfer_version": "0.6.1",
        "harness_version": HARNESS_VERSION,
        "check": "pass",
        "host": "gpu-node-07",
        "git_commit": "0123456789abcdef0123456789abcdef01234567",
        "git_dirty": "no",
    }
    for name, value in environment.items():
        frame[name] = value
    frame["max_abs_err"] = ok_only(rng.uniform(0, 1e-3, rows))
    frame["mismatch_frac"] = 0.0
    frame["check_rtol"] = frame["check_atol"] = 0.016
    frame["pct_peak_bw"] = ok_only(io_bytes / time_ms / 1e6 / 4800 * 100)
    frame["pct_peak_tflops"] = ok_only(flops / time_ms / 1e9 / 989 * 100)
    seconds = np.cumsum(rng.uniform(0.2, 0.4, rows))  # one case after another, as a sweep runs
    stamps = np.datetime64("2026-12-04T12:00:00", "us") + (seconds * 1e6).astype("timedelta64[us]")
    frame["timestamp_utc"] = [f"{stamp}+00:00" for stamp in stamps.astype(str).tolist()]
    frame["sm_clock_mean_MHz"] = ok_only(rng.uniform(1500, 1980, rows))
    frame["sm_clock_min_MHz"] = ok_only(rng.uniform(1200, 1500, rows))
    frame["sm_clock_max_MHz"] = 1980
    frame["temp_start_C"], frame["temp_end_C"] = 44, 61
    frame["throttle_reasons"] = "sw_power_cap"
    frame.loc[failed, "check"] = ""
    return frame


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--candidate", action="store_true", help="2%% slower timings")
    parser.add_argument("--failed-every", type=int, default=0, help="every Nth row failed")
    args = parser.parse_args(argv)
    frame = build_rows(args.rows, args.seed, args.candidate, args.failed_every)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False, float_format="%.10g", lineterminator="\n")
    print(f"wrote {args.rows} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
