"""Load step: read benchmark CSVs into validated column tables.

Two readers produce the same table.  The fast one hands a plain file to pandas' C
parser and validates whole columns at once; rows a vectorized check cannot vouch for
are re-checked one by one with the exact row rules.  Anything the fast reader cannot
parse the way ``csv.DictReader`` would (ragged rows, stray quotes, whitespace-only
lines, NUL bytes) goes to the exact reader, which follows ``csv.DictReader`` row by
row.  Both give the same issues, so a file's verdict never depends on the path.
"""

from __future__ import annotations

import csv
import io
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fi_attn_bench.results.schema import (
    NUMERIC_COLUMNS,
    OPTIONAL_COLUMN_BY_NAME,
    RESULT_COLUMNS,
    SCHEMA_VERSION,
    STATUS_FAILED,
    STATUS_LEGACY_OK,
    STATUS_OK,
    Kind,
)

SUCCESS_STATUSES = frozenset((STATUS_OK, STATUS_LEGACY_OK))
INTERNAL_COLUMNS = ("_source", "_line")
V1_REQUIRED_COLUMNS = frozenset(RESULT_COLUMNS)
ERROR_COLUMNS = ("error_type", "error")
LEGACY_FILLED = ("schema_version", "status", "error_type", "error")

# The four per-wrapper layouts the seed's scripts wrote before schema v1 (case
# parameters of decode, MLA, paged prefill, ragged prefill) plus api and metrics.
_LEGACY_CASES = (
    ("batch_size", "seq_len_q", "seq_len_kv", "num_qo_heads", "num_kv_heads", "head_dim"),
    ("batch_size", "seq_len", "num_heads", "head_dim_ckv", "head_dim_kpe"),
    ("batch_size", "seq_len", "num_qo_heads", "num_kv_heads", "head_dim"),
    ("batch_size", "seq_len", "num_qo_heads", "num_kv_heads", "head_dim_qk", "head_dim_vo"),
)
LEGACY_SCHEMAS = tuple(frozenset(("api", *NUMERIC_COLUMNS, *cases)) for cases in _LEGACY_CASES)
NUMERIC_OPTIONAL_KINDS = (
    Kind.COUNT,
    Kind.POSITIVE,
    Kind.NON_NEGATIVE,
    Kind.FINITE,
    Kind.NON_NEGATIVE_INT,
)
_FIELD_LIMIT = 1 << 30
FAST_READER_MIN_BYTES = 256 * 1024  # below this, pandas' fixed cost outweighs its speed


@dataclass
class InputIssue:
    """One reason an input cannot be trusted: where, what, and which run it belongs to."""

    source: str
    message: str
    group: str = "input"


@dataclass
class FileTable:
    """The validated rows of one CSV: text columns stripped, numbers as float64."""

    source: str
    columns: list[str]  # the record keys in the seed's order (header + filled legacy columns)
    frame: object  # pandas.DataFrame, one row per valid CSV row, plus "_line"
    legacy: bool


def parse_float(value) -> float | None:
    """A finite float from a cell, or None: the seed's metric parser."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def metric_error(column: str, value) -> str | None:
    """The seed's message for an invalid metric of a successful row, else None."""
    number = parse_float(value)
    if number is None:
        return f"{column} must be a finite number"
    if column == "time_ms" and number <= 0:
        return "time_ms must be greater than zero"
    if column != "time_ms" and number < 0:
        return f"{column} must not be negative"
    return None


