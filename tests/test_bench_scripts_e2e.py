"""The four real scripts end to end on the CPU torch backend; the summarizer accepts their CSVs."""

from __future__ import annotations

import importlib

import pytest

from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.summarizer import command_line as summarize_results

SCRIPTS = (
    "bench_batch_decode",
    "bench_batch_prefill_paged",
    "bench_batch_prefill_ragged",
    "bench_batch_mla",
)
FAST = ["--max-time-per-case", "0.05", "--min-samples", "3"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_runs_on_cpu_and_summarizer_accepts_csv(name, tmp_path):
    script = importlib.import_module(name)
    csv_path = tmp_path / f"{name}.csv"
    argv = [
        "--backend",
        "torch",
        "--device",
        "cpu",
        "--preset",
        "cpu",
        "--output",
        str(csv_path),
        *FAST,
    ]
    assert script.main(argv) == 0
    rows = list(read_stored_rows(csv_path).rows)
    assert len(rows) == len(script.SPEC.presets["cpu"]) > 0
    assert {r["status"] for r in rows} == {"ok"}
    assert {(r["backend"], r["timer"], r["check"]) for r in rows} == {("torch", "wall", "skipped")}
    assert all(float(r["io_bytes"]) > 0 and float(r["flops"]) > 0 for r in rows)
    report = tmp_path / f"{name}.md"
    assert summarize_results.main([str(csv_path), "--output", str(report)]) == 0
    assert report.read_text(encoding="utf-8").strip()
