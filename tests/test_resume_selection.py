"""--resume CSV reruns the interrupted sweep's own cases: the CSV records its preset and filter,
and the hint printed after Ctrl-C is a command that works as printed."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys

import pytest
from test_bench_resume import FAST, ROOT, keys, rows_of, run_in_process, wait_for_rows

SMOKE = [("1", "8"), ("2", "8")]


def test_resume_without_preset_finishes_the_interrupted_preset(tmp_path, monkeypatch):
    path = tmp_path / "r.csv"
    argv = ["--output", str(path), "--preset", "smoke", *FAST]
    assert run_in_process(argv, monkeypatch, oom="2") == 1
    assert {(r["preset"], r["filter"]) for r in rows_of(path)} == {("smoke", "")}
    # on the CPU the default preset is 'cpu' (4 cases): the file's own 'smoke' must win
    assert run_in_process(["--resume", str(path), *FAST], monkeypatch) == 0
    rows = rows_of(path)
    assert sorted(keys(rows)) == SMOKE and {r["status"] for r in rows} == {"ok"}


def test_resume_keeps_the_recorded_filter(tmp_path, monkeypatch):
    path = tmp_path / "r.csv"
    argv = ["--output", str(path), "--preset", "default", "--filter", "batch_size<=3", *FAST]
    assert run_in_process(argv, monkeypatch, oom="3") == 1
    assert {r["filter"] for r in rows_of(path)} == {"batch_size<=3"}
    assert run_in_process(["--resume", str(path), *FAST], monkeypatch) == 0
    assert sorted(keys(rows_of(path))) == [("1", "8"), ("2", "8"), ("3", "8")]
    # the same selection spelled differently is the same selection
    again = ["--resume", str(path), "--filter", "batch_size <= 3", "--preset", "default", *FAST]
    assert run_in_process(again, monkeypatch) == 0


@pytest.mark.parametrize(
    "extra", [["--preset", "default"], ["--filter", "batch_size=1"]], ids=["preset", "filter"]
)
def test_resume_with_another_selection_exits_2_naming_the_recorded_one(
    extra, tmp_path, monkeypatch, capsys
):
    path = tmp_path / "r.csv"
    assert run_in_process(["--output", str(path), "--preset", "smoke", *FAST], monkeypatch) == 0
    before = path.read_bytes()
    capsys.readouterr()
    assert run_in_process(["--resume", str(path), *extra, *FAST], monkeypatch) == 2
    err = capsys.readouterr().err
    assert "the interrupted sweep selected --preset smoke" in err and len(err.splitlines()) == 1
    assert path.read_bytes() == before


def test_a_csv_recording_no_selection_must_be_resumed_with_one_holding_its_cases(
    tmp_path, monkeypatch, capsys
):
    path = tmp_path / "old.csv"
    path.write_text(
        "schema_version,api,batch_size,seq_len,status,time_ms,bandwidth_GB_s,tflops,error_type,error\n"
        "1,FakeAttentionWrapper,1,16,failed,,,,OutOfMemoryError,x\n"
    )
    assert run_in_process(["--resume", str(path), *FAST], monkeypatch) == 2  # cpu preset lacks it
    assert "give the interrupted sweep's --preset and --filter" in capsys.readouterr().err
    assert run_in_process(["--resume", str(path), "--preset", "full", *FAST], monkeypatch) == 0


def test_the_hint_printed_after_ctrl_c_works_as_printed(tmp_path):
    path = tmp_path / "sweep.csv"
    argv = [sys.executable, "tests/fake_bench_script.py", "--preset", "default"]
    argv += ["--filter", "batch_size<=6", "--output", str(path), *FAST]
    env = {"FAKE_BENCH_SLEEP": "0.02", "PYTHONUNBUFFERED": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    wait_for_rows(path, 1, proc)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, output
    lines = output.splitlines()
    hint = lines[lines.index(f"Results saved to {path}; continue with:") + 1].strip()
    words = shlex.split(hint)
    assert words[:4] == ["python", "tests/fake_bench_script.py", "--resume", str(path)]
    resumed = subprocess.run(
        [sys.executable, *words[1:]], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    rows = rows_of(path)
    assert sorted(keys(rows)) == [(str(b), "8") for b in range(1, 7)]
    assert {r["status"] for r in rows} == {"ok"}


def test_list_with_resume_lists_the_recorded_selection(tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.csv"
    assert run_in_process(["--output", str(path), "--preset", "smoke", *FAST], monkeypatch) == 0
    capsys.readouterr()
    assert run_in_process(["--resume", str(path), "--list"], monkeypatch) == 0
    assert capsys.readouterr().out.startswith("FakeAttentionWrapper: preset smoke, 2 cases")
