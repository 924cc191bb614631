"""The baseline a CI job compares against: the latest complete run of a branch, or
per case the median of its last K runs there, written back as result CSVs."""

from __future__ import annotations

import hashlib
import re
import statistics
from collections import Counter
from pathlib import Path

from fi_attn_bench.results.run_store import RunInfo, RunStore
from fi_attn_bench.results.schema import MUST_MATCH_COLUMNS, STATUS_OK, ResultCsvWriter

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
    """Per case, its newest row with time_ms the median over the branch's last K runs that
    measured it the same way (dtype, timer, ...: the columns that must match)."""
    rows_of: dict[int, list[dict]] = {}
    for run in runs[-last:]:
        for case_id, row in store.run_case_rows(run.run_seq).items():
            if row.get("status", STATUS_OK) == STATUS_OK:
                rows_of.setdefault(case_id, []).append(row)
    return [_with_median_time(rows) for rows in rows_of.values()]


def _with_median_time(rows: list[dict]) -> dict:
    """The newest of a case's rows, time_ms the median of those measured as it was."""
    newest = rows[-1]
    alike = [row for row in rows if _measured_as(row) == _measured_as(newest)]
    median = statistics.median(float(row["time_ms"]) for row in alike)
    ratio = float(newest["time_ms"]) / median
    scaled = {
        name: repr(float(newest[name]) * ratio) for name in SCALED_WITH_TIME if newest.get(name)
    }
    return {**newest, "time_ms": repr(median), **scaled}


def _measured_as(row: dict) -> tuple[str, ...]:
    return tuple(row.get(column.name, "") for column in MUST_MATCH_COLUMNS)


def baseline_paths(apis, out_dir: Path) -> dict[str, Path]:
    """Each API's file under ``out_dir``: ``baseline_<API>.csv`` with the API's name's
    punctuation as ``_``; names that would collide (APIs differing only in punctuation)
    get a short hash of the API's own name, so no API's file replaces another's."""
    slugs = {api: re.sub(r"[^A-Za-z0-9]+", "_", api).strip("_") for api in apis}
    taken = Counter(slugs.values())
    return {
        api: out_dir / f"baseline_{slug}.csv"
        if taken[slug] == 1
        else out_dir / f"baseline_{slug}_{hashlib.sha256(api.encode()).hexdigest()[:8]}.csv"
        for api, slug in slugs.items()
    }


def write_baseline(rows: list[dict], columns: tuple[str, ...], out_dir: Path) -> list[Path]:
    """One CSV per API under ``out_dir`` (replaced atomically); the paths written."""
    by_api: dict[str, list[dict]] = {}
    for row in rows:
        by_api.setdefault(row["api"], []).append(row)
    named = baseline_paths(by_api, out_dir)
    paths = []
    for api, api_rows in sorted(by_api.items()):
        header = [name for name in columns if any(name in row for row in api_rows)]
        ResultCsvWriter(named[api], header).write_all(api_rows)
        paths.append(named[api])
    return paths
