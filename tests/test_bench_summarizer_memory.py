"""benchmarks/bench_summarizer.py counts the memory of a summarizer's whole process tree."""

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
