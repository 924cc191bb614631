"""Plugins out of the harness's reach: a plugin that patches the harness's row
builder, CSV writer, statistics, clocks, CUDA events or profiler from its factory
(``tests/isolation_exploits.py``) gets its honest time or a failed row, and the sweep's own
objects stay as they were."""

from __future__ import annotations

import csv
import importlib
import io
import os
import statistics
import subprocess
import sys
import time
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
# 50 ms batches: a third of the time hides 33 ms per batch, far beyond the pipe's latency
LONG_BATCHES = ("--batch-ms", "50", "--min-time-ms", "300")


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


@pytest.fixture
def code_restored():
    """The code objects the bytecode swaps replace, put back after the test."""
    saved = []
    for module, path in isolation_exploits.CODE_SWAPS.values():
        function = importlib.import_module(module)
        for part in path.split("."):
            function = getattr(function, part)
        saved.append((function, function.__code__))
    yield
    for function, code in saved:
        function.__code__ = code


def test_the_output_is_judged_by_the_sweep_not_by_the_plugins_process(tmp_path, code_restored):
    """A plugin that makes its process's check pass anything still fails the sweep's."""
    rows = _sweep(tmp_path, f"{EXPLOITS}:blind_checker")
    assert rows
    for row in rows:
        assert row["status"] == "failed" and row["check"] == "fail", row
        assert row["error_type"] == "CorrectnessError", row


def test_rounds_shrunk_behind_honest_samples_fail_the_paired_ratio(tmp_path, code_restored):
    """The paired ratio says a third, the medians say the same: the two must agree."""
    rows = _sweep(tmp_path, HONEST, f"{EXPLOITS}:code_swap_rounds")
    by_impl = {row["impl"]: row for row in rows}
    cheat = by_impl["isolation_exploits:code_swap_rounds"]
    assert cheat["status"] == "failed" and cheat["integrity"] == "paired_ratio", cheat
    assert "disagree beyond their noise" in cheat["error"]
    assert by_impl["sdpa_decode_plugin:make"]["status"] == "ok"


@pytest.mark.parametrize("name", ["code_swap_clock", "code_swap_statistics"])
def test_a_bytecode_swap_the_guard_cannot_see_fails_the_harness_clock(
    tmp_path, code_restored, name
):
    """The function objects stay the same (no identity change); the samples a third of the
    time: the parent's own clock for the batches (or their beaconed sums) fails the row."""
    rows = _sweep(tmp_path, f"{EXPLOITS}:{name}", extra=LONG_BATCHES)
    assert rows
    for row in rows:
        assert row["status"] == "failed", row
        assert row["integrity"] == "own_clock", row
        assert "integrity check own_clock failed" in row["error"], row


def test_a_worker_that_sends_junk_fails_its_case_and_the_sweep_goes_on(tmp_path):
    out = tmp_path / "r.csv"
    argv = ["--preset", "cpu", "--device", "cpu", "--filter", "seq_len_kv=37", "--output", str(out)]
    run_main([*argv, "--impl", f"{EXPLOITS}:junk_message"], spec=bench_batch_decode.SPEC)
    rows = read_rows(out)
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "failed" and row["error_type"] == "WorkerError", row
        assert "not JSON" in row["error"]