def header_error(fieldnames: Sequence[str] | None) -> tuple[str | None, str | None]:
    """(schema, None) for a usable header, else (None, the seed's message)."""
    if not fieldnames:
        return None, "CSV header is missing"
    if any(not name for name in fieldnames):
        return None, "CSV contains an empty header name"
    if any(name != name.strip() for name in fieldnames):
        return None, "CSV header names must not contain surrounding whitespace"
    if len(fieldnames) != len(set(fieldnames)):
        return None, "CSV contains duplicate header names"
    names = frozenset(fieldnames)
    known = any(schema.issubset(names) for schema in LEGACY_SCHEMAS)
    if "schema_version" in names or "status" in names:
        missing = sorted(V1_REQUIRED_COLUMNS - names)
        if missing:
            return None, f"schema v1 is missing columns: {', '.join(missing)}"
        if not known:
            return None, "CSV does not match a known FlashInfer benchmark schema"
        return "v1", None
    if not known:
        return None, "CSV does not match a known legacy FlashInfer schema"
    return "legacy", None


def row_error(record: dict, schema: str) -> str | None:
    """The first rule a stripped row breaks (seed order, then optional columns)."""
    if not record.get("api"):
        return "api must not be empty"
    if schema == "v1":
        error = _v1_status_error(record)
        if error:
            return error
        status = record["status"]
    else:
        status = STATUS_LEGACY_OK
    if status in SUCCESS_STATUSES:
        for column in NUMERIC_COLUMNS:
            error = metric_error(column, record.get(column))
            if error:
                return error
    for name, text in record.items():
        column = OPTIONAL_COLUMN_BY_NAME.get(name)
        if column is not None and text:
            error = column.check(text)
            if error:
                return error
    return None


def _v1_status_error(record: dict) -> str | None:
    version = record.get("schema_version")
    if version != SCHEMA_VERSION:
        return f"unsupported schema_version {version!r}; expected {SCHEMA_VERSION!r}"
    status = record.get("status")
    if status not in (STATUS_OK, STATUS_FAILED):
        return f"unsupported status {status!r}"
    has_error = bool(record.get("error_type") or record.get("error"))
    if status == STATUS_OK and has_error:
        return "successful rows must not contain error details"
    if status == STATUS_FAILED and not has_error:
        return "failed rows must contain error_type or error"
    return None


def read_table(
    path, group: str = "input", *, reader: str = "auto"
) -> tuple[FileTable | None, list[InputIssue]]:
    """Read one CSV; (table, []) when every row is valid, else (None, issues).

    ``reader``: "auto" (the fast reader for files of FAST_READER_MIN_BYTES and more),
    "fast" (always try it first) or "exact" (never); tests compare the two readers.
    """
    source = str(path)
    try:
        data = Path(path).read_bytes()
        if not data.isascii():
            data.decode("utf-8")  # strict: bad bytes are an input error, not mojibake
    except (OSError, UnicodeError) as exc:
        return None, [InputIssue(source, f"unable to read CSV: {exc}", group)]
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        header = _first_row(data)
    except csv.Error as exc:
        return None, [InputIssue(source, f"unable to read CSV: {exc}", group)]
    schema, error = header_error(header)
    if error:
        return None, [InputIssue(source, error, group)]
    fast = reader == "fast" or (reader == "auto" and len(data) >= FAST_READER_MIN_BYTES)
    table = _fast_table(data, header, schema, source) if fast else None
    if table is None:
        table = _exact_table(data, header, schema, source)
    if isinstance(table, list):
        return None, [InputIssue(source, message, group) for message in table]
    if len(table.frame) == 0:
        return None, [InputIssue(source, "CSV contains no benchmark rows", group)]
    return table, []


def _first_row(data: bytes) -> list[str] | None:
    text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="")
    with _large_fields():
        return next(csv.reader(text), None)


class _large_fields:
    """Lift csv's 128 KiB field limit while reading: a long error text is still data."""

    def __enter__(self):
        self.previous = csv.field_size_limit(_FIELD_LIMIT)

    def __exit__(self, *exc_info):
        csv.field_size_limit(self.previous)


# ---------------------------------------------------------------- exact reader


