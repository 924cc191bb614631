"""Reader without pandas: CSV bytes to validated columns with numpy.

Importing pandas costs more than summarizing 200k rows, so a plain (Markdown-only)
summary or comparison reads the common file here: ASCII, no NUL or lone CR, every line
exactly as wide as the header; quoted cells (the harness quotes ``repro`` and
``kernels``) as csv.reader reads them, except a quoted line break or number.  The file is mapped, not copied (a file
truncated while it is read would end the process: benchmark CSVs are appended to or
replaced, never cut).  One pass finds every separator; after that only the cells a
report needs are read, numbers as 8-byte words, and text is compared as distinct
values (short case cells as words that sort like their text).

It never words an input error itself.  Anything unusual, and any row a vectorized
check cannot vouch for that ``row_error`` then rejects, makes it return None: the
pandas path reads the file again and decides, with its exact messages.  So a file
this reader accepts is one the pandas path accepts, with the same values.
"""

from __future__ import annotations

import numpy as np

from fi_attn_bench.results.schema import (
    IDENTITY_DEFAULTS,
    NUMERIC_COLUMNS,
    OPTIONAL_COLUMN_BY_NAME,
    SCHEMA_VERSION,
    STATUS_FAILED,
    STATUS_OK,
    Kind,
    Role,
    case_columns,
)
from fi_attn_bench.summarizer.identity import identity_filled, natural_codes
from fi_attn_bench.summarizer.loading import (
    NUMERIC_OPTIONAL_KINDS,
    bad_metrics,
    bad_optional,
    header_error,
    row_error,
)
from fi_attn_bench.summarizer.scan_file import (
    BOM,
    CHUNK_ROWS,
    MAX_RECHECKS,
    SPACE,
    ScannedTable,
    is_numeric,
    locate_cells,
    plain_bytes,
    read_columns,
)


def scan_table(path, cases: bool = False) -> ScannedTable | None:
    """The table of one CSV, or None when the pandas path must read it.  ``cases``:
    also locate the case parameters' cells (a comparison matches on them)."""
    buffer = plain_bytes(path)
    if buffer is None:
        return None
    start = 3 if buffer[:3] == BOM else 0
    newline = buffer.find(b"\n", start)
    if newline < 0 or newline + 1 == len(buffer):
        return None  # no rows: the pandas path words it
    try:
        header = buffer[start:newline].decode("ascii").split(",")
    except UnicodeDecodeError:
        return None
    schema, error = header_error(header)
    if error or any('"' in name for name in header):
        return None
    quoted = buffer.find(b'"', newline) >= 0
    wanted = list(range(len(header))) if cases or quoted else read_columns(header)
    located = locate_cells(buffer, newline + 1, len(header), wanted)
    if located is None:
        return None
    starts, ends, quoted_columns = located
    table = ScannedTable(str(path), header, schema == "legacy", buffer, starts, ends)
    table.quoted = quoted
    if any(is_numeric(header[column]) for column in quoted_columns):
        return None  # pandas reads "1.5" as a number; this reader would not
    return table if _all_rows_valid(table) else None


# Number columns the reports read (the others are parsed to validate them, then dropped).
REPORTED_NUMBERS = frozenset(
    (
        *NUMERIC_COLUMNS,
        "samples",
        "noise_pct",
        "drift_pct",
        "time_q1_ms",
        "time_q3_ms",
        "power_capped_pct",
        "sm_clock_mean_MHz",
        "pct_peak_bw",
        "pct_peak_tflops",
        "shard",
        "num_shards",
        "paired_ratio_lo",
        "paired_ratio_hi",
    )
)


PARSE_THREADS = 2


RANGE_TEXT_COLUMNS = (
    "timestamp_utc",
)  # read as a range (text_range), never factorized  # numpy's gathers release the GIL: number columns parse side by side


def _parse_numbers(table: ScannedTable) -> None:
    """Parse every number column (validation reads them all) and factorize the text
    columns validation and the environment read, on PARSE_THREADS threads when the
    table is large enough to gain from it."""
    if table.rows < 4 * CHUNK_ROWS or PARSE_THREADS < 2:
        return
    from concurrent.futures import ThreadPoolExecutor

    names = [name for name in table.header if is_numeric(name)]
    texts = [name for name in table.header if _factorized(name)]
    with ThreadPoolExecutor(PARSE_THREADS) as pool:
        coded = [pool.submit(table.codes, name) for name in texts]
        for name, values in zip(names, pool.map(table.parsed, names), strict=True):
            table.store_floats(name, values)
        for future in coded:
            future.result()


def _factorized(name: str) -> bool:
    """Text columns whose codes validation or the environment section reads."""
    if name in ("api", "status", "schema_version"):
        return True
    column = OPTIONAL_COLUMN_BY_NAME.get(name)
    if column is None or column.kind in NUMERIC_OPTIONAL_KINDS or name in RANGE_TEXT_COLUMNS:
        return False
    return column.kind is Kind.CHOICE or column.role is Role.ENVIRONMENT


