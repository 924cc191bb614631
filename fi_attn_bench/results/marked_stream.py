"""A result CSV's bytes as pandas reads them: a marker cell before every line end, checked
to be UTF-8 as they pass.

The marker is a byte no UTF-8 text holds (0xFF), so it can never be mistaken for data; a
quoted line break gets one too, which ``unmarked_text`` takes out of the cell again.
"""

from __future__ import annotations

import codecs
import queue
import threading

import numpy as np

from fi_attn_bench.results import input_limits
from fi_attn_bench.results.input_limits import LineLimits, open_regular

MARKER = "\udcff"  # the 0xFF byte as surrogateescape decodes it
LINE_MARK = "," + MARKER  # what the stream puts before every line end, quoted ones too
_MARK_BYTES = b"\xff"
_CRLF_STAND_IN = b"\xfe"  # also never in UTF-8: holds a CR LF while lone CRs are marked
CHUNK_BYTES = 1 << 20
_CHUNKS_AHEAD = 4


class MarkedStream:
    """A CSV file's bytes with the marker cell before every line end, checked to be UTF-8.

    ``complete_lines``: stop at the last line end (a row cut off by a kill is not read).
    ``ahead``: read, check and mark on a thread of its own while pandas parses what came
    before (the file reads and numpy's checks run without the GIL; pandas' parse holds it).
    ``open_quote``: the file ends inside a quoted cell; the cell and its row end there, as
    Python's csv module (the seed's reader) ends them.
    A FIFO or device, or a file past a limit of ``input_limits`` (its size, lines, a line),
    raises InputLimitError (a ValueError): at the open, or from ``read`` when it is met.
    """

    def __init__(
        self, path, complete_lines: bool = False, ahead: bool = False, open_quote: bool = False
    ):
        self._file = open_regular(path, input_limits.MAX_CSV_BYTES)
        self._limits = LineLimits(
            input_limits.MAX_CSV_BYTES,
            input_limits.MAX_CSV_LINES,
            input_limits.MAX_LINE_BYTES,
        )
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._complete_lines = complete_lines
        self._open_quote = open_quote
        self._pending = b""  # a CR that may be half of a CR LF, or bytes after the last line
        self._line_ended = True  # the last byte passed on ends a line (or none was)
        self._first = True
        self._done = False
        self._queue = None
        if ahead:
            self._queue = queue.Queue(maxsize=_CHUNKS_AHEAD)
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._produce, daemon=True)
            self._thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def read(self, size: int = -1) -> bytes:
        if self._queue is None:
            return self._next()
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def _next(self) -> bytes:
        while not self._done:
            chunk = self._file.read(CHUNK_BYTES)
            self._limits.check(chunk)
            marked = self._mark(chunk)
            if marked:
                return marked
        return b""

    def _produce(self) -> None:
        try:
            while not self._stop.is_set():
                marked = self._next()
                self._put(marked)
                if not marked:
                    return
        except BaseException as exc:  # noqa: BLE001 - raised again by read()
            self._put(exc)

    def _put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _mark(self, chunk: bytes) -> bytes:
        if self._first:
            self._first = False
            chunk = chunk.removeprefix(codecs.BOM_UTF8)
        if not chunk.isascii() and (self._decoder.getstate()[0] or not utf8_sequences_ok(chunk)):
            self._decoder.decode(chunk)  # raises UnicodeDecodeError on a bad byte
        data = self._pending + chunk  # no copy when nothing is pending
        if not chunk:
            return self._end(data)
        kept = self._kept_back(data)
        body, self._pending = (data[:-kept], data[-kept:]) if kept else (data, b"")
        if body:
            self._line_ended = body.endswith((b"\n", b"\r"))
        return _marked(body)

    def _kept_back(self, data: bytes) -> int:
        """How many bytes at the end of ``data`` wait for the next chunk: a CR that may be half
        of a CR LF, and with ``complete_lines`` the whole unfinished last line.  Other bytes
        go on at once: copying each chunk into the next took over a quarter of the stream's time."""
        if not self._complete_lines:
            return 1 if data.endswith(b"\r") else 0
        area = data[:-1] if data.endswith(b"\r") else data
        return len(data) - 1 - max(area.rfind(b"\n"), area.rfind(b"\r"))

    def _end(self, kept: bytes) -> bytes:
        """What the stream adds at the end of the file, given the bytes it ``kept`` back."""
        self._done = True
        self._decoder.decode(b"", final=True)
        self._pending = b""
        if self._open_quote:
            return kept + b'",' + _MARK_BYTES
        if kept.endswith(b"\r"):  # a line that a CR ends is whole
            return _marked(kept)
        if self._complete_lines or self._line_ended:
            return b""  # a cut-off last line is not read; or nothing is left
        return b"," + _MARK_BYTES  # the last line has no line end

    def close(self) -> None:
        if self._queue is not None:
            self._stop.set()
            self._thread.join()
        self._file.close()


def utf8_sequences_ok(chunk: bytes) -> bool:
    """True when every non-ASCII byte of ``chunk`` is part of a whole two- or three-byte UTF-8
    sequence the decoder accepts, checked on an array of those bytes without making a str
    (much cheaper on mostly-ASCII text).  False says nothing: the decoder then judges."""
    data = np.frombuffer(chunk, dtype=np.uint8)
    where = np.flatnonzero(data >= 0x80)
    high = data[where]
    follows = (high & 0xC0) == 0x80  # a continuation byte
    two = (high >= 0xC2) & (high <= 0xDF)
    three = (high >= 0xE0) & (high <= 0xEF)
    leads = np.flatnonzero(two | three)
    sizes = np.where(two[leads], 2, 3)
    if int(sizes.sum()) != len(high):  # a stray continuation, a four-byte or invalid lead
        return False
    for offset, starts in ((1, leads), (2, leads[sizes == 3])):
        at = starts + offset
        if len(at) and (at[-1] >= len(high)):  # cut off at the end of the chunk
            return False
        if not (follows[at] & (where[at] == where[starts] + offset)).all():
            return False
    second = high[leads + 1]
    first = high[leads]
    overlong_or_surrogate = ((first == 0xE0) & (second < 0xA0)) | (
        (first == 0xED) & (second > 0x9F)
    )
    return not overlong_or_surrogate.any()


def _marked(body: bytes) -> bytes:
    """``,<marker>`` before every line end (LF, CR LF or CR) of whole lines."""
    if b"\r" not in body:
        return body.replace(b"\n", b"," + _MARK_BYTES + b"\n")
    body = body.replace(b"\r\n", _CRLF_STAND_IN)
    body = body.replace(b"\r", b"," + _MARK_BYTES + b"\r")
    body = body.replace(b"\n", b"," + _MARK_BYTES + b"\n")
    return body.replace(_CRLF_STAND_IN, b"," + _MARK_BYTES + b"\r\n")


def unmarked_text(cell: str) -> str:
    """A cell without the markers its quoted line breaks got."""
    return cell.replace(LINE_MARK, "")
