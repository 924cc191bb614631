"""benchmarks/bench_summarizer.py counts the memory of a summarizer's whole process tree and
times it with its bytecode compiled."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks.bench_summarizer import tree_peak_rss_mb

HOLD_TWICE = (
    "import subprocess, sys, time\n"
    "held = bytearray(150 * 2**20)\n"
    "child = subprocess.Popen([sys.executable, '-c', "
    "'import time; held = bytearray(150 * 2**20); time.sleep(0.6)'])\n"
    "time.sleep(0.6)\n"
    "child.wait()\n"
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_the_tree_peak_sums_a_parent_and_its_child():
    assert tree_peak_rss_mb([sys.executable, "-c", HOLD_TWICE]) >= 300  # one alone holds ~160


def test_both_summarizers_are_compiled_to_bytecode_before_timing(monkeypatch):
    """Under PYTHONDONTWRITEBYTECODE a timed run would compile every module from source."""
    import importlib.util

    from benchmarks import bench_summarizer

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    sources = [
        bench_summarizer.ROOT / "fi_attn_bench" / "summarizer" / "model.py",
        bench_summarizer.SEED.parent / "benchmark_result.py",
    ]
    for source in sources:
        Path(importlib.util.cache_from_source(str(source))).unlink(missing_ok=True)
    said = bench_summarizer.compile_bytecode()
    assert all(Path(importlib.util.cache_from_source(str(source))).is_file() for source in sources)
    assert said.endswith("PYTHONDONTWRITEBYTECODE=1")