def _exact_table(data: bytes, header: list[str], schema: str, source: str):
    """Row by row like csv.DictReader: a FileTable, or the list of row messages."""
    text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="")
    records, messages = [], []
    try:
        with _large_fields():
            reader = csv.DictReader(text)
            for line, raw in enumerate(reader, 2):
                record, error = _exact_row(raw, schema)
                if error:
                    messages.append(f"line {line}: {error}")
                elif not messages:
                    record["_line"] = line
                    records.append(record)
    except csv.Error as exc:
        return [f"unable to read CSV: {exc}"]
    if messages:
        return messages
    return table_from_records(records, source, _record_columns(header, schema), schema)


def _exact_row(raw: dict, schema: str) -> tuple[dict | None, str | None]:
    if None in raw:
        return None, "row has more values than the CSV header"
    if any(value is None for value in raw.values()):
        return None, "row has fewer values than the CSV header"
    record = {key: value.strip() for key, value in raw.items()}
    error = row_error(record, schema)
    if error:
        return None, error
    if schema == "legacy":
        record.update(schema_version="", status=STATUS_LEGACY_OK, error_type="", error="")
    return record, None


def _record_columns(header: list[str], schema: str) -> list[str]:
    if schema == "legacy":  # the seed overwrites these four even when the CSV has them
        return [*header, *(name for name in LEGACY_FILLED if name not in header)]
    return list(header)


def table_from_records(records: list[dict], source: str, columns: list[str], schema: str):
    """A FileTable from validated record dicts (metric text becomes float64)."""
    import pandas as pd

    # A CSV column named _line is internal (not a case parameter): the line number,
    # already in each record, replaces it, as the fast reader's frame does.
    names = [name for name in columns if name != "_line"]
    frame = pd.DataFrame.from_records(records, columns=[*names, "_line"])
    for name in [*NUMERIC_COLUMNS, *_numeric_optionals(columns)]:
        frame[name] = np.array([float_or_nan(value) for value in frame[name]], dtype=np.float64)
    frame["_line"] = frame["_line"].astype(np.int64)
    return FileTable(source, columns, frame, schema == "legacy")


def float_or_nan(text) -> float:
    """Python's float() of a cell (what validation accepted), NaN for empty or text."""
    number = parse_float(text)
    return math.nan if number is None else number


def _numeric_optionals(columns: Iterable[str]) -> list[str]:
    return [
        name
        for name in columns
        if name in OPTIONAL_COLUMN_BY_NAME
        and OPTIONAL_COLUMN_BY_NAME[name].kind in NUMERIC_OPTIONAL_KINDS
    ]


# ----------------------------------------------------------------- fast reader


def _fast_table(data: bytes, header: list[str], schema: str, source: str):
    """Columnar read and validation, or None when the exact reader must decide."""
    frame = _pandas_read(data, header)
    if frame is None:
        return None
    if _may_have_edge_spaces(data):
        frame = _strip_text_columns(frame, header)
    suspect = _suspect_rows(frame, header, schema)
    if suspect.any():
        messages = _recheck_rows(frame, header, schema, np.flatnonzero(suspect))
        if messages is None:
            return None
        if messages:
            return messages
    frame["_line"] = np.arange(2, len(frame) + 2, dtype=np.int64)
    if schema == "legacy":
        for name, value in zip(LEGACY_FILLED, ("", STATUS_LEGACY_OK, "", ""), strict=True):
            frame[name] = value
    return FileTable(source, _record_columns(header, schema), frame, schema == "legacy")


_SENTINEL = "\x01"
_SENTINEL_COLUMN = "\x01end"


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def _prepared(data: bytes, columns: int) -> tuple[bytes, bool, int] | None:
    """(bytes for pandas, whether each line ends with a marker cell, lines), or None.

    pandas pads a short row with empty cells, so a short row could pass as complete.
    Without quotes, every line is a row and a comma count proves every row full.
    With quotes, a marker cell is appended to each line; a short row is one whose
    marker column is empty.  NUL bytes, marker bytes, lone CRs: the exact reader.
    """
    if b"\x00" in data or _SENTINEL.encode() in data:
        return None
    if b"\r" in data:
        if data.count(b"\r") != data.count(b"\r\n"):
            return None
        data = data.replace(b"\r\n", b"\n")
    lines = _line_count(data)
    if b'"' not in data:
        if data.count(b",") != lines * (columns - 1):
            return None
        return data, False, lines
    marked = data.replace(b"\n", b",\x01\n")
    return (marked if marked.endswith(b"\n") else marked + b",\x01"), True, lines


