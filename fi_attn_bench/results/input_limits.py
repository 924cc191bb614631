"""The limits an input file is held to, checked as it is opened and read.

A result CSV or samples file past one is refused with one line (exit 2) before it can fill
the memory or block: a FIFO, device or socket is refused from its ``fstat`` (opened without
blocking), a file larger than its limit from its size, and a line, column count or
decompressed size past its limit as soon as the reader meets it.  The limits are several
times what a real sweep writes (a 200,000-case CSV is 200 MB, 1 KB a row, 61 columns).
"""

from __future__ import annotations

import errno
import io
import os
import stat

MAX_CSV_BYTES = 512 << 20  # 2.5x a 200,000-case CSV
MAX_CSV_LINES = 1_000_000  # 5x a 200,000-case CSV; a blank line costs pandas a whole row
MAX_LINE_BYTES = 16 << 20  # a real row is about 1 KB; a traceback cell can be megabytes
MAX_COLUMNS = 4096  # a real header has about 60
MAX_SAMPLES_FILE_BYTES = 256 << 20  # gzip as written; a 200,000-case sweep's is tens of MB
MAX_SAMPLES_EXPANDED_BYTES = 1 << 30  # decompressed
MAX_SAMPLES_LINE_BYTES = 64 << 20  # one case's samples as JSON


class InputLimitError(ValueError):
    """An input past a limit, or not a regular file; the message is the one line printed."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


class OpenedOnce:
    """A file opened once by ``open_regular``, each of whose readers in turn reads it from the
    start (a stored-rows read checks, parses and reads its CSV through one open)."""

    def __init__(self, path, max_bytes: int):
        self.path = path
        self._file = open_regular(path, max_bytes)

    def rewound(self) -> io.BufferedReader:
        """A reader from the file's start whose ``close`` leaves the file open."""
        self._file.seek(0)
        return io.BufferedReader(_Borrowed(self._file))

    def __enter__(self) -> OpenedOnce:
        return self

    def __exit__(self, *exc_info) -> None:
        self._file.close()


class _Borrowed(io.RawIOBase):
    """Reads an open file that its owner closes."""

    def __init__(self, file):
        super().__init__()
        self._file = file

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self._file.readinto(buffer)


def open_regular(path, max_bytes: int):
    """``open(path, "rb")`` of a regular file of at most ``max_bytes``; InputLimitError
    otherwise.  Opened with O_NONBLOCK so a FIFO without a writer cannot block the open.
    An ``OpenedOnce`` is not opened again: its reader from the start is returned."""
    if isinstance(path, OpenedOnce):
        return path.rewound()
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    descriptor = os.open(path, flags)
    try:
        status = os.fstat(descriptor)
        if stat.S_ISDIR(status.st_mode):  # the seed's message for a directory
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(status.st_mode):
            raise InputLimitError(f"{_kind(status.st_mode)}, not a regular file")
        if status.st_size > max_bytes:
            raise InputLimitError(
                f"the file is {status.st_size:,} bytes, over the limit of {max_bytes:,}"
            )
        _blocking(descriptor)
        return open(descriptor, "rb")  # noqa: SIM115 - the caller closes it
    except BaseException:
        os.close(descriptor)
        raise


def _blocking(descriptor: int) -> None:
    """Clear O_NONBLOCK again: a regular file reads the same, but say what we mean."""
    try:
        import fcntl
    except ImportError:  # Windows: no O_NONBLOCK was set
        return
    flags = fcntl.fcntl(descriptor, fcntl.F_GETFL)
    fcntl.fcntl(descriptor, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)


class LineLimits:
    """Counts bytes, lines and the bytes of the line in progress over consecutive chunks;
    ``check`` raises InputLimitError at the first limit passed."""

    def __init__(self, max_bytes: int, max_lines: int, max_line_bytes: int, what: str = "the file"):
        self.max_bytes = max_bytes
        self.max_lines = max_lines
        self.max_line_bytes = max_line_bytes
        self.what = what
        self.total = 0
        self.lines = 0
        self.open_line = 0  # bytes since the last line end

    def check(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self.total > self.max_bytes:
            raise InputLimitError(f"{self.what} is over the limit of {self.max_bytes:,} bytes")
        # one scan of the chunk: lines end in LF (or CR LF), else in CR alone (old Mac files)
        separator = b"\n"
        ends = chunk.count(separator)
        if not ends and b"\r" in chunk:
            separator = b"\r"
            ends = chunk.count(separator)
        self.lines += ends
        if self.lines > self.max_lines:
            raise InputLimitError(f"{self.what} has over the limit of {self.max_lines:,} lines")
        if ends == 0:
            self.open_line += len(chunk)
            longest = self.open_line
        else:
            first = chunk.find(separator)
            inner = _longest_inner_line(chunk, separator, self.max_line_bytes)
            longest = max(self.open_line + first, inner)
            self.open_line = len(chunk) - 1 - chunk.rfind(separator)
            longest = max(longest, self.open_line)
        if longest > self.max_line_bytes:
            raise InputLimitError(
                f"{self.what} has a line over the limit of {self.max_line_bytes:,} bytes"
            )


def _longest_inner_line(chunk: bytes, separator: bytes, limit: int) -> int:
    """The longest line between two line ends of ``chunk``; 0 when no line that short of the
    chunk could pass ``limit`` (always, at the real limits: a chunk is at most a line limit)."""
    if len(chunk) <= limit:
        return 0
    import numpy as np

    data = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(data == separator[0])
    return int(np.diff(ends).max() - 1) if len(ends) > 1 else 0


EXPANDED_CHUNK_BYTES = 1 << 20


def check_gzip_within_limits(path) -> None:
    """InputLimitError when a gzip file (every member of it) is not a regular file, or its
    compressed size, decompressed size or longest line pass the samples limits; counted
    chunk by chunk before anything is parsed, so a small file that expands to gigabytes is
    refused at the limit in a second or two, in a few megabytes."""
    import gzip

    limits = LineLimits(
        MAX_SAMPLES_EXPANDED_BYTES,
        MAX_SAMPLES_EXPANDED_BYTES,  # lines: bounded by the bytes
        MAX_SAMPLES_LINE_BYTES,
        what="the decompressed file",
    )
    with open_regular(path, MAX_SAMPLES_FILE_BYTES) as raw, gzip.GzipFile(fileobj=raw) as stream:
        while chunk := stream.read(EXPANDED_CHUNK_BYTES):
            limits.check(chunk)


def open_gzip_text(path):
    """The text of a gzip file, opened as ``open_regular`` opens it (no FIFO or device)."""
    import gzip
    import io

    raw = open_regular(path, MAX_SAMPLES_FILE_BYTES)
    try:
        return io.TextIOWrapper(gzip.GzipFile(fileobj=raw), encoding="utf-8")
    except BaseException:
        raw.close()
        raise
