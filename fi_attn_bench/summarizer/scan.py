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
    Role,
    is_case_column,
)
from fi_attn_bench.summarizer.loading import (
    ERROR_COLUMNS,
    NUMERIC_OPTIONAL_KINDS,
    bad_metrics,
    bad_optional,
    float_or_nan,
    header_error,
    row_error,
)
from fi_attn_bench.summarizer.scan_cells import _locate

BOM = b"\xef\xbb\xbf"
CHUNK_ROWS = 8192  # rows per vectorized step: temporaries stay in cache
MAX_RANGE_WORDS = 6  # text_range compares cells of up to 48 bytes as words
MAX_PEELED = 32  # distinct values found by comparison passes; more are hashed in Python
SAMPLE_ROWS = 4096  # _word_codes: rows whose distinct words are tried on the whole column
MAX_SAMPLED = 64  # more distinct words than this in the sample: a full np.unique
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
        self._codes: dict[str, tuple[np.ndarray, list[str]]] = {}
        self._floats: dict[str, np.ndarray] = {}
        self._lines: dict[int, list[str]] = {}
        self.quoted = False  # some cell is quoted: cells are read by span, then unquoted
        self._bad: dict[str, np.ndarray] = {}  # bad_numbers of validation-only columns

    @property
    def rows(self) -> int:
        return len(self.line_starts)

    def has(self, name: str) -> bool:
        return name in self.position

    def span(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) of every cell of a column, made when asked (not kept: what is
        read from them, codes and numbers, is kept instead)."""
        column = self.position[name]
        starts = self.line_starts if column == 0 else self.column_ends[column - 1] + 1
        return starts, self.column_ends[column] - starts

    def cell(self, row: int, name: str) -> bytes:
        """One cell's raw bytes."""
        column = self.position[name]
        start = int(self.line_starts[row] if column == 0 else self.column_ends[column - 1][row] + 1)
        return self.buffer[start : int(self.column_ends[column][row])]

    def text(self, row: int, name: str) -> str:
        """One stripped cell ("" where the pandas path blanks legacy error columns)."""
        if not self.has(name) or (self.legacy and name in ERROR_COLUMNS):
            return IDENTITY_DEFAULTS.get(name, "")
        if self.quoted:
            return unquote(self.cell(row, name).decode("ascii")).strip()
        if row not in self._lines:
            start = int(self.line_starts[row])
            end = int(self.column_ends[len(self.header) - 1][row])
            self._lines[row] = self.buffer[start:end].decode("ascii").split(",")
        return self._lines[row][self.position[name]].strip()

    def codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """(integer code per row, distinct stripped texts) of a text column; "" in every row
        where the file lacks the column (the pandas path's NaN)."""
        if name not in self._codes:
            if self.legacy and name == "status":
                self._codes[name] = (np.zeros(self.rows, np.int64), [STATUS_LEGACY_OK])
            elif not self.has(name):
                self._codes[name] = (np.zeros(self.rows, np.int64), [""])
            else:
                self._codes[name] = _stripped(*self._factorize(*self.span(name)))
        return self._codes[name]

    def floats(self, name: str) -> np.ndarray:
        """A numeric column as float64: Python's float() of each cell, NaN when empty,
        unparsable or not finite (what the exact reader stores)."""
        if name not in self._floats:
            self._floats[name] = self.parsed(name)
        return self._floats[name]

    def parsed(self, name: str) -> np.ndarray:
        """floats() of a column, parsed now (thread-safe: reads only)."""
        starts, lengths = self.span(name)
        if not lengths.any():  # an empty column (many optional ones are): nothing to parse
            return np.broadcast_to(np.nan, len(starts))  # read-only, no memory
        return self._numbers(starts, lengths)

    def bad_numbers(self, column) -> np.ndarray:
        """Rows whose cell of a number column may break its rule (kept).  Plain
        decimals are screened by their bytes alone; any other cell is parsed as
        ``floats`` would parse it and judged by ``bad_optional``."""
        if column.name in self._bad:
            return self._bad[column.name]
        starts, lengths = self.span(column.name)
        odd = np.zeros(len(starts), dtype=bool)
        if not lengths.any():  # an empty column (many optional ones are): nothing breaks a rule
            self._bad[column.name] = odd
            return odd
        for low in range(0, len(starts), CHUNK_ROWS):
            part = slice(low, low + CHUNK_ROWS)
            cells = self._right_aligned(starts[part] + lengths[part], lengths[part])
            odd[part] = (lengths[part] > 0) & ~_plain_valid(cells, column.kind)
        bad = np.zeros(len(starts), dtype=bool)
        rows = np.flatnonzero(odd)
        if len(rows):
            values = self._python_floats(starts[rows], lengths[rows])
            bad[rows] = bad_optional(column, values) | np.isnan(values)
        self._bad[column.name] = bad
        return bad

    def store_floats(self, name: str, values: np.ndarray) -> None:
        self._floats[name] = values

    def forget_floats(self, kept) -> None:
        """Drop parsed columns other than ``kept`` (read only to validate them; parsed
        again if someone asks)."""
        self._floats = {name: values for name, values in self._floats.items() if name in kept}

    def key_codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """(code per row, distinct stripped texts) of a case column (kept: labels read
        them).  Short cells are compared as 8-byte words (np.unique), faster than hashing
        many distinct texts."""
        if name in self._codes:
            return self._codes[name]
        starts, lengths = self.span(name)
        words = self._words(starts, lengths)
        if words is None:
            return self.codes(name)
        distinct, codes = _word_codes(words)
        texts = [
            word.to_bytes(8, "big").rstrip(b"\0").decode("ascii") for word in distinct.tolist()
        ]
        self._codes[name] = _stripped(codes.reshape(-1).astype(np.int32), texts)
        return self._codes[name]

    def text_range(self, name: str) -> list[str] | None:
        """[smallest, largest] non-empty stripped text of a column, comparing cells as
        big-endian words, each word read only for the rows still tied (no hashing of
        200k distinct timestamps, no sort)."""
        starts, lengths = self.span(name)
        rows = np.flatnonzero(lengths > 0)
        if not len(rows):
            return None
        starts, lengths = starts[rows], lengths[rows]
        edges = np.concatenate([self.bytes[starts], self.bytes[starts + lengths - 1]])
        count = -(-int(lengths.max()) // 8)
        if (
            count > MAX_RANGE_WORDS
            or int((starts + 8 * (count - 1)).max()) > len(self.buffer) - 8
            or (_SPACE[edges] | (edges == 34)).any()
        ):
            texts = [text for text in self.codes(name)[1] if text]
            return [min(texts), max(texts)] if texts else None
        ends = [self._extreme(starts, lengths, count, pick) for pick in (np.min, np.max)]
        low, high = (self.text(int(rows[index]), name) for index in ends)
        return [low] if low == high else [low, high]

    def _extreme(self, starts, lengths, count: int, pick) -> int:
        """Index of the smallest (``pick=np.min``) or largest cell, word by word."""
        windows = np.ndarray((len(self.buffer) - 7,), dtype="<u8", buffer=self.buffer, strides=(1,))
        tied = np.arange(len(starts))
        for k in range(count):
            shown = np.clip(lengths[tied] - 8 * k, 0, 8)
            words = windows[starts[tied] + 8 * k].byteswap() & _HIGH_BYTES[shown]
            tied = tied[words == pick(words)]
            if len(tied) == 1:
                break
        return int(tied[0])

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
        rows = np.flatnonzero(np.isnan(values) & (lengths > 0))
        if len(rows):
            values[rows] = self._python_floats(starts[rows], lengths[rows])
        return values

    def _python_floats(self, starts, lengths) -> np.ndarray:
        """float_or_nan of each of these cells (Python's float(): the exact semantics)."""
        buffer = self.buffer
        return np.array(
            [
                float_or_nan(buffer[start : start + length].decode("ascii"))
                for start, length in zip(starts.tolist(), lengths.tolist(), strict=True)
            ],
            dtype=np.float64,
        )

    def _right_aligned(self, ends, lengths) -> np.ndarray:
        """(rows, 16) bytes: each cell's last 16 bytes, zeros before its start.

        Every cell ends after the header, which is longer than 16 bytes."""
        windows = np.ndarray((len(self.buffer) - 7,), dtype="<u8", buffer=self.buffer, strides=(1,))
        words = np.empty((len(ends), 2), dtype="<u8")  # two word gathers: faster than 16-byte voids
        words[:, 0] = windows[ends - NUMBER_WIDTH]
        words[:, 1] = windows[ends - 8]
        words[:, 0] &= _HIGH_BYTES[np.clip(lengths - 8, 0, 8)]
        words[:, 1] &= _HIGH_BYTES[np.clip(lengths, 0, 8)]
        cells = words.view(np.uint8)
        cells[lengths > NUMBER_WIDTH] = 255  # too long: not parsed here
        return cells


def unquote(text: str) -> str:
    """A cell's value: a quoted cell (validated by _outside_quotes) without its quotes."""
    if text.startswith('"'):
        return text[1:-1].replace('""', '"')
    return text


def _word_codes(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(words, return_inverse=True), faster for the usual few distinct values:
    the distinct words of the first rows are tried on every row (a search in a short
    sorted list), and kept only when they explain every row."""
    distinct = np.unique(words[:SAMPLE_ROWS])
    if len(distinct) <= MAX_SAMPLED:
        codes = np.searchsorted(distinct, words)
        if (distinct[np.minimum(codes, len(distinct) - 1)] == words).all():
            return distinct, codes
    return np.unique(words, return_inverse=True)


def _stripped(codes: np.ndarray, texts: list[str]) -> tuple[np.ndarray, list[str]]:
    """Codes of unquoted, stripped texts: raw values that read alike share a code."""
    index: dict[str, int] = {}
    mapping = np.array(
        [index.setdefault(unquote(text).strip(), len(index)) for text in texts], np.int32
    )
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


def _plain_valid(cells: np.ndarray, kind) -> np.ndarray:
    """Right-aligned cells that are digits with at most one '.' (so finite and >= 0)
    and meet ``kind`` by their bytes: whole (no '.') for counts, a non-zero digit for
    counts and positives.  False means "parse it", not "invalid".  Bytes are tested
    eight at a time, as words (see _plain_decimals)."""
    is_digit = (cells - np.uint8(48)) < 10
    is_dot = cells == 46
    allowed = (is_digit | is_dot | (cells == 0)).view("<u8")
    digit_words, dot_words = is_digit.view("<u8"), is_dot.view("<u8")
    ok = ((allowed[:, 0] & allowed[:, 1]) == _ONES) & ((digit_words[:, 0] | digit_words[:, 1]) != 0)
    dots = _byte_sum(dot_words[:, 0] + dot_words[:, 1])
    ok &= dots == 0 if kind in (Kind.COUNT, Kind.NON_NEGATIVE_INT) else dots <= 1
    if kind in (Kind.COUNT, Kind.POSITIVE):
        nonzero = (is_digit & (cells != 48)).view("<u8")
        ok &= (nonzero[:, 0] | nonzero[:, 1]) != 0
    return ok


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
    if error or any('"' in name for name in header):
        return None
    quoted = buffer.find(b'"', newline) >= 0
    wanted = list(range(len(header))) if cases or quoted else _read_columns(header)
    located = _locate(buffer, newline + 1, len(header), wanted)
    if located is None:
        return None
    starts, ends, quoted_columns = located
    table = ScannedTable(str(path), header, schema == "legacy", buffer, starts, ends)
    table.quoted = quoted
    if any(_is_numeric(header[column]) for column in quoted_columns):
        return None  # pandas reads "1.5" as a number; this reader would not
    return table if _all_rows_valid(table) else None


def _is_numeric(name: str) -> bool:
    column = OPTIONAL_COLUMN_BY_NAME.get(name)
    return name in NUMERIC_COLUMNS or (column is not None and column.kind in NUMERIC_OPTIONAL_KINDS)


def _read_columns(header: list[str]) -> list[int]:
    """Columns whose cell ends are kept: every non-case column, the one before each
    (where its cells start) and the last (where lines end)."""
    used = [index for index, name in enumerate(header) if not is_case_column(name)]
    return sorted({len(header) - 1, *used, *(index - 1 for index in used if index)})


def _plain_bytes(path):
    """The file's bytes (mapped, not copied), CRLF as LF; None for an irregular or
    empty file, NUL or a lone CR."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
                return None
            buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    if buffer.find(b"\0") >= 0:
        return None
    if buffer.find(b"\r") >= 0:
        data = buffer[:]
        if data.count(b"\r") != data.count(b"\r\n"):
            return None
        return data.replace(b"\r\n", b"\n")
    return buffer


# ------------------------------------------------------------------ validation


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
        "energy_mJ",
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

    names = [name for name in table.header if _is_numeric(name)]
    reported = [
        name for name in names if name in REPORTED_NUMBERS or name not in OPTIONAL_COLUMN_BY_NAME
    ]
    checked = [name for name in names if name not in reported]
    texts = [name for name in table.header if _factorized(name)]
    with ThreadPoolExecutor(PARSE_THREADS) as pool:
        coded = [pool.submit(table.codes, name) for name in texts]
        screened = [pool.submit(table.bad_numbers, OPTIONAL_COLUMN_BY_NAME[n]) for n in checked]
        for name, values in zip(reported, pool.map(table.parsed, reported), strict=True):
            table.store_floats(name, values)
        for future in [*coded, *screened]:
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
        quoted_text = (first == 34) & (lengths[rows] > 2) & ~_SPACE[second] & (second != 34)
        found |= (lengths[rows] > 0) & ((~_SPACE[first] & (first != 34)) | quoted_text)
    return found


def _bad_optional_cells(table: ScannedTable, column) -> np.ndarray:
    if column.kind is Kind.TEXT:
        return np.zeros(table.rows, dtype=bool)
    if column.kind is Kind.CHOICE:
        return _rows_with(table, column.name, lambda text: text and text not in column.choices)
    if column.name not in REPORTED_NUMBERS:
        return table.bad_numbers(column)  # validated without keeping its values
    values = table.floats(column.name)
    return bad_optional(column, values) | (np.isnan(values) & _maybe_text(table, column.name))


def _record(table: ScannedTable, row: int) -> dict:
    return {name: table.text(row, name) for name in table.header}