def _pandas_read(data: bytes, header: list[str]):
    """The file as a DataFrame (text as object, metrics float), or None when unsure."""
    import pandas as pd

    prepared = _prepared(data, len(header))
    if prepared is None:
        return None
    data, marked, lines = prepared
    names = [*header, _SENTINEL_COLUMN] if marked else list(header)
    floats = [name for name in header if _is_float_column(name)]
    dtypes = {name: (np.float64 if name in floats else object) for name in names}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            frame = pd.read_csv(
                io.BytesIO(data),
                names=names,
                header=0,
                dtype=dtypes,
                keep_default_na=False,
                na_values={name: [""] for name in floats},
                index_col=False,
                engine="c",
                encoding="utf-8",
            )
    except (ValueError, TypeError, OverflowError, UnicodeError, Warning, pd.errors.ParserError):
        return None
    if len(frame) + 1 != lines:
        return None
    if marked:
        if not (frame[_SENTINEL_COLUMN].to_numpy() == _SENTINEL).all():
            return None
        frame = frame.drop(columns=_SENTINEL_COLUMN)
    return frame


def _is_float_column(name: str) -> bool:
    column = OPTIONAL_COLUMN_BY_NAME.get(name)
    return name in NUMERIC_COLUMNS or (column is not None and column.kind in NUMERIC_OPTIONAL_KINDS)


_SPACE_BYTES = np.zeros(256, dtype=bool)  # ASCII bytes str.strip() removes, but line ends
_SPACE_BYTES[[9, 11, 12, 28, 29, 30, 31, 32]] = True
_STRUCTURE_BYTES = np.zeros(256, dtype=bool)  # what can sit at a cell's edge: , " newline
_STRUCTURE_BYTES[[10, 13, 34, 44]] = True
_SCAN_BYTES = 1 << 17


def _may_have_edge_spaces(data: bytes) -> bool:
    """False when no cell can start or end with whitespace, so none needs stripping:
    ASCII, no CR, and no space-like byte next to a separator, quote or line end."""
    if not data.isascii() or b"\r" in data:
        return True
    array = np.frombuffer(data, dtype=np.uint8)
    for low in range(0, len(array), _SCAN_BYTES):
        block = array[low : low + _SCAN_BYTES]
        spaces = np.flatnonzero(_SPACE_BYTES[block]) + low
        if not len(spaces):
            continue
        if spaces[0] == 0 or spaces[-1] == len(array) - 1:
            return True
        if (_STRUCTURE_BYTES[array[spaces - 1]] | _STRUCTURE_BYTES[array[spaces + 1]]).any():
            return True
    return False


def _strip_text_columns(frame, header: list[str]):
    """Strip every text cell; distinct values are stripped once."""
    import pandas as pd

    for name in header:
        if frame[name].dtype != object:
            continue
        original = frame[name].to_numpy()
        values = _stripped(original)
        if values is not original:  # keep object dtype: pandas would infer "str"
            frame[name] = pd.Series(values, index=frame.index, dtype=values.dtype)
    return frame


def _stripped(values: np.ndarray) -> np.ndarray:
    import pandas as pd

    if all(value == value.strip() for value in set(values)):  # set(): faster than pd.unique
        return values
    codes, uniques = pd.factorize(values)
    return np.array([value.strip() for value in uniques.tolist()], dtype=object)[codes]


