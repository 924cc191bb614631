"""Reader without pandas: CSV bytes to validated columns with numpy.

Importing pandas costs more than summarizing 200k rows, so a plain (Markdown-only)
summary or comparison reads the common file here: ASCII, no quotes, no NUL or lone
CR, every line exactly as wide as the header.  The file is mapped, not copied (a file
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

import mmap
import os
import stat

import numpy as np

from fi_attn_bench.results.schema import (
    IDENTITY_DEFAULTS,
    NUMERIC_COLUMNS,
    OPTIONAL_COLUMN_BY_NAME,
    SCHEMA_VERSION,
    STATUS_FAILED,
    STATUS_LEGACY_OK,
    STATUS_OK,
    Kind,
    case_columns,
    is_case_column,
)
from fi_attn_bench.summarizer.identity import identity_filled, natural_codes
from fi_attn_bench.summarizer.loading import (
    ERROR_COLUMNS,
    bad_metrics,
    bad_optional,
    float_or_nan,
    header_error,
    row_error,
)

BOM = b"\xef\xbb\xbf"
CHUNK_BYTES = 1 << 17  # bytes per separator scan block: its temporaries are reused, not refaulted
CHUNK_ROWS = 8192  # rows per vectorized step: temporaries stay in cache
MAX_PEELED = 32  # distinct values found by comparison passes; more are hashed in Python
MAX_RECHECKS = 256  # more suspect rows than this: the file is surely invalid
NUMBER_WIDTH = 16  # cells up to 16 bytes may take the vectorized number parser
MAX_DIGITS = 15  # a mantissa below 2**53 converts to float64 exactly

_SPACE = np.zeros(256, dtype=bool)  # what str.strip() removes, ASCII part
_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
_HIGH_BYTES = np.array(  # keep the top n bytes of a little-endian word
    [0, *(((1 << 64) - 1) ^ ((1 << (8 * (8 - n))) - 1) for n in range(1, 9))], dtype="<u8"
)
_ONES = np.uint64(0x0101010101010101)  # one 1 per byte: sums 0/1 bytes by multiplication
_POSITIONS = np.uint64(0x0706050403020100)  # byte k holds k
_POW10 = 10 ** np.arange(NUMBER_WIDTH + 1, dtype=np.int64)
_LOW_BYTES = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)  # low n bytes


class ScannedTable:
    """One accepted CSV: where its cells are, and the columns a summary reads.

    Text is held as it will be used, stripped (as the pandas path strips every cell).
    Cell ends are kept only for the columns validation and summary read; a case
    parameter is read from its line when a label needs it.
    """

    def __init__(self, source, header, legacy, buffer, line_starts, column_ends):
        self.source = source
        self.header = header
        self.legacy = legacy
        self.buffer = buffer  # the file's bytes: a read-only mmap, or bytes
        self.bytes = np.frombuffer(buffer, dtype=np.uint8)
        self.line_starts = line_starts
        self.column_ends = column_ends  # column index -> position of each cell's separator
        self.position = {name: index for index, name in enumerate(header)}
        self._spans: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._codes: dict[str, tuple[np.ndarray, list[str]]] = {}
        self._floats: dict[str, np.ndarray] = {}
        self._lines: dict[int, list[str]] = {}

    @property
    def rows(self) -> int:
        return len(self.line_starts)

    def has(self, name: str) -> bool:
        return name in self.position

    def span(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) of every cell of a column (kept: most are read twice)."""
        if name not in self._spans:
            column = self.position[name]
            starts = self.line_starts if column == 0 else self.column_ends[column - 1] + 1
            self._spans[name] = starts, self.column_ends[column] - starts
        return self._spans[name]

    def text(self, row: int, name: str) -> str:
        """One stripped cell ("" where the pandas path blanks legacy error columns)."""
        if not self.has(name) or (self.legacy and name in ERROR_COLUMNS):
            return IDENTITY_DEFAULTS.get(name, "")
        if row not in self._lines:
            start = int(self.line_starts[row])
            end = int(self.column_ends[len(self.header) - 1][row])
            self._lines[row] = self.buffer[start:end].decode("ascii").split(",")
        return self._lines[row][self.position[name]].strip()

    def codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """(integer code per row, distinct stripped texts) of a text column."""
        if name not in self._codes:
            if self.legacy and name == "status":
                self._codes[name] = (np.zeros(self.rows, np.int64), [STATUS_LEGACY_OK])
            else:
                self._codes[name] = _stripped(*self._factorize(*self.span(name)))
        return self._codes[name]

    def floats(self, name: str) -> np.ndarray:
        """A numeric column as float64: Python's float() of each cell, NaN when empty,
        unparsable or not finite (what the exact reader stores)."""
        if name not in self._floats:
            self._floats[name] = self._numbers(*self.span(name))
        return self._floats[name]

    def key_codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """(code per row, distinct stripped texts) of a case column.  Short cells are
        compared as 8-byte words (np.unique), faster than hashing many distinct texts."""
        starts, lengths = self.span(name)
        words = self._words(starts, lengths)
        if words is None:
            return self.codes(name)
        distinct, codes = np.unique(words, return_inverse=True)
        texts = [
            word.to_bytes(8, "big").rstrip(b"\0").decode("ascii") for word in distinct.tolist()
        ]
        return codes.reshape(-1), texts

    def _words(self, starts, lengths) -> np.ndarray | None:
        """Each cell as a big-endian word, left-aligned and zero-padded (no cell holds
        NUL, so shorter sorts first, as in text); None when a cell is longer than 8
        bytes or starts or ends with a space (strip first: the generic way).

        Every cell ends after the header, which is longer than 8 bytes."""
        if not len(starts) or int(lengths.max()) > 8:
            return None
        count = len(self.buffer) - 7
        windows = np.ndarray((count,), dtype="<u8", buffer=self.buffer, strides=(1,))
        right = windows[starts + lengths - 8].byteswap()  # the 8 bytes up to each cell's end
        words = (right & _LOW_BYTES[lengths]) << (np.uint64(64) - lengths.astype(np.uint64) * 8)
        last, first = right & np.uint64(0xFF), words >> np.uint64(56)
        if ((_SPACE[last] | _SPACE[first]) & (lengths > 0)).any():
            return None
        return words

    def _windows(self, width: int) -> np.ndarray:
        """Every ``width``-byte window of the buffer, one per start position (a view)."""
        count = len(self.buffer) - width + 1
        return np.ndarray((count,), dtype=f"V{width}", buffer=self.buffer, strides=(1,))

    def _equal(self, starts, lengths, value: bytes) -> np.ndarray:
        """Which cells hold exactly these bytes, compared as little-endian words."""
        same = lengths == len(value)
        count = -(-len(value) // 8)
        if not value:
            return same
        wanted = np.frombuffer(value.ljust(8 * count, b"\0"), dtype="<u8")
        masks = np.full(count, (1 << 64) - 1, dtype="<u8")
        masks[-1] = (1 << (8 * (len(value) - 8 * count + 8))) - 1
        last = len(self.buffer) - 8 * count  # the last start with a whole window
        if last >= 0:
            windows = self._windows(8 * count)
            for low in range(0, len(starts), CHUNK_ROWS):
                part = same[low : low + CHUNK_ROWS]
                where = np.minimum(starts[low : low + CHUNK_ROWS], last)
                words = windows[where].view("<u8").reshape(-1, count)
                for index in range(count):
                    part &= (words[:, index] & masks[index]) == wanted[index]
        for row in np.flatnonzero((starts > last) & (lengths == len(value))):
            start = int(starts[row])  # the file's last bytes: compared as bytes
            same[row] = self.buffer[start : start + len(value)] == value
        return same

    def _factorize(self, starts, lengths) -> tuple[np.ndarray, list[str]]:
        """Raw distinct texts: peel off one value per pass while values are few."""
        value = self.buffer[int(starts[0]) : int(starts[0] + lengths[0])]
        same = self._equal(starts, lengths, value)
        codes = (~same).view(np.int8)  # 0: the first row's value; 1: not yet known
        texts = [value.decode("ascii")]
        left = np.flatnonzero(codes)
        if len(left):
            codes = codes.astype(np.int32)
        while len(left) and len(texts) < MAX_PEELED:
            first = int(left[0])
            value = self.buffer[int(starts[first]) : int(starts[first] + lengths[first])]
            same = self._equal(starts[left], lengths[left], value)
            codes[left[same]] = len(texts)
            texts.append(value.decode("ascii"))
            left = left[~same]
        if len(left):
            index = {text: code for code, text in enumerate(texts)}
            codes[left] = [
                index.setdefault(self.buffer[s : s + n].decode("ascii"), len(index))
                for s, n in zip(starts[left].tolist(), lengths[left].tolist(), strict=True)
            ]
            texts = list(index)
        return codes, texts

    def _numbers(self, starts, lengths) -> np.ndarray:
        """Plain decimals vectorized; Python's float() for the rest (exponents, signs,
        long mantissas), which keeps its exact semantics."""
        values = np.empty(len(starts), dtype=np.float64)
        for low in range(0, len(starts), CHUNK_ROWS):
            part = slice(low, low + CHUNK_ROWS)
            ends = starts[part] + lengths[part]
            values[part] = _plain_decimals(self._right_aligned(ends, lengths[part]))
        for row in np.flatnonzero(np.isnan(values) & (lengths > 0)):
            start = int(starts[row])
            values[row] = float_or_nan(self.buffer[start : start + int(lengths[row])].decode())
        return values

    def _right_aligned(self, ends, lengths) -> np.ndarray:
        """(rows, 16) bytes: each cell's last 16 bytes, zeros before its start.

        Every cell ends after the header, which is longer than 16 bytes."""
        windows = self._windows(NUMBER_WIDTH)[ends - NUMBER_WIDTH]
        words = windows.view("<u8").reshape(len(ends), 2)
        words[:, 0] &= _HIGH_BYTES[np.clip(lengths - 8, 0, 8)]
        words[:, 1] &= _HIGH_BYTES[np.clip(lengths, 0, 8)]
        cells = words.view(np.uint8)
        cells[lengths > NUMBER_WIDTH] = 255  # too long: not parsed here
        return cells


def _stripped(codes: np.ndarray, texts: list[str]) -> tuple[np.ndarray, list[str]]:
    """Codes of stripped texts: raw values that strip alike share a code."""
    index: dict[str, int] = {}
    mapping = np.array([index.setdefault(text.strip(), len(index)) for text in texts], np.int64)
    return (codes if len(index) == len(texts) else mapping[codes]), list(index)


def _plain_decimals(cells: np.ndarray) -> np.ndarray:
    """float() of right-aligned cells that are digits with at most one '.', else NaN.

    The digits, read eight at a time as words, form an integer below 2**53 and the
    point divides it by an exact power of ten: one rounding, so float()'s value.
    """
    digits = cells - np.uint8(48)
    is_digit = digits < 10
    is_dot = cells == 46
    allowed = (is_digit | is_dot | (cells == 0)).view("<u8")
    digit_bits, dot_bits = is_digit.view("<u8"), is_dot.view("<u8")
    per_word = _byte_sum(digit_bits)
    count = per_word[:, 0] + per_word[:, 1]
    dots = _byte_sum(dot_bits[:, 0] + dot_bits[:, 1])
    plain = ((allowed[:, 0] & allowed[:, 1]) == _ONES) & (dots <= 1)
    plain &= (count - np.uint64(1)) < np.uint64(MAX_DIGITS)  # 1 to MAX_DIGITS digits
    words = _eight_digits((digits * is_digit).view("<u8"))
    weighted = (words[:, 0] * np.uint64(10**8) + words[:, 1]).view(np.int64)
    scale = np.take(_POW10, _after_dot(dot_bits).view(np.int64), mode="clip")
    right = weighted % scale  # digits after the point; those before it sit one place high
    mantissa = np.where(dots > 0, right + (weighted - right) // 10, weighted)
    return np.where(plain, mantissa / scale, np.nan)


def _byte_sum(words: np.ndarray) -> np.ndarray:
    """How many bytes of each word are 1 (bytes are 0 or 1; at most 2 after adding)."""
    return (words * _ONES) >> np.uint64(56)


def _after_dot(dot_bits: np.ndarray) -> np.ndarray:
    """Bytes after the (single) point: a byte at position p of a word times
    0x0706050403020100 puts 7 - p in the top byte; the first word adds the second's 8."""
    after = (dot_bits * _POSITIONS) >> np.uint64(56)
    return after[:, 0] + after[:, 1] + (dot_bits[:, 0] != 0) * np.uint64(8)


def _eight_digits(words: np.ndarray) -> np.ndarray:
    """The number whose decimal digits are a word's bytes, first byte most significant."""
    words = (words * np.uint64(10) + (words >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    words = (words * np.uint64(100) + (words >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    return (words * np.uint64(10000) + (words >> np.uint64(32))) & np.uint64(0xFFFFFFFF)


# ------------------------------------------------------------------ the file


def scan_table(path, cases: bool = False) -> ScannedTable | None:
    """The table of one CSV, or None when the pandas path must read it.  ``cases``:
    also locate the case parameters' cells (a comparison matches on them)."""
    buffer = _plain_bytes(path)
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
    if error:
        return None
    wanted = list(range(len(header))) if cases else _read_columns(header)
    located = _locate(buffer, newline + 1, len(header), wanted)
    if located is None:
        return None
    table = ScannedTable(str(path), header, schema == "legacy", buffer, *located)
    return table if _all_rows_valid(table) else None


def _read_columns(header: list[str]) -> list[int]:
    """Columns whose cell ends are kept: every non-case column, the one before each
    (where its cells start) and the last (where lines end)."""
    used = [index for index, name in enumerate(header) if not is_case_column(name)]
    return sorted({len(header) - 1, *used, *(index - 1 for index in used if index)})


def _plain_bytes(path):
    """The file's bytes (mapped, not copied), CRLF as LF; None for an irregular or
    empty file, quotes, NUL or a lone CR."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
                return None
            buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    if buffer.find(b'"') >= 0 or buffer.find(b"\0") >= 0:
        return None
    if buffer.find(b"\r") >= 0:
        data = buffer[:]
        if data.count(b"\r") != data.count(b"\r\n"):
            return None
        return data.replace(b"\r\n", b"\n")
    return buffer


def _locate(buffer, start: int, columns: int, wanted: list[int]):
    """(line starts, {column: cell ends}), or None unless the bytes after the header
    are ASCII lines of exactly columns - 1 commas each (none blank, short or long).

    Two passes over blocks of whole lines: count the lines, then fill arrays of
    exactly that size.  Fresh memory is slow to touch; block temporaries are reused."""
    data = np.frombuffer(buffer, dtype=np.uint8)
    blocks = _line_blocks(buffer, start)
    scratch = _Scratch(max(high - low for low, high in blocks))
    counts = [scratch.lines(data[low:high]) for low, high in blocks]
    if None in counts:
        return None
    position = np.int32 if len(buffer) < 2**31 else np.int64
    starts = np.empty(sum(counts), dtype=position)
    ends = {column: np.empty(len(starts), dtype=position) for column in wanted}
    row = 0
    for (low, high), lines in zip(blocks, counts, strict=True):
        cells = scratch.cell_ends(data[low:high], lines, columns)
        if cells is None:
            return None
        starts[row] = low
        np.add(cells[:-1, -1], low + 1, out=starts[row + 1 : row + lines], casting="unsafe")
        for column in wanted:
            np.add(cells[:, column], low, out=ends[column][row : row + lines], casting="unsafe")
        row += lines
    return starts, ends


def _line_blocks(buffer, start: int) -> list[tuple[int, int]]:
    """(low, high) byte ranges of about CHUNK_BYTES, each ending after a newline
    (or at the end of the file)."""
    blocks, low, end = [], start, len(buffer)
    while low < end:
        high = buffer.rfind(b"\n", low, min(low + CHUNK_BYTES, end)) + 1
        if high <= low:  # a line longer than a block, or the last line without "\n"
            high = buffer.find(b"\n", low) + 1 or end
        blocks.append((low, high))
        low = high
    return blocks


class _Scratch:
    """Masks reused from block to block."""

    def __init__(self, size: int):
        self.breaks = np.empty(size, dtype=bool)
        self.commas = np.empty(size, dtype=bool)

    def lines(self, block: np.ndarray) -> int | None:
        """Lines in a block of whole lines (the file's last may lack its newline);
        None when a byte is not ASCII."""
        if block.max() > 127:
            return None
        breaks = self.breaks[: len(block)]
        np.equal(block, 10, out=breaks)
        return int(np.count_nonzero(breaks)) + (block[-1] != 10)

    def cell_ends(self, block: np.ndarray, lines: int, columns: int) -> np.ndarray | None:
        """(lines, columns) separator offsets in a block, or None when a line has
        another number of cells."""
        breaks, commas = self.breaks[: len(block)], self.commas[: len(block)]
        np.equal(block, 10, out=breaks)
        np.equal(block, 44, out=commas)
        commas |= breaks
        found = np.flatnonzero(commas)
        if block[-1] != 10:  # end the file's last line at the end
            found = np.append(found, len(block))
        if len(found) != lines * columns:
            return None
        cells = found.reshape(lines, columns)
        if not (block[cells[:-1, -1]] == 10).all():
            return None
        return cells


# ------------------------------------------------------------------ validation


def _all_rows_valid(table: ScannedTable) -> bool:
    """True when no row breaks a rule: vectorized checks flag rows that might, and
    ``row_error`` (the exact rules) decides each flagged row."""
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
    return all(row_error(_record(table, int(row)), schema) is None for row in rows)


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
    for name in names:
        starts, lengths = table.span(name)
        first = table.bytes[np.minimum(starts[rows], len(table.bytes) - 1)]
        found |= (lengths[rows] > 0) & ~_SPACE[first]
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


# ------------------------------------------------------------------ the run


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
        labels = []
        for t, row in self._locate_rows(np.asarray(rows, dtype=np.int64)):
            table = self.tables[t]
            names = self.case_columns if columns is None else columns
            cells = ((name, table.text(row, name)) for name in names)
            labels.append(", ".join(f"{n}={v}" for n, v in cells if v) or "n/a")
        return _objects(labels)

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
    for paths in (baseline, candidate):
        view = scan_inputs(paths, cases=True)
        if view is None:
            return None
        runs.append(view)
    return runs[0], runs[1]
