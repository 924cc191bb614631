"""A resumed CSV is opened once per sweep: planning reads it (its recorded selection) and the
sweep's store takes the same rows, and the stored-rows read checks, parses and reads the file
through that one open.  Opens are counted by the interpreter's ``open`` audit event, which
``open``, ``io.open`` and ``os.open`` all raise."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from test_request_path import CPU_ARGV

import bench_batch_decode
from fi_attn_bench.results.reader import read_stored_rows

_OPENED: list[str] = []
_WATCHED: set[str] = set()


def _count_opens(event: str, args: tuple) -> None:
    if event == "open" and args and isinstance(args[0], (str, Path)) and str(args[0]) in _WATCHED:
        _OPENED.append(str(args[0]))


sys.addaudithook(_count_opens)  # a hook stays for the process; it counts watched paths only


def opens_of(path: Path, action) -> tuple[int, object]:
    """How many times ``action()`` opens ``path``, and what it returned."""
    _OPENED.clear()
    _WATCHED.add(str(path))
    try:
        result = action()
    finally:
        _WATCHED.discard(str(path))
    return len(_OPENED), result


def test_the_counter_sees_every_open_of_the_path(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("x\n")

    def three_opens():
        path.read_text()
        with open(path, "rb"):
            pass
        os.close(os.open(path, os.O_RDONLY))

    assert opens_of(path, three_opens)[0] == 3
    assert opens_of(tmp_path / "b.csv", three_opens)[0] == 0


def test_a_stored_rows_read_opens_its_file_once(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("a,b\n1,2\n3,4\n")
    opens, stored = opens_of(path, lambda: read_stored_rows(str(path)))
    assert opens == 1
    assert stored.header == ("a", "b")
    assert stored.rows == ({"a": "1", "b": "2"}, {"a": "3", "b": "4"})


def test_a_resumed_sweep_opens_its_csv_once(tmp_path):
    output = tmp_path / "decode.csv"
    assert bench_batch_decode.main([*CPU_ARGV, "--output", str(output)]) == 0
    lines = output.read_text().splitlines(keepends=True)
    assert len(lines) == 3  # the header and two cases
    output.write_text("".join(lines[:-1]))  # the second case was not measured
    resume = ["--resume", str(output), "--device", "cpu", "--max-time-per-case", "0.05"]
    opens, code = opens_of(output, lambda: bench_batch_decode.main(resume))
    assert code == 0
    assert opens == 1
    stored = read_stored_rows(str(output))
    assert [row["status"] for row in stored.rows] == ["ok", "ok"]  # the resume ran the missing one
    assert stored.rows[0] == read_stored_rows_of(lines[:-1], tmp_path).rows[0]  # kept as it was


def read_stored_rows_of(lines: list[str], folder: Path):
    path = folder / "before.csv"
    path.write_text("".join(lines))
    return read_stored_rows(str(path))
