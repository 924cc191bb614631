"""Where the cells of a CSV are: one vectorized pass over blocks of whole lines.

Separators are commas and line breaks outside quoted cells.  Quotes must sit where
``csv.reader`` reads them as quotes (a cell's first or last byte, or doubled inside a
quoted cell); a quoted line break makes the file the pandas path's (blocks are split
at line breaks).  Part of the pandas-free reader (``scan``).
"""

from __future__ import annotations

import numpy as np

CHUNK_BYTES = 1 << 20  # bytes per separator scan block: few numpy calls per byte


def _locate(buffer, start: int, columns: int, wanted: list[int]):
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
