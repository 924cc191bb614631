"""The exploits that need a GPU (another stream, a CUDA graph, the profiler) and the honest
SDPA plugin under every GPU timer; skipped without CUDA.  Run on a GPU with

    python -m pytest -q tests/test_integrity_gpu.py
"""

from __future__ import annotations

from pathlib import Path

import exploits
import pytest
import torch
from test_bench_common import read_rows

import bench_batch_decode
from fi_attn_bench import command_line
from fi_attn_bench.results.schema import INTEGRITY_PASS, INTEGRITY_PASS_WEAK, SOURCE_SCREEN

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

EXPLOITS = Path(__file__).resolve().parent / "exploits.py"
HONEST = Path(__file__).resolve().parent.parent / "examples" / "sdpa_decode_plugin.py"
CASE = (
    "batch_size=16,seq_len_kv=4096"  # the smoke preset's: 2 ms of SDPA work, ~0.1 of FlashInfer's
)


def _sweep(tmp_path, impl: str, timer: str, extra=()) -> list[dict]:
    out = tmp_path / "r.csv"
    argv = ["--preset", "smoke", "--filter", CASE, "--timer", timer, "--impl", impl, *extra]
    if timer == "cuda_graph":
        argv += ["--l2", "warm"]
    command_line.main_for(bench_batch_decode.SPEC, [*argv, "--output", str(out)])
    return read_rows(out)


@pytest.mark.parametrize(("name", "timer"), sorted(exploits.GPU_CAUGHT_BY))
def test_every_gpu_exploit_fails_its_rows_and_names_the_check(tmp_path, name, timer):
    rows = _sweep(tmp_path, f"{EXPLOITS}:{name}", timer)
    assert rows
    refusal = exploits.GPU_REFUSED_BY_TIMER.get((name, timer))
    for row in rows:
        assert row["status"] == "failed", row
        refused = refusal is not None and row["integrity"] == "" and refusal in row["error"]
        assert refused or row["integrity"] in exploits.GPU_CAUGHT_BY[name, timer], row


@pytest.mark.parametrize(
    ("timer", "passed"),
    [
        ("profiler", INTEGRITY_PASS),
        ("events", INTEGRITY_PASS_WEAK),
        ("cuda_graph", INTEGRITY_PASS_WEAK),
    ],
)
def test_the_honest_plugin_passes_under_every_gpu_timer(tmp_path, timer, passed):
    rows = _sweep(tmp_path, f"{HONEST}:make", timer)
    assert rows and {(row["status"], row["integrity"]) for row in rows} == {("ok", passed)}


@pytest.mark.parametrize(("name", "timer"), exploits.GPU_TIMED_HONESTLY)
def test_the_caches_fresh_values_defeat_pass_under_the_profiler(tmp_path, name, timer):
    """Each timed call sees new values, so the cache never answers one (the CPU tests count
    the calls it answers: none); its rows pass at the kernel's own time."""
    rows = _sweep(tmp_path, f"{EXPLOITS}:{name}", timer)
    assert rows and {(row["status"], row["integrity"]) for row in rows} == {("ok", INTEGRITY_PASS)}


def test_an_l2_persisting_window_is_refused_under_judge(tmp_path):
    """The window survives the L2 flush and the refresh (it rewrites a window of the K/V
    only); the static screen's ctypes finding fails the row under --judge."""
    plugin = Path(__file__).resolve().parent / "exploits_reaching" / "l2_persisting_window.py"
    rows = _sweep(tmp_path, f"{plugin}:make", "profiler", extra=("--judge",))
    assert rows and {(row["status"], row["integrity"]) for row in rows} == {
        ("failed", SOURCE_SCREEN)
    }
