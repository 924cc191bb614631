"""A run's rows as the history store keeps them: results by column and rows in blocks.

``ResultColumns`` holds the fields of many ``CaseResult``s one list per field (a 200,000-case
run made without an object per row); a ``RowBlock`` holds the CSV rows by column (a text
column's distinct cells and a code per row, a numeric column's float64 values), compressed
with zlib column by column when stored.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fi_attn_bench.results.input_limits import MAX_CSV_BYTES, open_regular

_ZLIB_LEVEL = 6  # level 1 made the 200,000-row block 1.6x larger for 0.3 s less


@dataclass(frozen=True)
class CaseResult:
    """One case of one run: its identity, time and the conditions it ran under."""

    case_key: str  # case_identity(api, case fields)
    api: str
    impl: str
    fields_json: str  # the case fields alone, as JSON, for filters and labels
    status: str
    time_ms: float | None
    sm_clock_mean_MHz: float | None
    power_capped_pct: float | None
    row_json: str = ""  # the whole CSV row as JSON, where the run has no ``block``


@dataclass(frozen=True)
class ResultColumns:
    """The fields of many ``CaseResult``s, one list per field: what ``add_run`` stores, made
    without an object per row (200,000 frozen dataclasses took seconds)."""

    case_keys: list[str]
    apis: list[str]
    impls: list[str]
    fields_json: Sequence[str]  # a list, or a LazyTexts that encodes a row when asked
    statuses: list[str]
    time_ms: list[float | None]
    sm_clock_mean_MHz: list[float | None]
    power_capped_pct: list[float | None]

    def __len__(self) -> int:
        return len(self.case_keys)

    def result(self, index: int) -> CaseResult:
        return CaseResult(
            self.case_keys[index],
            self.apis[index],
            self.impls[index],
            self.fields_json[index],
            self.statuses[index],
            self.time_ms[index],
            self.sm_clock_mean_MHz[index],
            self.power_capped_pct[index],
        )

    @classmethod
    def of(cls, results: Sequence[CaseResult]) -> ResultColumns:
        if isinstance(results, ResultSequence):
            return results.columns
        return cls(
            *(
                [getattr(result, name) for result in results]
                for name in (
                    "case_key",
                    "api",
                    "impl",
                    "fields_json",
                    "status",
                    "time_ms",
                    "sm_clock_mean_MHz",
                    "power_capped_pct",
                )
            )
        )


class LazyTexts(Sequence):
    """A column of texts made row by row on access (``make(index)``): the fields JSON of a
    200,000-case run is only needed for the cases new to the store."""

    def __init__(self, length: int, make):
        self.length = length
        self.make = make

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self.make(i) for i in range(*index.indices(self.length))]
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(index)
        return self.make(index)


class ResultSequence(Sequence):
    """``ResultColumns`` read as a sequence of ``CaseResult`` (made on access)."""

    def __init__(self, columns: ResultColumns):
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self.columns.result(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.columns.result(index)


@dataclass(frozen=True)
class RowBlock:
    """CSV rows by column, one row per result of a run: a text column's distinct cells
    (``categories``) and one int32 code per row (-1: empty), or a numeric column's float64
    values (``categories`` None; NaN: empty)."""

    columns: tuple[str, ...]
    categories: tuple[tuple[str, ...] | None, ...]
    values: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return len(self.values[0]) if self.values else 0

    def take(self, positions: np.ndarray) -> RowBlock:
        return RowBlock(self.columns, self.categories, tuple(v[positions] for v in self.values))

    def rows(self) -> list[dict]:
        """Each row as {column: cell text}."""
        texts = [column_cell_texts(c, v) for c, v in zip(self.categories, self.values, strict=True)]
        return [dict(zip(self.columns, cells, strict=True)) for cells in zip(*texts, strict=True)]

    @classmethod
    def from_rows(cls, rows: Sequence[dict]) -> RowBlock:
        """A block of text columns holding ``rows`` (dicts of cell text)."""
        columns = list(dict.fromkeys(name for row in rows for name in row))
        categories, values = [], []
        for name in columns:
            cells = [str(row.get(name, "")) for row in rows]
            distinct = list(dict.fromkeys(cells))
            index = {text: code for code, text in enumerate(distinct)}
            categories.append(tuple(distinct))
            values.append(np.array([index[text] for text in cells], dtype=np.int32))
        return cls(tuple(columns), tuple(categories), tuple(values))

    def encode(self, case_ids: np.ndarray) -> tuple[bytes, bytes]:
        """(layout, data) as stored: JSON of the columns and categories; the case ids and
        each column's array, concatenated; both compressed."""
        layout = {
            "rows": len(case_ids),
            "columns": list(self.columns),
            "categories": [None if c is None else list(c) for c in self.categories],
        }
        arrays = [np.asarray(case_ids, dtype=np.int64)]
        arrays += [
            np.asarray(v, dtype=np.float64 if c is None else np.int32)
            for c, v in zip(self.categories, self.values, strict=True)
        ]
        packer = zlib.compressobj(_ZLIB_LEVEL)  # column by column: no copy of them all
        data = b"".join(
            [*(packer.compress(memoryview(np.ascontiguousarray(a)).cast("B")) for a in arrays)]
            + [packer.flush()]
        )
        return zlib.compress(json.dumps(layout).encode(), _ZLIB_LEVEL), data

    @classmethod
    def decode(cls, layout: bytes, data: bytes) -> tuple[np.ndarray, RowBlock]:
        """(case ids, block) of a stored block."""
        shape = json.loads(zlib.decompress(layout))
        raw = zlib.decompress(data)
        count = shape["rows"]
        case_ids = np.frombuffer(raw, dtype=np.int64, count=count)
        offset = case_ids.nbytes
        values = []
        for categories in shape["categories"]:
            dtype = np.float64 if categories is None else np.int32
            array = np.frombuffer(raw, dtype=dtype, count=count, offset=offset)
            values.append(array)
            offset += array.nbytes
        categories = tuple(None if c is None else tuple(c) for c in shape["categories"])
        return case_ids, cls(tuple(shape["columns"]), categories, tuple(values))


def column_cell_texts(categories, values: np.ndarray) -> list[str]:
    """A block column's cells as text: a code's category ("" for -1), or a number as
    ``number_text`` writes it."""
    if categories is None:
        distinct, inverse = np.unique(values, return_inverse=True)
        texts = [number_text(value) for value in distinct.tolist()]
        return [texts[index] for index in inverse.reshape(-1).tolist()]
    table = [*categories, ""]  # code -1 reads the last entry
    return [table[code] for code in values.tolist()]


def number_text(value: float) -> str:
    """A float cell as the history writes it back: "" for NaN, whole numbers as integers."""
    if value != value:
        return ""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def file_digest(path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open_regular(path, MAX_CSV_BYTES) as file:  # a FIFO or device: InputLimitError
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
