"""Plugins out of the harness's reach (issue 51): a plugin that patches the harness's row
builder, CSV writer, statistics, clocks, CUDA events or profiler from its factory
(``tests/isolation_exploits.py``) gets its honest time or a failed row, and the sweep's own
objects stay as they were."""

from __future__ import annotations

import importlib
import statistics
import sys
from pathlib import Path

import isolation_exploits
import pytest
from test_bench_common import read_rows, run_main

import bench_batch_decode
from fi_attn_bench.sweep.sample_writer import read_samples

ROOT = Path(__file__).resolve().parent.parent
EXPLOITS = ROOT / "tests" / "isolation_exploits.py"
HONEST = "examples/sdpa_decode_plugin.py:make"
ONE_CASE = "batch_size=4,seq_len_kv=37"


def _sweep(tmp_path, *impls: str, extra=()) -> list[dict]:
    out = tmp_path / "r.csv"
    argv = ["--preset", "cpu", "--device", "cpu", "--filter", ONE_CASE, "--output", str(out)]
    argv += ["--samples-dir", str(tmp_path / "samples")]
    for impl in impls:
        argv += ["--impl", impl]
    run_main([*argv, *extra], spec=bench_batch_decode.SPEC)
    return read_rows(out)


def _samples(tmp_path) -> dict[str, list[float]]:
    (found,) = (tmp_path / "samples").iterdir()
    return {line["impl"]: line["samples_ms"] for line in read_samples(str(found))}


def _owner(module: str, cls: str | None):
    found = importlib.import_module(module)
    return getattr(found, cls) if cls else found


@pytest.fixture
def restored():
    """Whatever an exploit replaces in this process is put back after the test (an exploit
    that ran in-process would otherwise cheat for every later test)."""
    saved = [
        (_owner(module, cls), name, getattr(_owner(module, cls), name))
        for places in isolation_exploits.PATCHED.values()
        for module, cls, name in places
    ]
    yield saved
    for owner, name, original in saved:
        setattr(owner, name, original)


def _untouched(saved) -> list[str]:
    """The objects the exploits replace that are not what they were (empty: all as before)."""
    return [
        f"{getattr(owner, '__name__', owner)}.{name}"
        for owner, name, original in saved
        if getattr(owner, name) is not original
    ]


@pytest.mark.parametrize("name", ["row_builder", "csv_writer"])
def test_a_plugin_cannot_rewrite_the_rows_the_sweep_writes(tmp_path, restored, name):
    """The issue's exploit: in the harness's process the row said a third of the measured
    time, ok and pass; now the row's time is the median of the samples it measured."""
    rows = _sweep(tmp_path, HONEST, f"{EXPLOITS}:{name}")
    assert _untouched(restored) == []
    samples = _samples(tmp_path)
    for row in rows:
        assert row["status"] == "ok", row
        assert float(row["time_ms"]) == pytest.approx(statistics.median(samples[row["impl"]]))


@pytest.mark.parametrize(
    "name", ["statistics_via_sys_modules", "perf_counter", "elapsed_time", "profiler_results"]
)
def test_a_plugin_that_patches_the_timing_fails_its_row(tmp_path, restored, name):
    rows = _sweep(tmp_path, f"{EXPLOITS}:{name}")
    assert _untouched(restored) == []
    assert rows
    for row in rows:
        assert row["status"] == "failed", row
        assert row["error_type"] == "IntegrityError", row
        assert "changed during the case" in row["error"], row


def test_the_sweep_never_imports_a_plugin(tmp_path, restored):
    """The plugin's module runs in the worker only: not even its import reaches the sweep."""
    _sweep(tmp_path, f"{EXPLOITS}:row_builder")
    loaded = [
        name
        for name, module in list(sys.modules.items())
        if name.startswith("fi_attn_bench_plugin_")
        and Path(str(getattr(module, "__file__", ""))) == EXPLOITS
    ]
    assert loaded == []
