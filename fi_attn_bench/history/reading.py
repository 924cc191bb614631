"""Turn result CSVs into runs: one run per ``run_id`` (or per file where rows carry none)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from fi_attn_bench.results.case_identity import case_identities, case_identity
from fi_attn_bench.results.reader import read_file
from fi_attn_bench.results.run_rows import (
    CaseResult,
    LazyTexts,
    ResultColumns,
    ResultSequence,
    RowBlock,
    column_cell_texts,
    number_text,
)
from fi_attn_bench.results.run_store import ParsedRun
from fi_attn_bench.results.schema import (
    IDENTITY_DEFAULTS,
    MAX_PLAUSIBLE_TIME_MS,
    STATUS_FAILED,
    case_columns,
)
from fi_attn_bench.summarizer.loading import known_layouts, load_inputs

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
    """The runs of one CSV, in order of first appearance, read by column: the rows go to the
    store as a ``RowBlock`` (no dict per row), the per-row texts are built once per
    distinct cell."""
    read = read_file(path, "history", layouts=known_layouts())
    if read.issues:
        raise NotARunError(f"{path}: not a benchmark run: {read.issues[0].message}")
    frame = read.file.frame
    header = [name for name in read.file.columns if not name.startswith("_")]
    block = RowBlock(
        tuple(header),
        tuple(_categories(frame[name]) for name in header),
        tuple(_codes_or_numbers(frame[name]) for name in header),
    )
    del frame, read  # the block holds every cell now
    texts = _ColumnTexts(block)
    run_ids = texts.get(RUN_ID_COLUMN)
    keys = [name for name in case_columns(header) if name != RUN_ID_COLUMN]
    groups: dict[str, list[int]] = {}
    for position, run_id in enumerate(run_ids):
        groups.setdefault(run_id, []).append(position)
    runs = []
    for run_id, positions in groups.items():
        whole = len(positions) == len(block)  # one run in the file: no copy
        run_block = block if whole else block.take(np.array(positions, dtype=np.intp))
        results = _case_results(run_block, keys)
        _refuse_implausible_times(path, results)
        identity = run_id or _fallback_id(_ColumnTexts(run_block), results)
        runs.append(_block_run(identity, path, header, _ColumnTexts(run_block), results, run_block))
    return runs


def _categories(series) -> tuple[str, ...] | None:
    if series.dtype == np.float64:
        return None
    return tuple(str(text) for text in series.cat.categories.tolist())


def _codes_or_numbers(series) -> np.ndarray:
    if series.dtype == np.float64:
        return series.to_numpy()
    return series.cat.codes.to_numpy().astype(np.int32)


class _ColumnTexts:
    """A block's columns as lists of cell text, each made on first use ("" when absent)."""

    def __init__(self, block: RowBlock):
        self.block = block
        self.made: dict[str, list[str]] = {}

    def get(self, name: str) -> list[str]:
        if name not in self.made:
            if name in self.block.columns:
                index = self.block.columns.index(name)
                self.made[name] = column_cell_texts(
                    self.block.categories[index], self.block.values[index]
                )
            else:
                self.made[name] = [""] * len(self.block)
        return self.made[name]

    def first(self, name: str) -> str:
        return next((text for text in self.get(name) if text), "")

    def numbers(self, name: str) -> list[float | None]:
        if name not in self.block.columns:
            return [None] * len(self.block)
        index = self.block.columns.index(name)
        if self.block.categories[index] is not None:
            return [number_or_none(text) for text in self.get(name)]
        values = self.block.values[index]
        return [None if value != value else value for value in values.tolist()]


def _refuse_implausible_times(path: Path, results: ResultSequence) -> None:
    """A time past any measured one (1e308 ms) is not a run's result: the file is refused."""
    times = results.columns.time_ms  # read by column: no CaseResult made per row
    implausible = [time for time in times if (time or 0) > MAX_PLAUSIBLE_TIME_MS]
    if implausible:
        raise NotARunError(
            f"{path}: not a benchmark run: time_ms {max(implausible):g} is beyond"
            f" {MAX_PLAUSIBLE_TIME_MS:g} ms, not a measured time"
        )


def _case_results(block: RowBlock, keys: Sequence[str]) -> ResultSequence:
    """``case_result`` of every row of ``block``, by column."""
    texts = _ColumnTexts(block)
    fields = {name: texts.get(name) for name in keys}
    for name, default in IDENTITY_DEFAULTS.items():
        cells = fields.get(name) or [""] * len(block)
        fields[name] = [cell or default for cell in cells]
    apis = texts.get("api")
    statuses = texts.get("status")
    times = texts.numbers("time_ms")
    return ResultSequence(
        ResultColumns(
            case_keys=case_identities(apis, fields),
            apis=apis,
            impls=fields.get("impl", [""] * len(block)),
            fields_json=_json_objects(fields, len(block)),
            statuses=statuses,
            time_ms=[
                time if status != STATUS_FAILED else None
                for time, status in zip(times, statuses, strict=True)
            ],
            sm_clock_mean_MHz=texts.numbers("sm_clock_mean_MHz"),
            power_capped_pct=texts.numbers("power_capped_pct"),
        )
    )


def _json_objects(columns: dict[str, list[str]], rows: int) -> LazyTexts:
    """``json.dumps(row, sort_keys=True)`` of each row of these columns, made when asked (the
    store asks for the cases new to it)."""
    names = sorted(columns)
    ordered = [columns[name] for name in names]

    def row_json(index: int) -> str:
        return json.dumps(dict(zip(names, (cells[index] for cells in ordered), strict=True)))

    return LazyTexts(rows, row_json)


def _fallback_id(texts: _ColumnTexts, results: Sequence[CaseResult]) -> str:
    columns = ResultColumns.of(results)
    stamps = sorted(texts.get("timestamp_utc"))
    stamps = [stamp for stamp in stamps if stamp]
    identity = {
        "host": texts.first("host"),
        "git_commit": texts.first("git_commit"),
        "first": stamps[0] if stamps else "",
        "last": stamps[-1] if stamps else "",
        "cases": sorted(zip(columns.case_keys, map(repr, columns.time_ms), strict=True)),
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return "sha256:" + digest[:32]


def _block_run(run_id, path, header, texts: _ColumnTexts, results, block) -> ParsedRun:
    metadata = tuple((name, texts.first(name)) for name in RUN_METADATA_COLUMNS)
    stamps = sorted(stamp for stamp in texts.get("timestamp_utc") if stamp)
    return ParsedRun(
        run_id=run_id,
        source=str(path),
        metadata=tuple(item for item in metadata if item[1]),
        started_utc=stamps[0] if stamps else "",
        finished_utc=stamps[-1] if stamps else "",
        columns=tuple(header),
        results=results,
        block=block,
    )


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
        return number_text(value)
    return "" if value is None else str(value)


def number_or_none(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None
