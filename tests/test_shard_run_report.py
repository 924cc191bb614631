"""validation.shard_report: shard table, case-set check, per-shard wall times."""

from __future__ import annotations

import csv
import os

from validation import shard_report as shard_run_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HEADER = ["api", "batch_size", "status", "time_ms", "device", "repro", "shard", "num_shards"]


def write(path, batch_sizes, shard=None, cuda="cuda:0"):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(HEADER)
        for b in batch_sizes:
            cells = ["ok", 1.0, "NVIDIA H200", f"python x.py --device {cuda}"]
            writer.writerow(["W", b, *cells, *(shard or ("", ""))])


def test_clean_split_reports_devices_and_wall_times(tmp_path, capsys):
    write(tmp_path / "B" / "W_1.csv", [1, 2, 3])
    write(tmp_path / "A" / "W_t.shard0of2.csv", [1, 3], (0, 2))
    write(tmp_path / "A" / "W_t.shard1of2.csv", [2], (1, 2), cuda="cuda:1")
    (tmp_path / "A" / "W_t.shard1of2.csv.log").write_text("Sweep wall time 4.0 s; ...\n")
    (tmp_path / "A.out").write_text("Sweep wall time 5.0 s; x\nSweep wall time 1.0 s; y\n")
    argv = ["--sharded", str(tmp_path / "A"), "--single", str(tmp_path / "B")]
    argv += [
        "--rank0-log",
        str(tmp_path / "A.out"),
        "--sharded-wall-s",
        "10",
        "--single-wall-s",
        "18",
    ]
    assert shard_run_report.main(argv) == 0
    out = capsys.readouterr().out
    assert "| 1/2 | W_t.shard1of2.csv | 1 | NVIDIA H200 | cuda:1 | 4.0 |" in out
    assert "same cases" in out and "0/2 6.0 s, 1/2 4.0 s; largest / mean 1.200" in out
    assert "one process / sharded 1.80x" in out


def test_a_case_in_two_shards_or_lost_fails(tmp_path, capsys):
    write(tmp_path / "B" / "W_1.csv", [1, 2, 3])
    write(tmp_path / "A" / "W_t.shard0of2.csv", [1, 2], (0, 2))
    write(tmp_path / "A" / "W_t.shard1of2.csv", [2], (1, 2))
    argv = ["--sharded", str(tmp_path / "A"), "--single", str(tmp_path / "B")]
    assert shard_run_report.main(argv) == 1
    out = capsys.readouterr().out
    assert "1 in two shards" in out and "missing from the shards 1" in out
    assert "CASE SETS DIFFER" in out
