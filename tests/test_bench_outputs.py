"""Where a sweep writes: unwritable places and existing files are refused before any measuring,
and finished rows are never destroyed."""

from __future__ import annotations

import csv
import io
import os

import fake_bench_script
import pytest
from test_bench_all import run as run_all

from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.results.schema import IMPL_COLUMN, csv_fieldnames
from fi_attn_bench.sweep import outputs

FAST = ["--max-time-per-case", "0.05", "--min-samples", "3", "--preset", "smoke"]


def bench(argv, monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_SLEEP", "0")
    return fake_bench_script.main([*argv, *FAST])


def refused(capsys) -> str:
    """The one stderr line of an exit-2 refusal; asserts no case was measured."""
    captured = capsys.readouterr()
    assert "[1/" not in captured.out, "a case was measured before the refusal"
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize(
    "flag,where",
    [
        ("--output", "/proc/fi-attn-bench-x.csv"),
        ("--output-dir", "/proc/fi-attn-bench-x"),
        ("--output-dir", "AN_EXISTING_FILE"),
        ("--output", "AN_EXISTING_FILE/x.csv"),
        ("--output", "A_DIRECTORY"),
        ("--output", "/dev/null"),
    ],
)
def test_unwritable_output_exits_2_in_one_line_before_measuring(
    flag, where, tmp_path, monkeypatch, capsys
):
    existing = tmp_path / "file.txt"
    existing.write_text("keep me\n")
    where = where.replace("AN_EXISTING_FILE", str(existing)).replace("A_DIRECTORY", str(tmp_path))
    assert bench([flag, where], monkeypatch) == 2
    assert "error:" in refused(capsys)
    assert existing.read_text() == "keep me\n"


def test_bench_all_unwritable_output_dir_exits_2_before_any_work(capsys):
    made = []
    assert run_all(["--output-dir", "/proc/fi-attn-bench-x", *FAST], made=made) == 2
    assert made == []
    assert refused(capsys).startswith("bench_all.py: error: --output-dir /proc/fi-attn-bench-x")


def test_a_file_that_is_not_our_output_is_never_overwritten(tmp_path, monkeypatch, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert bench(["--output", str(notes)], monkeypatch) == 2
    line = refused(capsys)
    assert "refusing to overwrite" in line and "--force" in line
    assert notes.read_text() == "my notes\n"


def test_a_second_run_never_destroys_finished_rows(tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.csv"
    assert bench(["--output", str(path)], monkeypatch) == 0
    first = path.read_bytes()
    capsys.readouterr()
    assert bench(["--output", str(path)], monkeypatch) == 2
    line = refused(capsys)
    assert f"--resume {path}" in line and "--force" in line
    assert path.read_bytes() == first


def test_force_moves_the_old_file_aside(tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.csv"
    path.write_text("not a csv of ours\n")
    assert bench(["--output", str(path), "--force"], monkeypatch) == 0
    backups = list(tmp_path.glob("r.csv.bak-*"))
    assert len(backups) == 1 and backups[0].read_text() == "not a csv of ours\n"
    assert len(read_stored_rows(path).rows) == 2
    assert f"aside to {backups[0]}" in capsys.readouterr().out


def test_default_names_never_collide(tmp_path):
    first = outputs.default_csv_path("Api", str(tmp_path))
    open(first, "w").close()
    second = outputs.default_csv_path("Api", str(tmp_path))
    assert second != first and not os.path.exists(second)
    assert outputs.default_csv_path("Api", str(tmp_path), "_shard1of2").endswith("_shard1of2.csv")


def test_results_of_another_script_are_not_ours(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("schema_version,api,batch_size,seq_len,status\n1,OtherApi,1,8,ok\n")
    assert not outputs.holds_results_of(str(path), fake_bench_script.SPEC)
    path.write_text("schema_version,api,batch_size,seq_len,status\n1,FakeAttentionWrapper,1,8,ok\n")
    assert outputs.holds_results_of(str(path), fake_bench_script.SPEC)


def test_bad_input_creates_no_output_directory(tmp_path, monkeypatch):
    target = tmp_path / "new"
    argv = ["--output-dir", str(target), "--filter", "batch_size=99"]
    assert bench(argv, monkeypatch) == 2
    assert not target.exists()


def test_a_link_is_never_moved_or_replaced_even_with_force(tmp_path, monkeypatch, capsys):
    target = tmp_path / "target.csv"
    target.write_text("keep\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)  # like /dev/stdout -> /proc/self/fd/1
    assert bench(["--output", str(link), "--force"], monkeypatch) == 2
    assert "not a regular file" in refused(capsys)
    assert bench(["--resume", str(link)], monkeypatch) == 2
    assert "not a regular file" in refused(capsys)
    assert link.is_symlink() and target.read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "target.csv"]


def test_output_dash_writes_the_csv_to_stdout_and_the_rest_to_stderr(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert bench(["--output", "-"], monkeypatch) == 0
    captured = capsys.readouterr()
    header, *rows = list(csv.reader(io.StringIO(captured.out)))
    fields = fake_bench_script.SPEC.case_fields
    assert header == csv_fieldnames((*fields, IMPL_COLUMN))
    assert [(row[header.index("batch_size")], row[header.index("status")]) for row in rows] == [
        ("1", "ok"),
        ("2", "ok"),
    ]
    assert "FakeAttentionWrapper: 2 cases" in captured.err and "[2/2]" in captured.err
    assert "Results written to stdout" in captured.err
    assert list(tmp_path.iterdir()) == []  # no file named "-"


def test_output_dash_with_samples_dir_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["--output", "-", "--samples-dir", str(tmp_path)]
    assert bench(argv, monkeypatch) == 2
    assert refused(capsys).endswith(
        "error: --samples-dir names its file after the CSV: give --output FILE, not -"
    )


def test_output_dash_of_a_shard_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert bench(["--output", "-", "--shard", "0/2"], monkeypatch) == 2
    assert refused(capsys).endswith(
        "error: --output - writes one CSV to stdout; a shard writes its own file"
    )


def test_output_dash_into_a_closed_pipe_stops_with_one_line(tmp_path):
    """`--output - | head -1`: the reader leaves; one line and exit 2, never a traceback."""
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "..", "bench_batch_decode.py")
    command = [sys.executable, script, "--output", "-", "--filter", "batch_size=1"]
    with subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        process.stdout.close()
        err = process.stderr.read().decode()
        process.wait(timeout=300)
    assert process.returncode == 2, err
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith(
            "error: --output -: the reader of stdout closed it; the sweep stopped (rows not delivered)"
        )
    )
    assert list(tmp_path.iterdir()) == []