def _suspect_rows(frame, header: list[str], schema: str) -> np.ndarray:
    """Rows that may break a rule; exact row checks decide and name the rule."""
    suspect = frame["api"].to_numpy() == ""
    if schema == "v1":
        status = frame["status"].to_numpy()
        ok, failed = status == STATUS_OK, status == STATUS_FAILED
        has_error = (frame["error_type"].to_numpy() != "") | (frame["error"].to_numpy() != "")
        suspect |= frame["schema_version"].to_numpy() != SCHEMA_VERSION
        suspect |= ~(ok | failed) | (ok & has_error) | (failed & ~has_error)
        success = ok
    else:
        success = np.ones(len(frame), dtype=bool)
    metrics = {name: frame[name].to_numpy(dtype=np.float64) for name in NUMERIC_COLUMNS}
    suspect |= success & bad_metrics(metrics)
    for name in header:
        column = OPTIONAL_COLUMN_BY_NAME.get(name)
        if column is not None:
            suspect |= bad_optional(column, frame[name].to_numpy())
    return suspect


def bad_metrics(metrics) -> np.ndarray:
    """Rows whose metrics (name -> float64 array) may break metric_error; NaN counts."""
    values = [metrics[name] for name in NUMERIC_COLUMNS]
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values[0]) | (values[0] <= 0)
        for value in values[1:]:
            bad |= ~np.isfinite(value) | (value < 0)
    return bad


def bad_optional(column, values: np.ndarray) -> np.ndarray:
    """Cells of an optional column that may break its rule (NaN: empty, so not here)."""
    if column.kind is Kind.TEXT:
        return np.zeros(len(values), dtype=bool)
    if column.kind is Kind.CHOICE:
        return (values != "") & ~np.isin(values, np.array(column.choices, dtype=object))
    # numeric: NaN marks an empty cell (fine) or unparsable text (recheck by text)
    values = values.astype(np.float64)
    with np.errstate(invalid="ignore"):
        bad = np.isinf(values)
        fractional = ~np.isnan(values) & (values != np.floor(values))
        if column.kind is Kind.COUNT:
            return bad | (values < 1) | fractional
        if column.kind is Kind.NON_NEGATIVE_INT:
            return bad | (values < 0) | fractional
        if column.kind is Kind.FINITE:
            return bad
        if column.kind is Kind.POSITIVE:
            return bad | (values <= 0)
        return bad | (values < 0)


def _recheck_rows(frame, header: list[str], schema: str, rows: np.ndarray) -> list[str] | None:
    """Exact messages for suspect rows; None when a message would quote a cell's
    original text that the float columns no longer hold (the exact reader decides)."""
    quoting = tuple(f"{name} " for name in _numeric_optionals(header))
    messages = []
    for row in rows:
        record = {name: _cell_text(frame[name].iat[row]) for name in header}
        error = row_error(record, schema)
        if error and error.startswith(quoting):
            return None
        if error:
            messages.append(f"line {row + 2}: {error}")
    return messages


def _cell_text(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(float(value))
    return str(value)


class LoadResult:
    """The rows of one run (plain input, baseline or candidate) and what was wrong.

    Files are kept as column tables; ``records`` (one dict per row, the seed's view)
    is built only when someone asks for it.
    """

    def __init__(self, group, paths, records=None, issues=None, tables=None):
        self.group = group
        self.paths = list(paths)
        self.issues = list(issues or [])
        self.tables = list(tables or [])
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


def table_records(table: FileTable) -> list[dict]:
    """One dict per row, keyed like the seed's records (metrics float, "" when empty)."""
    frame = table.frame
    numeric = set(NUMERIC_COLUMNS) | set(_numeric_optionals(table.columns))
    columns = {
        name: [_record_value(v, name in numeric) for v in frame[name].tolist()]
        for name in table.columns
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
    table, issues = read_table(path, group)
    return (table_records(table) if table is not None else []), issues


def load_inputs(paths, group: str = "input") -> LoadResult:
    """Read every file of one run; a bad file adds issues and contributes no rows."""
    tables, issues = [], []
    for path in paths:
        table, file_issues = read_table(path, group)
        issues.extend(file_issues)
        if table is not None:
            tables.append(table)
    return LoadResult(group, paths, issues=issues, tables=tables)