def test_only_the_sweep_writes_the_csv_on_stdout(tmp_path):
    """With --output - the rows go to stdout: a plugin writing to file descriptor 1 reaches
    stderr, not the CSV (a process of the script, so that descriptors are real)."""
    command = [sys.executable, str(ROOT / "bench_batch_decode.py"), "--preset", "cpu"]
    command += ["--device", "cpu", "--filter", ONE_CASE, "--output", "-"]
    command += ["--impl", f"{EXPLOITS}:writes_stdout"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert "forged" not in done.stdout and "forged,row" in done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [row["status"] for row in rows] == ["ok"]


def test_a_worker_that_dies_fails_its_case_and_the_next_case_runs(tmp_path):
    out = tmp_path / "r.csv"
    argv = ["--preset", "cpu", "--device", "cpu", "--filter", "seq_len_kv=37", "--output", str(out)]
    run_main([*argv, "--impl", f"{EXPLOITS}:dies"], spec=bench_batch_decode.SPEC)
    rows = {row["batch_size"]: row for row in read_rows(out)}
    assert rows["4"]["status"] == "failed" and rows["4"]["error_type"] == "WorkerError"
    assert "died" in rows["4"]["error"] and "exit code 3" in rows["4"]["error"]
    assert rows["1"]["status"] == "ok", rows["1"]


def test_a_worker_that_hangs_is_ended_and_its_row_fails(tmp_path, monkeypatch):
    from fi_attn_bench.sweep import isolation

    monkeypatch.setattr(isolation, "SILENCE_S", 2.0)
    rows = _sweep(tmp_path, f"{EXPLOITS}:hangs")
    assert rows[0]["status"] == "failed" and rows[0]["error_type"] == "WorkerError"
    assert "sent nothing for 2 s" in rows[0]["error"]


def test_honest_plugins_pass_in_the_worker_with_their_check_from_the_parent(tmp_path):
    rows = _sweep(tmp_path, "torch", HONEST)
    assert {(r["status"], r["check"], r["integrity"]) for r in rows} == {
        ("ok", "skipped", "pass"),
        ("ok", "pass", "pass"),
    }


def test_a_plugin_is_checked_from_its_source_and_exits_2_before_its_code_runs(tmp_path, capsys):
    plugin = tmp_path / "p.py"
    plugin.write_text("raise SystemExit('imported!')\ndef make(context):\n    pass\n")
    argv = ["--preset", "cpu", "--device", "cpu", "--output", str(tmp_path / "r.csv")]
    assert run_main([*argv, "--impl", f"{plugin}:other"], spec=bench_batch_decode.SPEC) == 2
    assert "has no attribute 'other'" in capsys.readouterr().err


def test_a_plugin_whose_import_fails_in_the_worker_fails_its_rows(tmp_path):
    """Its import ran in the worker only (in this process a SystemExit would end the test)."""
    plugin = tmp_path / "p.py"
    plugin.write_text("raise SystemExit('imported!')\ndef make(context):\n    pass\n")
    rows = _sweep(tmp_path, f"{plugin}:make")
    assert rows and all(row["error_type"] == "WorkerError" for row in rows), rows
    assert "SystemExit" in rows[0]["error"] or "could not start" in rows[0]["error"]


# ---------------------------------------------------------------- the parent's pieces


def test_the_floor_fails_a_median_faster_than_bytes_at_the_peak_allow():
    from fi_attn_bench.sweep import crosscheck

    floor = crosscheck.floor_ms(io_bytes=2e9, flops=1e9, bandwidth_GB_s=1000.0, tflops=10.0)
    assert floor == pytest.approx(2.0)  # bytes: 2 ms; FLOPs: 0.1 ms
    assert crosscheck.floor_failure(1.9, floor, "test peaks") is not None
    assert crosscheck.floor_failure(2.0, floor, "test peaks") is None
    assert crosscheck.floor_ms(2e9, 1e12, float("nan"), 0.0) == 0.0  # no peak known: no floor


def test_the_paired_ratio_and_the_medians_ratio_must_agree():
    from fi_attn_bench.sweep import crosscheck
    from fi_attn_bench.timing.paired import PairedRatio

    mine, base = [1.0, 1.01, 0.99] * 10, [3.0, 3.03, 2.97] * 10
    same = PairedRatio(1.0, 30, (0.98, 1.02))
    assert "disagree" in crosscheck.paired_failure(mine, base, same)
    assert crosscheck.paired_failure(mine, base, PairedRatio(0.34, 30, (0.33, 0.35))) is None


def test_the_harness_clock_judges_the_median_batch_of_each_session():
    from fi_attn_bench.sweep.crosscheck import BatchWindow, clock_failure

    honest = [BatchWindow(0, 50.0, 100, 48.0)] * 5 + [BatchWindow(0, 90.0, 100, 48.0)]  # late read
    shrunk = [BatchWindow(1, 50.0, 100, 16.5)] * 6
    windows = honest + shrunk
    assert clock_failure(windows, 0, on_cpu=True) is None
    assert "33%" in clock_failure(windows, 1, on_cpu=True)
    assert clock_failure(windows, 1, on_cpu=False) is None  # a GPU batch also holds flushes
    tiny_calls = [BatchWindow(2, 10.0, 2000, 2.0)] * 3  # 1 us calls, 4 us of loop per call
    read_late = [BatchWindow(3, 4.0, 100, 0.5)] * 3  # 0.5 ms batches read 3.5 ms late
    assert clock_failure(tiny_calls, 2, on_cpu=True) is None
    assert clock_failure(read_late, 3, on_cpu=True) is None
    # preempted between calls on a loaded machine: the kernel's runqueue wait is left out
    preempted = [BatchWindow(4, 50.0, 100, 20.0, preempted_ms=28.0)] * 2
    assert clock_failure(preempted, 4, on_cpu=True) is None
    assert clock_failure([BatchWindow(4, 50.0, 100, 20.0)] * 2, 4, on_cpu=True) is not None
    # a third reported of calls preempted for a tenth of their time: still 2/3 unseen
    third = [BatchWindow(5, 60.0, 100, 20.0, preempted_ms=6.0)] * 2
    assert clock_failure(third, 5, on_cpu=True) is not None


def test_the_worker_runqueue_wait_is_read_from_the_kernel():
    import os

    from fi_attn_bench.sweep.isolation import runqueue_wait_ms

    assert runqueue_wait_ms(os.getpid()) >= 0.0
    assert runqueue_wait_ms(None) == 0.0 and runqueue_wait_ms(-1) == 0.0


def test_fresh_values_time_between_calls_is_allowed_only_up_to_what_it_costs_here():
    """Under fresh values a batch also holds the refreshes and sampled checks between calls:
    the worker's report of that time is accepted, capped by this process's own costs."""
    from fi_attn_bench.sweep.crosscheck import (
        BatchWindow,
        HarnessCosts,
        allow_harness_time,
        clock_failure,
    )

    costs = HarnessCosts(refresh_ms=0.4, reference_ms=1.0, chance=lambda n: min(1.0, 1 / n))
    honest = [BatchWindow(0, 100.0, 100, 48.0, harness_ms=50.0)] * 3  # 0.5 ms between calls
    assert clock_failure(honest, 0, on_cpu=True) is not None  # without the allowance: 48%
    assert clock_failure(allow_harness_time(honest, 0, costs), 0, on_cpu=True) is None
    # a worker that shrinks its samples to a third and calls the rest harness time: the
    # allowance is capped by what refreshes cost here (3 x 100 x 0.05; no sampled checks)
    hiding = [BatchWindow(0, 100.0, 100, 16.0, harness_ms=82.0)] * 3
    cheap = HarnessCosts(refresh_ms=0.05, reference_ms=0.1, chance=None)
    allowed = allow_harness_time(hiding, 0, cheap)
    assert all(abs(w.allowed_ms - 15.0) < 1e-9 for w in allowed)
    assert clock_failure(allowed, 0, on_cpu=True) is not None
    other = [BatchWindow(1, 100.0, 100, 16.0, harness_ms=82.0)]
    assert allow_harness_time(other, 0, costs) == other  # another session's batches untouched


def test_samples_must_be_what_the_batches_reported_and_fit_the_span():
    from fi_attn_bench.sweep.crosscheck import BatchWindow, batch_sum_failure, span_failure

    windows = [BatchWindow(0, 10.0, 2, 3.0), BatchWindow(0, 10.0, 2, 3.0)]
    assert batch_sum_failure(windows, 0, [1.5, 1.5, 1.5, 1.5]) is None
    assert "reported 4" in batch_sum_failure(windows, 0, [0.5, 0.5, 0.5, 0.5])
    assert span_failure(windows, span_ms=20.0) is None
    assert span_failure([BatchWindow(0, 1.0, 1, 500.0)], span_ms=20.0) is not None


@pytest.mark.parametrize(
    "bad",
    [
        {"samples": ["1"]},
        {"samples": [-1.0]},
        {"samples": []},
        {"runs_per_sample": 0},
        {"per_call": "yes"},
        {"kernels": "k"},
    ],
)
def test_a_malformed_measurement_is_a_worker_error(bad):
    from fi_attn_bench.sweep import worker_data as data

    good = {
        "samples": [1.0],
        "timer": "wall",
        "l2": "warm",
        "kernels": [],
        "runs_per_sample": 1,
        "per_call": True,
        "batch_gpu_ms": 0.0,
        "starved_calls": 0,
        "throttled_samples": 0,
        "discarded_samples": 0,
        "energy": None,
    }
    assert data.measurement(good).median == 1.0
    with pytest.raises(data.WorkerError):
        data.measurement({**good, **bad})


def test_tensors_columns_and_errors_from_the_worker_are_plain_checked_data():
    from fi_attn_bench.sweep import worker_data as data

    header = {"dtype": "float16", "shape": [2, 3], "bytes": 12}
    assert data.tensor(header, bytes(12)).shape == (2, 3)
    for bad, raw in [
        ({**header, "shape": [2, 4]}, bytes(12)),
        ({**header, "dtype": "object"}, b""),
    ]:
        with pytest.raises(data.WorkerError):
            data.tensor(bad, raw)
    with pytest.raises(data.WorkerError):
        data.columns({"status": "ok"})  # not an optional column: the parent's to write
    with pytest.raises(data.WorkerError):
        data.columns({"notes": ["a list"]})
    with pytest.raises(data.WorkerError):
        data.rebuilt_error({"type": "os.system('x')", "message": "m"})
    error = data.rebuilt_error({"type": "ValueError", "message": "m"})
    assert type(error).__name__ == "ValueError" and isinstance(error, data.RemoteError)


def test_a_spec_made_at_run_time_is_refused_with_exit_2(tmp_path, capsys):
    import dataclasses

    spec = dataclasses.replace(bench_batch_decode.SPEC, make_inputs=lambda case, settings: None)
    argv = ["--preset", "cpu", "--device", "cpu", "--output", str(tmp_path / "r.csv")]
    assert run_main([*argv, "--impl", HONEST], spec=spec) == 2
    assert "made at run time" in capsys.readouterr().err


def test_a_serving_batch_reaches_the_worker_with_its_workload_field(tmp_path):
    out = tmp_path / "r.csv"
    argv = ["--device", "cpu", "--batch", "2d@10+1d@90", "--output", str(out), "--impl", HONEST]
    assert run_main(argv, spec=bench_batch_decode.SPEC) == 0
    rows = read_rows(out)
    assert [(row["status"], row["workload"]) for row in rows] == [("ok", "2d@10+1d@90")]


# ------------------------------------------------- the worker's process reached sideways
# (the external exploit set's families, docs/VALIDATION.md: each found its classes by walking
# object.__subclasses__(), past the static screen's plain routes)

SIDEWAYS = {
    "refresher_noop": "fi_attn_bench.timing.fresh.Refresher.__call__",
    "code_swap_refresher": "FreshCalls.before_call.<0>.__code__",
    "pipe_rewrite": "multiprocessing.connection._ConnectionBase.send_bytes",
    "function_mode": "a torch function mode",
}


@pytest.mark.parametrize("name", sorted(SIDEWAYS))
def test_a_plugin_that_disarms_the_worker_from_inside_fails_timer_identity(
    tmp_path, code_restored, name
):
    """A no-op refresher (on its class), the fresh-value hooks' bytecode swapped, the pipe's
    send_bytes rewritten, a torch function mode left on: each won (a cache or a 1.8x lie
    timed as ok); the guard now names what changed and every row of the case fails."""
    rows = _sweep(tmp_path, HONEST, f"{EXPLOITS}:{name}")
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "failed", row
        assert row["integrity"] == "timer_identity", row
        assert SIDEWAYS[name] in row["error"], row


def test_an_output_that_defers_its_work_until_it_is_read_fails(tmp_path):
    """A Tensor subclass output ran its kernel in the harness's reads (ratio 0.00, ok); a
    plugin's output must be a plain torch.Tensor."""
    rows = _sweep(tmp_path, HONEST, f"{EXPLOITS}:lazy_output")
    cheat = {row["impl"]: row for row in rows}["isolation_exploits:lazy_output"]
    assert cheat["status"] == "failed" and cheat["error_type"] == "TypeError", cheat
    assert "not a plain torch.Tensor" in cheat["error"]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("forged_reply", "without the case's nonce"),
        ("forged_reply_with_nonce", "it reported samples while it slept"),
    ],
)
def test_a_reply_forged_into_the_pipe_fails_the_case(tmp_path, name, reason):
    """A plugin that writes its own reply (a third of the time, beacons paced by sleeping)
    into the worker's socket and ends the worker: it lacks the nonce; with the nonce read from
    the worker's memory and the ping after it answered, the kernel saw the worker idle through
    its batches."""
    rows = _sweep(tmp_path, HONEST, f"{EXPLOITS}:{name}")
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "failed", row
        assert reason in row["error"], row