def _all_rows_valid(table: ScannedTable) -> bool:
    """True when no row breaks a rule: vectorized checks flag rows that might, and
    ``row_error`` (the exact rules) decides each flagged row."""
    _parse_numbers(table)
    suspect = _rows_with(table, "api", lambda text: text == "")
    if table.legacy:
        success = np.ones(table.rows, dtype=bool)
    else:
        success = _v1_suspects(table, suspect)
    metrics = {name: table.floats(name) for name in NUMERIC_COLUMNS}
    suspect |= success & bad_metrics(metrics)
    for name in table.header:
        column = OPTIONAL_COLUMN_BY_NAME.get(name)
        if column is not None:
            suspect |= _bad_optional_cells(table, column)
    rows = np.flatnonzero(suspect)
    if len(rows) > MAX_RECHECKS:
        return False
    schema = "legacy" if table.legacy else "v1"
    valid = all(row_error(_record(table, int(row)), schema) is None for row in rows)
    table.forget_floats(REPORTED_NUMBERS)
    return valid


def _rows_with(table: ScannedTable, name: str, predicate) -> np.ndarray:
    codes, texts = table.codes(name)
    return np.isin(codes, [code for code, text in enumerate(texts) if predicate(text)])


def _v1_suspects(table: ScannedTable, suspect: np.ndarray) -> np.ndarray:
    """Flag rows whose version, status or error details may be wrong; the ok mask."""
    suspect |= _rows_with(table, "schema_version", lambda text: text != SCHEMA_VERSION)
    ok = _rows_with(table, "status", lambda text: text == STATUS_OK)
    failed = _rows_with(table, "status", lambda text: text == STATUS_FAILED)
    has_error = _maybe_text(table, "error_type") | _maybe_text(table, "error")
    suspect |= ~(ok | failed) | (ok & has_error)
    failed_rows = np.flatnonzero(failed)
    suspect[failed_rows[~_certainly_text(table, failed_rows, "error_type", "error")]] = True
    return ok


def _maybe_text(table: ScannedTable, name: str) -> np.ndarray:
    return table.span(name)[1] > 0


def _certainly_text(table: ScannedTable, rows: np.ndarray, *names: str) -> np.ndarray:
    """Whether one of these cells starts with a non-space byte (so is not empty)."""
    found = np.zeros(len(rows), dtype=bool)
    last = len(table.bytes) - 1
    for name in names:
        starts, lengths = table.span(name)
        first = table.bytes[np.minimum(starts[rows], last)]
        second = table.bytes[np.minimum(starts[rows] + 1, last)]
        quoted_text = (first == 34) & (lengths[rows] > 2) & ~SPACE[second] & (second != 34)
        found |= (lengths[rows] > 0) & ((~SPACE[first] & (first != 34)) | quoted_text)
    return found


def _bad_optional_cells(table: ScannedTable, column) -> np.ndarray:
    if column.kind is Kind.TEXT:
        return np.zeros(table.rows, dtype=bool)
    if column.kind is Kind.CHOICE:
        return _rows_with(table, column.name, lambda text: text and text not in column.choices)
    values = table.floats(column.name)
    return bad_optional(column, values) | (np.isnan(values) & _maybe_text(table, column.name))


def _record(table: ScannedTable, row: int) -> dict:
    return {name: table.text(row, name) for name in table.header}


