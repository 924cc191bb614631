"""Inputs past a documented limit, FIFOs and devices are refused in one line (exit 2).

Sizes past the real limits are sparse files (``truncate``) or lines of a few megabytes; the
rest run with a limit patched lower, so no test writes gigabytes.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fi_attn_bench.results import input_limits
from fi_attn_bench.results.input_limits import InputLimitError, LineLimits
from fi_attn_bench.results.reader import read_file
from fi_attn_bench.summarizer.rank_test import SamplesError, read_samples

ROOT = Path(__file__).resolve().parents[1]
REAL_CSV = ROOT / "tests" / "fixtures" / "real_csv" / "h100_decode_default.csv"
ENVIRONMENT = {**os.environ, "PYTHONPATH": str(ROOT)}


def _command(*arguments, cwd) -> subprocess.CompletedProcess:
    # timeout: the old reader blocks forever on a FIFO and reads /dev/zero until killed
    return subprocess.run(
        [sys.executable, *arguments],
        cwd=cwd,
        env=ENVIRONMENT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def _only_issue(path) -> str:
    read = read_file(path)
    assert read.file is None
    assert len(read.issues) == 1
    return read.issues[0].message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "results.csv"
    os.mkfifo(fifo)  # no writer ever opens it: opening it to read would block
    summary = _command(str(ROOT / "summarize_results.py"), str(fifo), cwd=tmp_path)
    assert summary.returncode == 2
    assert any("a FIFO, not a regular file" in line for line in _error_lines(summary))
    history = _command(
        "-m", "fi_attn_bench.history", "add", str(fifo), "--store", "s.sqlite", cwd=tmp_path
    )
    assert history.returncode == 2, history.stderr
    assert _error_lines(history) and "a FIFO, not a regular file" in history.stderr
    assert len(history.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_a_device_is_refused(tmp_path):
    summary = _command(str(ROOT / "summarize_results.py"), "/dev/zero", cwd=tmp_path)
    assert summary.returncode == 2
    assert any("a character device, not a regular file" in line for line in _error_lines(summary))


def test_a_file_over_the_size_limit_is_refused_from_its_size(tmp_path):
    sparse = tmp_path / "huge.csv"
    with open(sparse, "wb") as file:
        file.truncate(input_limits.MAX_CSV_BYTES + 1)  # a hole: no disk is written
    assert "over the limit of 536,870,912" in _only_issue(sparse)


def test_a_line_over_the_limit_is_refused(tmp_path):
    endless = tmp_path / "endless.csv"
    with open(endless, "wb") as file:
        file.truncate(input_limits.MAX_LINE_BYTES * 2)  # zeros in a hole: one line, no line end
    assert "a line over the limit of 16,777,216 bytes" in _only_issue(endless)
    long_row = tmp_path / "long_row.csv"
    real = REAL_CSV.read_bytes()
    long_row.write_bytes(real)
    with open(long_row, "r+b") as file:
        file.truncate(len(real) + input_limits.MAX_LINE_BYTES + 1)  # a last row past the limit
    assert "a line over the limit" in _only_issue(long_row)


def test_too_many_lines_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(input_limits, "MAX_CSV_LINES", 40)
    lines = REAL_CSV.read_bytes().splitlines(keepends=True)
    assert 20 < len(lines) <= 40
    assert read_file(REAL_CSV).file is not None
    blank = tmp_path / "blank.csv"
    blank.write_bytes(lines[0] + b"\n" * 100)
    assert "over the limit of 40 lines" in _only_issue(blank)


def test_a_header_of_too_many_columns_is_refused(tmp_path):
    wide = tmp_path / "wide.csv"
    names = [f"c{index}" for index in range(input_limits.MAX_COLUMNS + 1)]
    wide.write_text(",".join(names) + "\n" + ",".join("1" for _ in names) + "\n")
    assert "the header has 4,097 columns, over the limit of 4,096" in _only_issue(wide)


def test_a_quoted_header_cell_with_commas_is_not_counted_as_columns(tmp_path, monkeypatch):
    monkeypatch.setattr(input_limits, "MAX_COLUMNS", 8)
    quoted = tmp_path / "quoted.csv"
    quoted.write_text('api,"' + "," * 20 + '"\nx,y\n')
    assert "columns, over the limit" not in _only_issue(quoted)


def test_a_row_of_too_many_cells_is_refused(tmp_path, monkeypatch):
    header = REAL_CSV.read_text(encoding="utf-8").splitlines()[0]
    width = len(header.split(","))
    monkeypatch.setattr(input_limits, "MAX_COLUMNS", width + 10)
    wide_row = tmp_path / "wide_row.csv"
    text = REAL_CSV.read_text(encoding="utf-8")
    wide_row.write_text(text + "x" + ",x" * (width + 50) + "\n", encoding="utf-8")
    assert f"a row has {width + 51} cells, over the limit of {width + 10}" in _only_issue(wide_row)


def test_the_real_output_reads_within_the_limits():
    read = read_file(REAL_CSV)
    assert read.issues == () and len(read.file.frame) > 0


def test_line_limits_count_lines_across_chunks():
    limits = LineLimits(max_bytes=10_000, max_lines=100, max_line_bytes=1000)
    limits.check(b"a" * 600)
    limits.check(b"b" * 399 + b"\n")  # a line of 999 bytes over two chunks
    limits.check(b"c" * 600 + b"\r\n")
    with pytest.raises(InputLimitError, match="a line over the limit of 1,000 bytes"):
        limits.check(b"d" * 600 + b"\n" + b"e" * 1001)  # the new open line passes it
    inner = LineLimits(max_bytes=10_000, max_lines=100, max_line_bytes=10)
    with pytest.raises(InputLimitError, match="a line over the limit of 10 bytes"):
        inner.check(b"ab\n" + b"x" * 11 + b"\nyz\n")  # a line between two line ends
    old_mac = LineLimits(max_bytes=10_000, max_lines=5, max_line_bytes=1000)
    with pytest.raises(InputLimitError, match="over the limit of 5 lines"):
        old_mac.check(b"a\r" * 6)  # lines that a CR alone ends count too
    total = LineLimits(max_bytes=100, max_lines=100, max_line_bytes=1000)
    total.check(b"a\n" * 50)
    with pytest.raises(InputLimitError, match="over the limit of 100 bytes"):
        total.check(b"a")


# ---------------------------------------------------------------- samples


def _samples_line(index: int, count: int = 20) -> bytes:
    record = {
        "api": "BatchDecodeWithPagedKVCacheWrapper",
        "case": {"batch_size": str(index)},
        "impl": "flashinfer",
        "samples_ms": [0.125 + 0.001 * i for i in range(count)],
    }
    return (json.dumps(record) + "\n").encode()


def _gzip(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9) as stream:
        stream.write(data)
    return buffer.getvalue()


def test_a_gzip_bomb_is_refused_before_any_line_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr(input_limits, "MAX_SAMPLES_EXPANDED_BYTES", 1 << 20)
    lines = b"".join(_samples_line(index) for index in range(20_000))  # about 4 MB
    assert len(lines) > 3 << 20
    bomb = tmp_path / "bomb.samples.jsonl.gz"
    bomb.write_bytes(_gzip(lines))
    parsed = []
    monkeypatch.setattr(json, "loads", lambda text: parsed.append(text))
    with pytest.raises(SamplesError, match="decompressed file is over the limit of 1,048,576"):
        read_samples([bomb])
    assert parsed == []


def test_a_samples_file_of_several_members_is_counted_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(input_limits, "MAX_SAMPLES_EXPANDED_BYTES", 50_000)
    members = tmp_path / "members.samples.jsonl.gz"
    members.write_bytes(b"".join(_gzip(_samples_line(index)) for index in range(200)))
    with pytest.raises(SamplesError, match="over the limit of 50,000"):
        read_samples([members])
    monkeypatch.setattr(input_limits, "MAX_SAMPLES_EXPANDED_BYTES", 1 << 20)
    assert len(read_samples([members]).by_case) == 200


def test_a_samples_line_over_the_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(input_limits, "MAX_SAMPLES_LINE_BYTES", 1000)
    long_line = tmp_path / "long.samples.jsonl.gz"
    long_line.write_bytes(_gzip(_samples_line(1, count=500)))
    with pytest.raises(SamplesError, match="a line over the limit of 1,000 bytes"):
        read_samples([long_line])


def test_a_samples_file_over_the_size_limit_is_refused(tmp_path):
    sparse = tmp_path / "huge.samples.jsonl.gz"
    with open(sparse, "wb") as file:
        file.truncate(input_limits.MAX_SAMPLES_FILE_BYTES + 1)
    with pytest.raises(SamplesError, match="over the limit of 268,435,456"):
        read_samples([sparse])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_samples_fifo_is_refused(tmp_path):
    fifo = tmp_path / "a.samples.jsonl.gz"
    os.mkfifo(fifo)
    with pytest.raises(SamplesError, match="a FIFO, not a regular file"):
        read_samples([fifo])
