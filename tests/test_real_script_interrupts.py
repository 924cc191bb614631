"""Kill a real benchmark script (CPU reference backend) mid-sweep; nothing finished is lost.

The harness tests in test_bench_resume.py drive a tiny fake spec; these run the shipped
``bench_batch_decode.py`` itself, as a user would, and check the CSV it leaves behind.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bench_batch_decode
from fi_attn_bench.summarizer import command_line as summarize_results

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench_batch_decode.py"
CASES = bench_batch_decode.SPEC.presets["cpu"]
FIELDS = bench_batch_decode.SPEC.case_fields

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals")


def _start(csv_path: Path, *extra: str) -> subprocess.Popen:
    command = [
        sys.executable,
        str(SCRIPT),
        "--backend",
        "torch",
        "--device",
        "cpu",
        "--preset",
        "cpu",
        "--max-time-per-case",
        "1.0",
        *extra,
    ]
    if "--resume" not in extra:
        command += ["--output", str(csv_path)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _rows(csv_path: Path) -> list[dict[str, str]]:
    if not csv_path.exists():
        return []
    with csv_path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def _wait_for_rows(proc: subprocess.Popen, csv_path: Path, count: int, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(_rows(csv_path)) >= count:
            return
        if proc.poll() is not None:
            pytest.fail(f"script ended early ({proc.returncode}): {proc.stdout.read()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no {count} finished row(s) within {timeout} s")


def _case_keys(rows):
    return sorted(tuple(row[name] for name in FIELDS) for row in rows)


def _accepted_by_summarizer(csv_path: Path, tmp_path: Path) -> int:
    return summarize_results.main([str(csv_path), "--output", str(tmp_path / "summary.md")])


def test_sigkill_mid_sweep_leaves_every_finished_case_and_resume_completes(tmp_path):
    csv_path = tmp_path / "decode.csv"
    proc = _start(csv_path)
    _wait_for_rows(proc, csv_path, 1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    survivors = _rows(csv_path)
    assert 1 <= len(survivors) < len(CASES)
    assert all(row["status"] == "ok" for row in survivors)
    assert _accepted_by_summarizer(csv_path, tmp_path) == summarize_results.EXIT_OK

    resumed = _start(csv_path, "--resume", str(csv_path))
    output, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, output
    final = _rows(csv_path)
    expected = _case_keys({name: str(case[name]) for name in FIELDS} for case in CASES)
    assert _case_keys(final) == expected  # exactly one row per case
    by_key = {tuple(row[name] for name in FIELDS): row for row in final}
    for row in survivors:  # finished cases were kept, not measured again
        assert by_key[tuple(row[name] for name in FIELDS)]["time_ms"] == row["time_ms"]
    assert _accepted_by_summarizer(csv_path, tmp_path) == summarize_results.EXIT_OK


def test_ctrl_c_mid_sweep_exits_130_with_a_valid_csv(tmp_path):
    csv_path = tmp_path / "decode.csv"
    proc = _start(csv_path)
    _wait_for_rows(proc, csv_path, 1)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output

    rows = _rows(csv_path)
    assert 1 <= len(rows) < len(CASES)
    assert all(row["status"] == "ok" for row in rows)
    assert _accepted_by_summarizer(csv_path, tmp_path) == summarize_results.EXIT_OK
