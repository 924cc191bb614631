"""Run metadata in every row (host, git commit/dirty, UTC timestamp) and raw samples in
``--samples-dir``."""

from __future__ import annotations

import datetime
import gzip
import json
import os
import socket
import statistics
import subprocess

import fake_bench_script
import pytest
from test_bench_resume import FAST, ROOT, rows_of, run_in_process

import bench_batch_decode
from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.sweep import environment
from fi_attn_bench.sweep.sample_writer import append_samples, read_samples, samples_line


def _git_head() -> str:
    done = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def test_every_row_records_host_code_version_and_when(tmp_path, monkeypatch):
    path = tmp_path / "r.csv"
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    argv = ["--output", str(path), "--preset", "smoke", *FAST]
    assert run_in_process(argv, monkeypatch, oom="2") == 1
    after = datetime.datetime.now(datetime.timezone.utc)
    rows = rows_of(path)
    assert {r["host"] for r in rows} == {socket.gethostname()}
    assert {r["git_commit"] for r in rows} == {_git_head()} != {""}
    assert {r["git_dirty"] for r in rows} <= {"yes", "no"}
    for row in rows:  # failed rows too
        when = datetime.datetime.strptime(row["timestamp_utc"], "%Y-%m-%dT%H:%M:%SZ")
        assert before <= when.replace(tzinfo=datetime.timezone.utc) <= after


def test_code_version_is_empty_outside_git_or_without_git(tmp_path, monkeypatch):
    assert environment.code_version(str(tmp_path)) == environment.CodeVersion()
    assert environment.code_version(ROOT).commit == _git_head()
    monkeypatch.setenv("PATH", str(tmp_path))  # no git to run
    assert environment.code_version(ROOT) == environment.CodeVersion()


def test_dirty_means_a_changed_tracked_file(tmp_path):
    def git(*words):
        subprocess.run(["git", "-C", str(tmp_path), *words], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    (tmp_path / "results.csv").write_text("untracked output\n")
    assert environment.code_version(str(tmp_path)).dirty == "no"
    (tmp_path / "a.py").write_text("x = 2\n")
    assert environment.code_version(str(tmp_path)).dirty == "yes"


def test_samples_dir_holds_each_ok_cases_samples(tmp_path, monkeypatch):
    path, samples_dir = tmp_path / "r.csv", tmp_path / "samples"
    argv = ["--output", str(path), "--preset", "smoke", "--samples-dir", str(samples_dir), *FAST]
    assert run_in_process(argv, monkeypatch, oom="2") == 1
    (file,) = samples_dir.iterdir()
    assert file.name == "r.samples.jsonl.gz"
    with gzip.open(file, "rt", encoding="utf-8") as handle:  # a standard reader reads it
        objects = [json.loads(line) for line in handle]
    assert objects == read_samples(str(file))
    ok = [row for row in rows_of(path) if row["status"] == "ok"]
    assert len(objects) == len(ok) == 1
    (entry,), (row,) = objects, ok
    assert set(entry) == {"api", "case", "impl", "samples_ms"}
    # the CPU fallback measures the torch reference: the row and its samples say impl torch
    assert entry["api"] == "FakeAttentionWrapper" and entry["impl"] == row["impl"] == "torch"
    assert entry["case"] == {name: row[name] for name in fake_bench_script.FIELDS}
    assert len(entry["samples_ms"]) == int(row["samples"])
    assert statistics.median(entry["samples_ms"]) == pytest.approx(float(row["time_ms"]))

    # a resumed sweep appends the case it finishes
    assert (
        run_in_process(
            ["--resume", str(path), "--samples-dir", str(samples_dir), *FAST], monkeypatch
        )
        == 0
    )
    assert sorted(e["case"]["batch_size"] for e in read_samples(str(file))) == ["1", "2"]


def test_a_cut_off_last_case_loses_only_itself(tmp_path):
    path = str(tmp_path / "s.samples.jsonl.gz")
    record = {"api": "A", "batch_size": 1, "seq_len": 8}
    append_samples(path, samples_line(record, ("batch_size", "seq_len"), [1.0, 2.0]))
    append_samples(
        path, samples_line({**record, "batch_size": 2}, ("batch_size", "seq_len"), [3.0])
    )
    whole = open(path, "rb").read()
    with open(path, "wb") as handle:
        handle.write(whole[:-5])  # the second member lost its end
    assert read_samples(path) == [
        {
            "api": "A",
            "case": {"batch_size": "1", "seq_len": "8"},
            "impl": "flashinfer",
            "samples_ms": [1.0, 2.0],
        }
    ]


def test_an_existing_samples_file_is_not_overwritten(tmp_path, monkeypatch, capsys):
    samples_dir = tmp_path / "samples"
    samples_dir.mkdir()
    (samples_dir / "r.samples.jsonl.gz").write_bytes(b"keep")
    argv = [
        "--output",
        str(tmp_path / "r.csv"),
        "--preset",
        "smoke",
        "--samples-dir",
        str(samples_dir),
        *FAST,
    ]
    assert run_in_process(argv, monkeypatch) == 2
    assert "--force" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "r.csv")
    assert run_in_process([*argv, "--force"], monkeypatch) == 0
    assert len(read_samples(str(samples_dir / "r.samples.jsonl.gz"))) == 2


def test_a_head_to_head_case_writes_each_impls_round_medians_behind_its_paired_ratio(tmp_path):
    path, samples_dir = tmp_path / "h.csv", tmp_path / "samples"
    argv = ["--device", "cpu", "--filter", "batch_size=2", "--max-time-per-case", "0.3"]
    argv += ["--impl", "a=torch", "--impl", "b=torch", "--samples-dir", str(samples_dir)]
    assert bench_batch_decode.main([*argv, "--output", str(path)]) == 0
    rows = {row["impl"]: row for row in read_stored_rows(path).rows}
    entries = {e["impl"]: e for e in read_samples(str(samples_dir / "h.samples.jsonl.gz"))}
    a, b = entries["a"]["round_medians_ms"], entries["b"]["round_medians_ms"]
    assert len(a) == len(b) and int(rows["b"]["paired_rounds"]) == 2 * (len(a) // 2) >= 2
    per_round = [mine / base for mine, base in zip(b, a, strict=True)]
    per_pair = [(per_round[i] * per_round[i + 1]) ** 0.5 for i in range(0, len(a) - 1, 2)]
    assert statistics.median(per_pair) == pytest.approx(float(rows["b"]["paired_ratio"]))


def test_a_single_impl_case_has_no_round_medians():
    line = samples_line({"api": "A", "batch_size": 1}, ("batch_size",), [1.0, 2.0])
    assert "round_medians_ms" not in json.loads(line)
    line = samples_line({"api": "A", "batch_size": 1}, ("batch_size",), [1.0], [1.0, 1.1])
    assert json.loads(line)["round_medians_ms"] == [1.0, 1.1]
