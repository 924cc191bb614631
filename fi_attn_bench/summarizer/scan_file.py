"""One CSV file read without pandas: its cells located in vectorized blocks (numpy only)."""

from __future__ import annotations

import mmap
import os
import stat

import numpy as np

from fi_attn_bench.results.schema import (
    IDENTITY_DEFAULTS,
    NUMERIC_COLUMNS,
    OPTIONAL_COLUMN_BY_NAME,
    STATUS_LEGACY_OK,
    is_case_column,
)
from fi_attn_bench.summarizer.loading import (
    ERROR_COLUMNS,
    NUMERIC_OPTIONAL_KINDS,
    float_or_nan,
)

BOM = b"\xef\xbb\xbf"


CHUNK_BYTES = 1 << 17  # bytes per separator scan block: its temporaries are reused, not refaulted


CHUNK_ROWS = 8192  # rows per vectorized step: temporaries stay in cache


MAX_RANGE_WORDS = 6  # text_range compares cells of up to 48 bytes as words


MAX_PEELED = 32  # distinct values found by comparison passes; more are hashed in Python


MAX_RECHECKS = 256  # more suspect rows than this: the file is surely invalid


NUMBER_WIDTH = 16  # cells up to 16 bytes may take the vectorized number parser


MAX_DIGITS = 15  # a mantissa below 2**53 converts to float64 exactly


SPACE = np.zeros(256, dtype=bool)  # what str.strip() removes, ASCII part


SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True


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
            self._floats[name] = self.parsed(name)
        return self._floats[name]

    def parsed(self, name: str) -> np.ndarray:
        """floats() of a column, parsed now (thread-safe: reads only)."""
        starts, lengths = self.span(name)
        if not lengths.any():  # an empty column (many optional ones are): nothing to parse
            return np.broadcast_to(np.nan, len(starts))  # read-only, no memory
        return self._numbers(starts, lengths)

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
        distinct, codes = np.unique(words, return_inverse=True)
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
            or (SPACE[edges] | (edges == 34)).any()
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
        if ((SPACE[last] | SPACE[first]) & (lengths > 0)).any():
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


def is_numeric(name: str) -> bool:
    column = OPTIONAL_COLUMN_BY_NAME.get(name)
    return name in NUMERIC_COLUMNS or (column is not None and column.kind in NUMERIC_OPTIONAL_KINDS)


def read_columns(header: list[str]) -> list[int]:
    """Columns whose cell ends are kept: every non-case column, the one before each
    (where its cells start) and the last (where lines end)."""
    used = [index for index, name in enumerate(header) if not is_case_column(name)]
    return sorted({len(header) - 1, *used, *(index - 1 for index in used if index)})


def plain_bytes(path):
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


def locate_cells(buffer, start: int, columns: int, wanted: list[int]):
    """(line starts, {column: cell ends}), or None unless the bytes after the header
    are ASCII lines of exactly columns - 1 commas each (none blank, short or long).

    Two passes over blocks of whole lines: count the lines, then fill arrays of
    exactly that size.  Fresh memory is slow to touch; block temporaries are reused."""
    data = np.frombuffer(buffer, dtype=np.uint8)
    blocks = _line_blocks(buffer, start)
    size = max(high - low for low, high in blocks)
    scratch = _Scratch(size)
    counts = [scratch.lines(data[low:high]) for low, high in blocks]
    if None in counts:
        return None
    position = np.int32 if len(buffer) < 2**31 else np.int64
    starts = np.empty(sum(counts), dtype=position)
    every = np.empty((columns, len(starts)), dtype=position)  # a row per column: contiguous
    first_rows = np.cumsum([0, *counts]).tolist()
    halves = [range(0, len(blocks) // 2), range(len(blocks) // 2, len(blocks))]

    def fill(indices: range, scratch: _Scratch) -> bool:
        for index in indices:
            low, high = blocks[index]
            row, lines = first_rows[index], counts[index]
            cells = scratch.cell_ends(data[low:high], lines, columns)
            if cells is None:
                return False
            starts[row] = low
            np.add(cells[:-1, -1], low + 1, out=starts[row + 1 : row + lines], casting="unsafe")
            np.add(cells.T, low, out=every[:, row : row + lines], casting="unsafe")
        return True

    scratches = [scratch, _Scratch(size)]
    if len(blocks) < 8:
        done = [fill(range(len(blocks)), scratch)]
    else:  # numpy releases the GIL: two halves of the file side by side
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(fill, halves, scratches))
    if not all(done):
        return None
    ends = {column: every[column] for column in wanted}
    quoted = scratches[0].quoted_columns | scratches[1].quoted_columns
    return starts, ends, frozenset(quoted)


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
        self.quoted_columns: set[int] = set()  # columns with a quoted cell

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
        np.equal(block, 34, out=commas)
        quotes = np.flatnonzero(commas)
        np.equal(block, 10, out=breaks)
        np.equal(block, 44, out=commas)
        commas |= breaks
        found = np.flatnonzero(commas)
        if len(quotes):
            found = _outside_quotes(block, found, quotes)
            if found is None:
                return None  # misplaced quotes, or a quoted line break
        if block[-1] != 10:  # end the file's last line at the end
            found = np.append(found, len(block))
        if len(found) != lines * columns:
            return None
        if len(quotes):  # the column of each opening quote: separators before it, per line
            column = np.searchsorted(found, quotes[0::2]) % columns
            self.quoted_columns.update(np.unique(column).tolist())
        cells = found.reshape(lines, columns)
        if not (block[cells[:-1, -1]] == 10).all():
            return None
        return cells


def _outside_quotes(block: np.ndarray, found: np.ndarray, quotes: np.ndarray):
    """The separators in ``found`` outside quoted cells, or None unless every quote is
    where csv.reader reads it as a quote (a cell's first or last byte, or doubled inside
    a quoted cell) and no line break is quoted (blocks are split at line breaks)."""
    if len(quotes) % 2:
        return None
    opening = np.zeros(len(quotes), dtype=bool)
    opening[0::2] = True
    before = np.where(quotes > 0, block[np.maximum(quotes - 1, 0)], 10)
    after = np.where(quotes + 1 < len(block), block[np.minimum(quotes + 1, len(block) - 1)], 10)
    doubled_before = np.zeros(len(quotes), dtype=bool)
    doubled_before[1:] = quotes[1:] == quotes[:-1] + 1
    doubled_after = np.zeros(len(quotes), dtype=bool)
    doubled_after[:-1] = doubled_before[1:]
    starts = (before == 44) | (before == 10) | doubled_before
    ends = (after == 44) | (after == 10) | doubled_after
    if not (np.where(opening, starts, ends)).all():
        return None
    # Separators between an opening and its closing quote: index ranges into ``found``,
    # marked +1/-1 at their ends and summed (over separators, not bytes: cheaper).
    first = np.searchsorted(found, quotes[0::2])
    last = np.searchsorted(found, quotes[1::2])
    size = len(found) + 1
    marks = np.bincount(first, minlength=size) - np.bincount(last, minlength=size)
    inside = np.cumsum(marks[:-1]) > 0
    if (block[found[inside]] == 10).any():
        return None
    return found[~inside]
