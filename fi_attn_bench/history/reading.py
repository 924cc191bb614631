"""Turn result CSVs into runs: one run per ``run_id`` (or per file where rows carry none)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from fi_attn_bench.results.case_identity import case_identity
from fi_attn_bench.results.run_store import CaseResult, ParsedRun
from fi_attn_bench.results.schema import IDENTITY_DEFAULTS, STATUS_FAILED, case_columns
from fi_attn_bench.summarizer.loading import load_inputs

RUN_ID_COLUMN = "run_id"  # one id per benchmark invocation, where the writer stamps it
# Row columns that describe the run rather than the case (first non-empty value wins).
RUN_METADATA_COLUMNS = (
    "git_commit",
    "git_dirty",
    "host",
    "device",
    "compute_capability",
    "runtime",
    "torch_version",
    "flashinfer_version",
    "harness_version",
    "schema_version",
    "backend",
    "dtype",
    "timer",
    "l2",
    "page_size",
    "preset",
    "filter",
    "num_shards",
)


class NotARunError(ValueError):
    """A CSV that cannot be read as benchmark output."""


def csv_paths(inputs: Iterable[str]) -> list[Path]:
    """Every CSV named or inside a named directory (recursively), sorted."""
    paths: list[Path] = []
    for name in inputs:
        path = Path(name)
        if path.is_dir():
            paths.extend(sorted(path.rglob("*.csv")))
        elif path.exists():  # a FIFO or device too: the reader refuses it in one line
            paths.append(path)
        else:
            raise NotARunError(f"{name}: no such file or directory")
    return paths


def read_records(path: Path) -> tuple[list[str], list[dict]]:
    """The project's reader behind one adapter: (header, records) or NotARunError."""
    loaded = load_inputs([str(path)], group="history")
    if loaded.issues:
        raise NotARunError(f"{path}: not a benchmark run: {loaded.issues[0].message}")
    header = [name for name in loaded.tables[0].columns if not name.startswith("_")]
    return header, loaded.records


def runs_in_file(path: Path) -> list[ParsedRun]:
    """The runs of one CSV, in order of first appearance."""
    header, records = read_records(path)
    groups: dict[str, list[dict]] = {}
    for record in records:
        groups.setdefault(str(record.get(RUN_ID_COLUMN, "") or ""), []).append(record)
    keys = [name for name in case_columns(header) if name != RUN_ID_COLUMN]
    runs = []
    for run_id, rows in groups.items():
        results = tuple(case_result(row, keys, header) for row in rows)
        runs.append(
            parsed_run(run_id or fallback_run_id(rows, results), path, header, rows, results)
        )
    return runs


def parsed_run(run_id, path, header, rows, results) -> ParsedRun:
    metadata = tuple((name, first_value(rows, name)) for name in RUN_METADATA_COLUMNS)
    stamps = sorted(str(row.get("timestamp_utc", "") or "") for row in rows)
    stamps = [stamp for stamp in stamps if stamp]
    return ParsedRun(
        run_id=run_id,
        source=str(path),
        metadata=tuple(item for item in metadata if item[1]),
        started_utc=stamps[0] if stamps else "",
        finished_utc=stamps[-1] if stamps else "",
        columns=tuple(header),
        results=results,
    )


def first_value(rows: Sequence[dict], name: str) -> str:
    for row in rows:
        value = row.get(name, "")
        if value not in ("", None):
            return str(value)
    return ""


def fallback_run_id(rows: Sequence[dict], results: Sequence[CaseResult]) -> str:
    """A stable id for rows without ``run_id``: host, commit, time span, the cases and their
    times (files without stamps, such as legacy ones, differ by what they measured)."""
    stamps = sorted(str(row.get("timestamp_utc", "") or "") for row in rows)
    identity = {
        "host": first_value(rows, "host"),
        "git_commit": first_value(rows, "git_commit"),
        "first": stamps[0] if stamps else "",
        "last": stamps[-1] if stamps else "",
        "cases": sorted((result.case_key, repr(result.time_ms)) for result in results),
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return "sha256:" + digest[:32]


def case_result(row: dict, keys: Sequence[str], header: Sequence[str]) -> CaseResult:
    fields = {name: cell_text(row.get(name, "")) for name in keys}
    for name, default in IDENTITY_DEFAULTS.items():
        if fields.get(name, "") == "":
            fields[name] = default
    ok = row.get("status") != STATUS_FAILED
    return CaseResult(
        case_key=case_identity(str(row["api"]), fields),
        api=str(row["api"]),
        impl=fields.get("impl", ""),
        fields_json=json.dumps(fields, sort_keys=True),
        status=str(row.get("status", "")),
        time_ms=number_or_none(row.get("time_ms")) if ok else None,
        sm_clock_mean_MHz=number_or_none(row.get("sm_clock_mean_MHz")),
        power_capped_pct=number_or_none(row.get("power_capped_pct")),
        row_json=json.dumps({name: cell_text(row.get(name, "")) for name in header}),
    )


def cell_text(value) -> str:
    if isinstance(value, float):
        if value != value:
            return ""
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    return "" if value is None else str(value)


def number_or_none(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None
