"""The pandas-free reader's view of a run: the columns a report reads, over the
accepted tables of one run in order (see frames.FrameView, the pandas path's twin)."""

from __future__ import annotations

import numpy as np

from fi_attn_bench.results.schema import IDENTITY_DEFAULTS, case_columns
from fi_attn_bench.summarizer.identity import identity_filled, natural_codes
from fi_attn_bench.summarizer.scan import ScannedTable, scan_table


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
    runs = []
    for paths in (baseline, candidate):  # one after the other: each file's scan uses both cores
        runs.append(scan_inputs(paths, cases=True))
        if runs[-1] is None:
            return None
    return runs[0], runs[1]