def test_the_busy_share_fails_a_worker_idle_through_its_batches():
    from fi_attn_bench.sweep.crosscheck import BatchWindow, idle_failure

    windows = [BatchWindow(0, 20.0, 100, 19.0), BatchWindow(1, 20.0, 100, 19.0)]
    assert idle_failure(windows, 45.0) is None  # busy through its batches and checks
    assert idle_failure(windows, 20.0) is None  # half of 38 ms, less the pipe's 2 ms
    assert "while it slept" in idle_failure(windows, 3.0)
    assert idle_failure(windows, None) is None  # not readable: nothing to judge


def test_the_worker_cpu_time_is_read_from_the_kernel():
    from fi_attn_bench.sweep.isolation import busy_ms

    before = busy_ms(os.getpid())
    sum(i * i for i in range(200_000))
    assert before is not None and busy_ms(os.getpid()) > before
    assert busy_ms(-1) is None


def test_the_worker_cpu_time_counts_threads_the_main_thread_waits_for():
    """Threads compute while the main thread waits (torch's intra-op pool): their time counts,
    also once they have ended."""
    import threading

    from fi_attn_bench.sweep.isolation import busy_ms

    before = busy_ms(os.getpid())
    started = time.thread_time()
    helper = threading.Thread(target=lambda: sum(i * i for i in range(2_000_000)))
    helper.start()
    helper.join()  # the main thread blocks, off the CPU and off the runqueue
    main_ms = (time.thread_time() - started) * 1e3
    helper_ms = busy_ms(os.getpid()) - before - main_ms
    assert helper_ms > 20 * max(main_ms, 0.5)
