"""Load step: the runs a command reads, through the one result reader
(``fi_attn_bench.results.reader``), and the seed's record view of them."""

from __future__ import annotations

import math

from fi_attn_bench.apis import registry
from fi_attn_bench.results.reader import (
    LEGACY_SCHEMAS,
    NUMERIC_OPTIONAL_KINDS,
    SUCCESS_STATUSES,
    V1_REQUIRED_COLUMNS,
    InputIssue,
    ResultFile,
    is_numeric_column,
    parse_float,
    read_file,
    result_layout,
)
from fi_attn_bench.results.runs import read_runs

__all__ = [
    "INTERNAL_COLUMNS",
    "LEGACY_SCHEMAS",
    "NUMERIC_OPTIONAL_KINDS",
    "SUCCESS_STATUSES",
    "V1_REQUIRED_COLUMNS",
    "InputIssue",
    "LoadResult",
    "load_csv",
    "load_inputs",
    "load_run",
    "load_runs",
    "parse_float",
]

INTERNAL_COLUMNS = ("_source", "_line")
# Text columns no report shows: left unread (the reader still validates every cell with a rule).
UNREPORTED_COLUMNS = frozenset(
    ("kernels", "repro", "preset", "filter", "resolved_backend", "throttle_reasons")
)


class LoadResult:
    """The rows of one run (plain input, baseline or candidate) and what was wrong.

    Files are kept as the reader's column tables; ``records`` (one dict per row, the seed's
    view) is built only when someone asks for it.  ``note``: the one line naming runs left
    out because a newer run measured their cases ("" when none was).
    """

    def __init__(self, group, paths, records=None, issues=None, tables=None, note=""):
        self.group = group
        self.paths = list(paths)
        self.issues = list(issues or [])
        self.tables = list(tables or [])
        self.note = note
        self._records = list(records) if records is not None else None

    @property
    def records(self) -> list[dict]:
        if self._records is None:
            self._records = [record for table in self.tables for record in table_records(table)]
        return self._records

    @records.setter
    def records(self, value) -> None:
        self._records = list(value)
        self.tables = []

    @property
    def valid_sources(self) -> set[str]:
        if self._records is not None and not self.tables:
            return {record["_source"] for record in self._records}
        return {table.source for table in self.tables}

    def __repr__(self) -> str:
        return f"LoadResult(group={self.group!r}, paths={self.paths!r}, issues={self.issues!r})"


def table_records(table: ResultFile) -> list[dict]:
    """One dict per row, keyed like the seed's records (numbers float, "" when empty)."""
    frame = table.frame
    columns = {
        name: [_record_value(v, is_numeric_column(name)) for v in frame[name].tolist()]
        for name in table.columns
        if name in frame.columns
    }
    lines = frame["_line"].tolist()
    records = []
    for index, line in enumerate(lines):
        record = {name: values[index] for name, values in columns.items()}
        record["_source"] = table.source
        record["_line"] = line
        records.append(record)
    return records


def _record_value(value, numeric: bool):
    if numeric and isinstance(value, float) and math.isnan(value):
        return ""
    return value


def load_csv(path, group: str = "input") -> tuple[list[dict], list[InputIssue]]:
    """The seed's reader: (records, []) for a valid file, else ([], issues)."""
    read = read_file(path, group)
    return (table_records(read.file) if read.file is not None else []), list(read.issues)


def load_inputs(paths, group: str = "input") -> LoadResult:
    """The seed's run: every file read as one; a bad file adds issues and contributes no rows."""
    return load_run(paths, group, all_runs=True)


def load_run(paths, group: str = "input", *, all_runs: bool = False) -> LoadResult:
    """The newest run among ``paths`` (see results.runs.read_run) for a report."""
    return load_runs([(paths, group)], all_runs=all_runs)[0]


def load_runs(arguments, *, all_runs: bool = False) -> list[LoadResult]:
    """load_run of each (paths, group) (a baseline and a candidate), large ones at once."""
    runs = read_runs(
        arguments, all_runs=all_runs, keep=_reported_columns(), layouts=known_layouts()
    )
    return [
        LoadResult(run.group, paths, issues=run.issues, tables=run.files, note=run.note)
        for run, (paths, _) in zip(runs, arguments, strict=True)
    ]


def known_layouts() -> tuple[frozenset[str], ...]:
    """The seed's layouts and those of the registered APIs (a new API's CSVs read too)."""
    return (*LEGACY_SCHEMAS, *map(result_layout, registry.case_field_sets()))


def _reported_columns():
    from fi_attn_bench.results.schema import OPTIONAL_COLUMN_NAMES

    return frozenset(OPTIONAL_COLUMN_NAMES) - UNREPORTED_COLUMNS


def float_or_nan(text) -> float:
    """Python's float() of a cell (what validation accepted), NaN for empty or text."""
    number = parse_float(text)
    return math.nan if number is None else number