class ScannedView:
    """The columns a summary reads (see frames.FrameView), over accepted tables in order."""

    def __init__(self, paths, tables: list[ScannedTable]):
        self.paths = list(paths)
        self.tables = tables
        self.valid_files = len({table.source for table in tables})
        self.rows = sum(table.rows for table in tables)
        names = dict.fromkeys(name for table in tables for name in table.header)
        self.case_columns = case_columns(name for name in names if name != "api")
        self.offsets = np.cumsum([0, *(table.rows for table in tables)])
        self._floats: dict[str, np.ndarray] = {}

    def codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """Codes over all rows; ``_source`` is the file of each row."""
        if name == "_source":
            return self._joined(lambda table: (np.zeros(table.rows, np.int8), [table.source]))
        return self._joined(lambda table: table.codes(name))

    def _joined(self, codes_of) -> tuple[np.ndarray, list[str]]:
        if len(self.tables) == 1:
            return codes_of(self.tables[0])
        index: dict[str, int] = {}
        parts = []
        for table in self.tables:
            codes, texts = codes_of(table)
            mapping = np.array([index.setdefault(text, len(index)) for text in texts], np.int64)
            parts.append(mapping[codes])
        return np.concatenate(parts), list(index)

    def floats(self, name: str) -> np.ndarray:
        """A numeric column over all rows, NaN where a file lacks it (read-only)."""
        if name not in self._floats:
            parts = [
                table.floats(name) if table.has(name) else np.broadcast_to(np.nan, table.rows)
                for table in self.tables
            ]
            self._floats[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return self._floats[name]

    def _locate_rows(self, rows):
        tables = np.searchsorted(self.offsets, rows, side="right") - 1
        return zip(tables.tolist(), (rows - self.offsets[tables]).tolist(), strict=True)

    def texts(self, name: str, rows) -> list:
        """Stripped cells of these rows; ``_source`` and ``_line`` (an int) as the
        pandas path holds them (every line of an accepted file is a row)."""
        rows = np.asarray(rows, dtype=np.int64)
        if name == "_source":
            return [self.tables[t].source for t, _ in self._locate_rows(rows)]
        if name == "_line":
            return [row + 2 for _, row in self._locate_rows(rows)]
        return [self.tables[t].text(row, name) for t, row in self._locate_rows(rows)]

    def labels(self, rows, columns=None) -> np.ndarray:
        """describe_case of these rows: "name=value, ..." of non-empty parameters
        (``columns``: these case parameters, default the run's own)."""
        rows = np.asarray(rows, dtype=np.int64)
        names = self.case_columns if columns is None else columns
        pieces = []
        for name in names:  # "name=value" made once per distinct value, looked up by code
            codes, texts = self._joined(lambda table, name=name: _piece_codes(table, name))
            pieces.append(_objects(texts)[codes[rows]])
        if not pieces:
            return np.full(len(rows), "n/a", dtype=object)
        labels = [", ".join(filter(None, parts)) or "n/a" for parts in zip(*pieces, strict=True)]
        return _objects(labels)

    def text_range(self, name: str) -> list[str] | None:
        """[smallest, largest] non-empty text of a column (one item when equal); None
        when no file has a non-empty cell.  For columns of distinct values (timestamps)."""
        ends = [
            found for table in self.tables if table.has(name) and (found := table.text_range(name))
        ]
        if not ends:
            return None
        low, high = min(end[0] for end in ends), max(end[-1] for end in ends)
        return [low] if low == high else [low, high]

    def distinct(self, name: str) -> list[str] | None:
        """Sorted distinct non-empty texts of a column; None when no file has it."""
        tables = [table for table in self.tables if table.has(name)]
        if not tables:
            return None
        return sorted({text for table in tables for text in table.codes(name)[1] if text})

    def objects(self, name: str) -> np.ndarray:
        """A text column (or ``_source``) over all rows as an object array."""
        codes, texts = self.codes(name)
        return _objects(texts)[codes]

    def key_codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """(code per row, distinct texts) of a case column; -1 where a file lacks it
        (the pandas path's NaN), the default where it is an identity column."""
        parts = [
            table.key_codes(name) if table.has(name) else (np.full(table.rows, -1), [])
            for table in self.tables
        ]
        return identity_filled(name, *natural_codes(parts))

    @staticmethod
    def table(columns: dict):
        return ColumnTable(columns)

    @staticmethod
    def concat(tables: list):
        return ColumnTable.concat(tables)


def _piece_codes(table: ScannedTable, name: str) -> tuple[np.ndarray, list[str]]:
    """(code per row, "name=value" or "" per distinct value) of one case column."""
    if not table.has(name):
        default = IDENTITY_DEFAULTS.get(name, "")
        return np.zeros(table.rows, dtype=np.int8), [f"{name}={default}" if default else ""]
    codes, texts = table.key_codes(name)
    return codes, [f"{name}={text}" if text else "" for text in texts]


def _objects(values: list) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


class ColumnTable:
    """The few DataFrame features the Markdown renderer uses: len, columns, [name]."""

    def __init__(self, columns: dict):
        self._columns = dict(columns)
        self.columns = list(self._columns)

    def __len__(self) -> int:
        return len(next(iter(self._columns.values()))) if self._columns else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self._columns[name]

    @property
    def iloc(self) -> _Rows:
        """Rows by position (a slice or integer array), as DataFrame.iloc."""
        return _Rows(self)

    def insert(self, position: int, name: str, value) -> None:
        """A column at ``position``; a scalar fills every row (as DataFrame.insert)."""
        column = np.full(len(self), value, dtype=object) if np.isscalar(value) else value
        items = list(self._columns.items())
        items.insert(position, (name, column))
        self._columns = dict(items)
        self.columns = list(self._columns)

    @staticmethod
    def concat(tables: list) -> ColumnTable:
        """Rows of tables with the same columns, one after another."""
        names = tables[0].columns
        return ColumnTable({name: np.concatenate([t[name] for t in tables]) for name in names})


class _Rows:
    def __init__(self, table: ColumnTable):
        self.table = table

    def __getitem__(self, rows) -> ColumnTable:
        return ColumnTable({name: self.table[name][rows] for name in self.table.columns})


def scan_inputs(paths, cases: bool = False) -> ScannedView | None:
    """All files read by this reader, or None when any needs the pandas path."""
    tables = []
    for path in paths:
        table = scan_table(path, cases)
        if table is None:
            return None
        tables.append(table)
    return ScannedView(paths, tables)


def scan_runs(baseline, candidate) -> tuple[ScannedView, ScannedView] | None:
    """Both runs of a comparison, case cells located; None when a file needs the
    pandas path.  Any header name is fine: the comparison adds no columns to a run,
    and ``_source``/``_line`` are answered from the file, whatever a header says."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:  # numpy releases the GIL: both runs side by side
        runs = list(pool.map(lambda paths: scan_inputs(paths, cases=True), (baseline, candidate)))
    if None in runs:
        return None
    return runs[0], runs[1]
