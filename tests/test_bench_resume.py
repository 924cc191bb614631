"""Nothing lost: kill -9 / Ctrl-C of a real sweep subprocess, and --resume (CPU only)."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time

import fake_bench_script
import pytest

from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.results.schema import HARNESS_VERSION, csv_fieldnames

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "fake_bench_script.py")
FAST = ["--max-time-per-case", "0.05", "--min-samples", "3"]
FIELDS = fake_bench_script.FIELDS
N_DEFAULT = len(fake_bench_script.SPEC.presets["default"])


def keys(rows):
    return [(r["batch_size"], r["seq_len"]) for r in rows]


def rows_of(path):
    stored = read_stored_rows(path)
    header, rows = list(stored.header), list(stored.rows)
    assert header == csv_fieldnames((*FIELDS, "impl"))
    return rows


def assert_valid_csv(path):
    """Every line is complete (ends with a newline) and has the header's cell count."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    assert text.endswith("\n"), "a row was cut off"
    rows = list(read_stored_rows(path).rows)
    assert len(rows) == text.count("\n") - 1  # no row dropped as malformed
    assert len(set(keys(rows))) == len(rows), "duplicate case rows"
    return rows


def start_sweep(path, *extra, sleep="0.02", env_extra=None):
    env = {k: v for k, v in os.environ.items() if k != "FAKE_BENCH_OOM"}
    env.update({"FAKE_BENCH_SLEEP": sleep, "PYTHONUNBUFFERED": "1", **(env_extra or {})})
    argv = [sys.executable, SCRIPT, "--preset", "default", *FAST, *extra]
    if "--resume" not in extra:
        argv += ["--output", str(path)]
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for_rows(path, at_least, proc, status="ok", timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            rows = list(read_stored_rows(path).rows)
            if sum(r["status"] == status for r in rows) >= at_least:
                return
        if proc.poll() is not None:
            pytest.fail(f"sweep ended early ({proc.returncode}): {proc.stdout.read()}")
        time.sleep(0.01)
    proc.kill()
    pytest.fail("sweep produced no rows in time")


def run_in_process(argv, monkeypatch, sleep="0", oom=None):
    monkeypatch.setenv("FAKE_BENCH_SLEEP", sleep)
    if oom is None:
        monkeypatch.delenv("FAKE_BENCH_OOM", raising=False)
    else:
        monkeypatch.setenv("FAKE_BENCH_OOM", oom)
    return fake_bench_script.main(argv)


def test_sigkill_leaves_valid_csv_and_resume_completes_it(tmp_path, monkeypatch):
    path = tmp_path / "sweep.csv"
    proc = start_sweep(path)
    wait_for_rows(path, 2, proc)
    proc.kill()
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    finished = assert_valid_csv(path)
    assert 2 <= len(finished) < N_DEFAULT
    assert all(r["status"] == "ok" for r in finished)

    assert run_in_process(["--preset", "default", "--resume", str(path), *FAST], monkeypatch) == 0
    after = assert_valid_csv(path)
    assert sorted(keys(after)) == sorted(
        (str(c["batch_size"]), "8") for c in fake_bench_script.SPEC.presets["default"]
    )
    assert after[: len(finished)] == finished  # finished rows kept untouched, not rerun


def test_sigint_exits_130_with_valid_csv(tmp_path):
    path = tmp_path / "sweep.csv"
    proc = start_sweep(path)
    wait_for_rows(path, 1, proc)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, output
    assert "Interrupted" in output and f"--resume {path}" in output
    assert "Traceback" not in output
    rows = assert_valid_csv(path)
    assert 1 <= len(rows) < N_DEFAULT


def test_resume_reruns_failed_cases_and_keeps_one_row_each(tmp_path, monkeypatch):
    path = tmp_path / "r.csv"
    assert run_in_process(["--output", str(path), *FAST], monkeypatch, oom="2") == 1
    before = {k: r for k, r in zip(keys(rows_of(path)), rows_of(path), strict=True)}
    assert before[("2", "8")]["status"] == "failed"

    # still failing: the new failed row replaces the old one
    assert run_in_process(["--resume", str(path), *FAST], monkeypatch, oom="2") == 1
    rows = assert_valid_csv(path)
    assert len(rows) == 4 and [r["status"] for r in rows].count("failed") == 1

    # fixed: the case is rerun, every other row stays as it was
    assert run_in_process(["--resume", str(path), *FAST], monkeypatch) == 0
    after = {k: r for k, r in zip(keys(rows_of(path)), rows_of(path), strict=True)}
    assert len(after) == 4 and after[("2", "8")]["status"] == "ok"
    for key in (("1", "8"), ("3", "8"), ("4", "8")):
        assert after[key] == before[key]


def test_resume_with_everything_ok_runs_nothing(tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.csv"
    assert run_in_process(["--output", str(path), *FAST], monkeypatch) == 0
    stamp = os.stat(path).st_mtime_ns
    assert run_in_process(["--resume", str(path), *FAST], monkeypatch) == 0
    assert os.stat(path).st_mtime_ns == stamp
    assert "4 of 4 cases already ok" in capsys.readouterr().out


def test_resume_remeasures_ok_rows_of_another_harness_version(tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.csv"
    assert run_in_process(["--output", str(path), *FAST], monkeypatch) == 0
    stored = read_stored_rows(path)
    header, rows = list(stored.header), list(stored.rows)
    old = [name for name in header if name != "harness_version"]  # as 0.1.x wrote it
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, old, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    capsys.readouterr()
    before = path.read_bytes()
    assert run_in_process(["--resume", str(path), *FAST], monkeypatch) == 0
    out = capsys.readouterr().out
    assert "4 ok cases measured by another harness version are measured again" in out
    rows = assert_valid_csv(path)
    assert len(rows) == 4 and {r["harness_version"] for r in rows} == {HARNESS_VERSION}
    (backup,) = tmp_path.glob("r.csv.bak-*")  # the old measurements are not lost
    assert backup.read_bytes() == before
    assert f"Kept the file as it was in {backup}" in out


def test_resume_of_this_versions_rows_makes_no_backup(tmp_path, monkeypatch):
    path = tmp_path / "r.csv"
    assert (
        run_in_process(["--output", str(path), *FAST, "--filter", "batch_size<=2"], monkeypatch)
        == 0
    )
    assert run_in_process(["--resume", str(path), *FAST], monkeypatch) == 0
    assert list(tmp_path.glob("r.csv.bak-*")) == []


def test_resume_drops_a_cut_off_row_and_reruns_it(tmp_path, monkeypatch):
    path = tmp_path / "r.csv"
    assert run_in_process(["--output", str(path), *FAST], monkeypatch) == 0
    with open(path, "rb+") as handle:
        handle.truncate(os.path.getsize(path) - 20)  # the last row was cut off mid-write
    assert len(rows_of(path)) == 3
    assert run_in_process(["--resume", str(path), *FAST], monkeypatch) == 0
    rows = assert_valid_csv(path)
    assert sorted(keys(rows)) == [("1", "8"), ("2", "8"), ("3", "8"), ("4", "8")]


def test_resume_refuses_other_settings_and_missing_file(tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.csv"
    assert run_in_process(["--output", str(path), "--preset", "smoke", *FAST], monkeypatch) == 0
    assert run_in_process(["--resume", str(path), "--dtype", "bf16", *FAST], monkeypatch) == 2
    assert "dtype=float16 (now bfloat16)" in capsys.readouterr().err
    assert run_in_process(["--resume", str(tmp_path / "missing.csv")], monkeypatch) == 2
    assert (
        run_in_process(
            ["--resume", str(path), "--output", str(tmp_path / "other.csv")], monkeypatch
        )
        == 2
    )


def test_resume_refuses_another_scripts_csv(tmp_path, monkeypatch, capsys):
    path = tmp_path / "other.csv"
    path.write_text(
        "schema_version,api,head_dim,status,time_ms,bandwidth_GB_s,tflops,error_type,error\n"
    )
    assert run_in_process(["--resume", str(path)], monkeypatch) == 2
    assert "missing columns: batch_size, seq_len" in capsys.readouterr().err


def test_kill_during_resume_never_leaves_duplicates(tmp_path, monkeypatch):
    path = tmp_path / "r.csv"
    assert (
        run_in_process(
            ["--output", str(path), "--preset", "default", *FAST], monkeypatch, oom="all"
        )
        == 1
    )
    assert len(rows_of(path)) == N_DEFAULT
    proc = start_sweep(path, "--resume", str(path))
    wait_for_rows(path, 2, proc)
    proc.kill()
    proc.wait(timeout=30)
    rows = assert_valid_csv(path)
    assert len(rows) == N_DEFAULT  # each case exactly once: ok where rerun, failed otherwise
    assert 2 <= sum(r["status"] == "ok" for r in rows) < N_DEFAULT

    (tmp_path / "r.csv.tmp99999").write_text("half a rewrite")  # as if killed before the rename
    assert run_in_process(["--preset", "default", "--resume", str(path), *FAST], monkeypatch) == 0
    assert len(assert_valid_csv(path)) == N_DEFAULT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]


def test_resume_of_an_unreadable_file_is_a_usage_error(tmp_path, monkeypatch, capsys):
    path = tmp_path / "bad.csv"
    path.write_bytes(b"\xff\xfe\x00garbage\n")
    assert run_in_process(["--resume", str(path)], monkeypatch) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_resume_of_a_csv_from_before_impl_keeps_one_row_per_case(tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.csv"
    assert run_in_process(["--output", str(path), *FAST], monkeypatch, oom="2") == 1
    stored = read_stored_rows(path)
    header, rows = list(stored.header), list(stored.rows)
    old = [name for name in header if name != "impl"]  # as harness 0.6.0 wrote it
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, old, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    capsys.readouterr()
    assert run_in_process(["--resume", str(path), *FAST], monkeypatch) == 0
    assert "3 of 4 cases already ok" in capsys.readouterr().out  # the torch rows are torch's
    rows = assert_valid_csv(path)
    assert len(rows) == 4 and {row["status"] for row in rows} == {"ok"}
