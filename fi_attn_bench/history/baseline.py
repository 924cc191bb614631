"""The baseline a CI job compares against: the latest complete run of a branch, or
per case the median of its last K runs there, written back as result CSVs."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from fi_attn_bench.results.run_store import RunInfo, RunStore
from fi_attn_bench.results.schema import STATUS_OK, ResultCsvWriter

SCALED_WITH_TIME = ("bandwidth_GB_s", "tflops")  # rates: divided by the time ratio


class NoBaselineError(Exception):
    """The branch has no run to take a baseline from."""


def branch_runs(store: RunStore, branch: str) -> list[RunInfo]:
    return [run for run in store.runs() if run.branch == branch]


def latest_complete_rows(store: RunStore, runs: list[RunInfo]) -> tuple[list[dict], list[RunInfo]]:
    """Per API, the rows of the newest run whose rows of that API all succeeded and cover
    the most cases of that API any run of the branch had (so one file per API suffices)."""
    rows_of = {run.run_seq: store.run_rows(run.run_seq) for run in runs}
    apis = sorted({row["api"] for rows in rows_of.values() for row in rows})
    chosen_rows, chosen_runs = [], []
    for api in apis:
        per_run = {seq: [row for row in rows if row["api"] == api] for seq, rows in rows_of.items()}
        most = max(len(rows) for rows in per_run.values())
        for run in reversed(runs):
            rows = per_run[run.run_seq]
            if len(rows) == most and all(row.get("status", STATUS_OK) == STATUS_OK for row in rows):
                chosen_rows += rows
                chosen_runs.append(run)
                break
        else:
            raise NoBaselineError(f"no complete run of {api} (every case present and ok)")
    return chosen_rows, chosen_runs


def median_rows(store: RunStore, runs: list[RunInfo], last: int) -> list[dict]:
    """Per case, the newest row with time_ms the median over the branch's last K runs."""
    newest: dict[tuple, dict] = {}
    times: dict[tuple, list[float]] = {}
    for run in runs[-last:]:
        for row in store.run_rows(run.run_seq):
            if row.get("status", STATUS_OK) != STATUS_OK:
                continue
            key = tuple(
                sorted((k, v) for k, v in row.items() if k in run.columns and k not in VARYING)
            )
            newest[key] = row
            times.setdefault(key, []).append(float(row["time_ms"]))
    rows = []
    for key, row in newest.items():
        median = statistics.median(times[key])
        ratio = float(row["time_ms"]) / median
        scaled = {
            name: repr(float(row[name]) * ratio) for name in SCALED_WITH_TIME if row.get(name)
        }
        rows.append({**row, "time_ms": repr(median), **scaled})
    return rows


# Cells that differ between runs of the same case (results and conditions), left out of its key.
VARYING = frozenset(
    """time_ms bandwidth_GB_s tflops samples time_min_ms time_q1_ms time_q3_ms time_max_ms
    noise_pct drift_pct power_capped_pct power_W plan_ms timestamp_utc git_commit git_dirty host
    run_id check max_abs_err mismatch_frac pct_peak_bw pct_peak_tflops sm_clock_mean_MHz
    sm_clock_min_MHz sm_clock_max_MHz temp_start_C temp_end_C throttle_reasons shard num_shards
    paired_rounds paired_ratio paired_ratio_lo paired_ratio_hi paired_verdict uniform_twin_ms
    imbalance_pct harness_version flashinfer_version torch_version runtime repro kernels
    resolved_backend""".split()
)


def write_baseline(rows: list[dict], columns: tuple[str, ...], out_dir: Path) -> list[Path]:
    """One CSV per API under ``out_dir`` (replaced atomically); the paths written."""
    by_api: dict[str, list[dict]] = {}
    for row in rows:
        by_api.setdefault(row["api"], []).append(row)
    paths = []
    for api, api_rows in sorted(by_api.items()):
        path = out_dir / f"baseline_{re.sub(r'[^A-Za-z0-9]+', '_', api).strip('_')}.csv"
        header = [name for name in columns if any(name in row for row in api_rows)]
        ResultCsvWriter(path, header).write_all(api_rows)
        paths.append(path)
    return paths
