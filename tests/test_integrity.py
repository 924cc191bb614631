"""Integrity checks (fi_attn_bench.timing.integrity): every cheating plugin of the corpus
(tests/exploits.py) fails its rows on the CPU path, passes the single output check without
them, and honest implementations pass; the profiler and graph mechanisms with fakes."""

from __future__ import annotations

import importlib
import math
import queue
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import exploits
import pytest
import torch
from stand_ins import fake_flashinfer
from test_bench_common import read_rows, run_main

import bench_batch_decode
from fi_attn_bench.backends.impls import ImplContext
from fi_attn_bench.cases.checking import Tolerance
from fi_attn_bench.cases.inputs import prepare_case
from fi_attn_bench.cases.spec import Settings
from fi_attn_bench.results.schema import (
    FRESH_INPUTS,
    FRESH_INPUTS_TIME,
    GRAPH_CAPTURE,
    INTEGRITY_OFF,
    INTEGRITY_PASS,
    TIMED_OUTPUT,
    TIMELINE,
)
from fi_attn_bench.timing import fresh, integrity
from fi_attn_bench.timing.integrity import IntegrityError, IntegrityProbe, Subject
from fi_attn_bench.timing.timers import HostStopwatch, call_hooks
from fi_attn_bench.timing.trace import DeviceEvent

ROOT = Path(__file__).resolve().parent.parent
EXPLOITS = ROOT / "tests" / "exploits.py"
LARGE = {"batch_size": 4, "seq_len_q": 1, "seq_len_kv": 200, "num_qo_heads": 32}


def _sweep(tmp_path, *impls: str, extra=()) -> list[dict]:
    out = tmp_path / "r.csv"
    argv = ["--preset", "cpu", "--device", "cpu", "--filter", "batch_size=4", "--output", str(out)]
    for impl in impls:
        argv += ["--impl", impl]
    run_main([*argv, *extra], spec=bench_batch_decode.SPEC)
    return read_rows(out)


@pytest.fixture
def every_call_checked(monkeypatch):
    """Every timed call's output checked (the sampling's rate has tests of its own), so a
    cheat that is wrong on some calls fails whatever the draw."""
    monkeypatch.setitem(fresh.SAMPLE_RATES, "default", fresh.SampleRate(1.0, 1.0))


@pytest.mark.usefixtures("every_call_checked")
@pytest.mark.parametrize("name", sorted(exploits.CPU_CAUGHT_BY))
def test_every_cpu_exploit_fails_its_rows_and_names_the_check(tmp_path, name):
    rows = _sweep(tmp_path, f"{EXPLOITS}:{name}", extra=exploits.CPU_SWEEP_ARGS.get(name, ()))
    assert rows, "no case ran"
    for row in rows:
        assert row["status"] == "failed", row
        assert row["integrity"] in exploits.CPU_CAUGHT_BY[name], row
        assert row["error_type"] == "IntegrityError"
        assert f"integrity check {row['integrity']} failed" in row["error"]


@pytest.mark.parametrize("name", sorted(exploits.CPU_CAUGHT_BY))
def test_every_exploit_passes_the_single_output_check(tmp_path, name):
    """What makes each one an exploit: without the integrity checks its rows are ok."""
    extra = ["--no-integrity", *exploits.CPU_SWEEP_ARGS.get(name, ())]
    rows = _sweep(tmp_path, f"{EXPLOITS}:{name}", extra=extra)
    assert rows and all(row["status"] == "ok" for row in rows), rows
    assert {row["check"] for row in rows} == {"pass"}
    assert {row["integrity"] for row in rows} == {INTEGRITY_OFF}
    assert "--no-integrity" in rows[0]["repro"]


def test_honest_implementations_pass_head_to_head(tmp_path):
    rows = _sweep(tmp_path, "torch", "examples/sdpa_decode_plugin.py:make")
    assert len(rows) == 4
    assert {(row["status"], row["integrity"]) for row in rows} == {("ok", INTEGRITY_PASS)}


def test_a_cheat_fails_beside_an_honest_plugin_that_shares_its_inputs(tmp_path):
    rows = _sweep(tmp_path, "examples/sdpa_decode_plugin.py:make", f"{EXPLOITS}:pointer_cache")
    by_impl = {}
    for row in rows:
        by_impl.setdefault(row["impl"], set()).add((row["status"], row["integrity"]))
    assert by_impl["sdpa_decode_plugin:make"] == {("ok", INTEGRITY_PASS)}
    assert by_impl["exploits:pointer_cache"] == {("failed", TIMED_OUTPUT)}


# ---------------------------------------------------------------- the pieces, with fakes


def _case() -> dict:
    return next(
        dict(case)
        for case in bench_batch_decode.SPEC.presets["cpu"]
        if all(case[k] == v for k, v in LARGE.items())
    )


def _subject(plugin) -> Subject:
    case = _case()
    settings = Settings(torch.device("cpu"), torch.float16, 16, "torch", seed=3)
    inputs = bench_batch_decode.make_inputs(case, settings)
    made = plugin(ImplContext(bench_batch_decode.API, case, settings, inputs))
    if made.plan is not None:
        made.plan()
    reference = bench_batch_decode.reference_fn(inputs, bench_batch_decode.sm_scale(case))
    return Subject(made.run, made.output, reference, inputs, torch.device("cpu"), Tolerance())


def _probe(subject: Subject, timer_name: str, stopwatch=HostStopwatch) -> IntegrityProbe:
    probe = IntegrityProbe(subject, timer_name, stopwatch)
    subject.run()
    probe.verified = subject.output_of(subject.run()).clone()
    return probe


def _cpu_profile(body, sync):
    """The profiler timer's profile(), recording CPU activity (no device here)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        body()
        sync()
    return []


PROFILER_SESSION = SimpleNamespace(timer=SimpleNamespace(name="profiler", profile=_cpu_profile))


def test_a_plugin_that_skips_work_under_the_profiler_fails_timed_output():
    probe = _probe(_subject(exploits.skips_under_profiler), "profiler")
    with pytest.raises(IntegrityError) as caught:
        probe.check_timed_output(PROFILER_SESSION)
    assert caught.value.check == TIMED_OUTPUT


def test_the_fresh_call_runs_under_the_profiler_too():
    probe = _probe(_subject(exploits.skips_under_profiler), "profiler")
    with pytest.raises(IntegrityError) as caught:
        probe.check_fresh_inputs(PROFILER_SESSION, SimpleNamespace(median=1.0))
    assert caught.value.check == FRESH_INPUTS


def test_an_honest_plugin_passes_every_check_under_the_profiler():
    probe = _probe(_subject(exploits._honest), "profiler")
    for audit in probe.audits():
        audit(PROFILER_SESSION, SimpleNamespace(median=1000.0))


def _wall_profile(body, sync):
    """A profiler that records the body's wall time as one kernel: its GPU work, had it run
    on one."""
    started = time.perf_counter_ns()
    body()
    sync()
    return [DeviceEvent("work", started, time.perf_counter_ns() - started)]


WALL_PROFILER_SESSION = SimpleNamespace(
    timer=SimpleNamespace(name="profiler", profile=_wall_profile)
)


def test_under_the_profiler_a_cache_is_timed_by_its_work_not_against_the_timed_median():
    probe = _probe(_subject(exploits.fingerprint_cache), "profiler")
    with pytest.raises(IntegrityError) as caught:  # a median this slow hid it on an H100
        probe.check_fresh_inputs(WALL_PROFILER_SESSION, SimpleNamespace(median=1000.0))
    assert caught.value.check == FRESH_INPUTS_TIME


def test_under_the_profiler_an_honest_call_on_new_values_does_the_controls_work():
    probe = _probe(_subject(exploits._honest), "profiler")
    probe.check_fresh_inputs(WALL_PROFILER_SESSION, SimpleNamespace(median=1e-6))


def _graph_session(kernels: list[str], replay, calls: int = 3):
    def profile(body, sync):
        kernels.clear()
        body()
        return [DeviceEvent(name, 0, 1) for name in kernels]

    return SimpleNamespace(
        graph=SimpleNamespace(replay=replay),
        calls_per_replay=calls,
        timer=SimpleNamespace(name="cuda_graph", profile=profile),
    )


def _logged(subject: Subject, kernels: list[str]) -> Subject:
    def run():
        kernels.extend(("gather", "attention"))
        return subject.run()

    return Subject(
        run, subject.output, subject.reference, subject.inputs, subject.device, Tolerance()
    )


def test_a_replay_that_skips_a_kernel_fails_graph_capture():
    kernels: list[str] = []
    subject = _logged(_subject(exploits._honest), kernels)
    session = _graph_session(kernels, lambda: kernels.extend(["gather"] * 3))
    with pytest.raises(IntegrityError) as caught:
        _probe(subject, "cuda_graph").check_graph_capture(session)
    assert caught.value.check == GRAPH_CAPTURE
    assert "missing: 3x attention" in str(caught.value)


def test_a_complete_replay_passes_and_its_output_is_checked_on_fresh_values():
    kernels: list[str] = []
    subject = _logged(_subject(exploits._honest), kernels)

    def replay():
        for _ in range(3):
            subject.run()

    probe = _probe(subject, "cuda_graph")
    probe.check_graph_capture(_graph_session(kernels, replay))
    probe.check_fresh_inputs(_graph_session(kernels, replay), SimpleNamespace(median=1000.0))
    stale = _graph_session(kernels, lambda: kernels.extend(["gather", "attention"] * 3))
    with pytest.raises(IntegrityError) as caught:  # a replay that wrote nothing
        probe.check_fresh_inputs(stale, SimpleNamespace(median=1000.0))
    assert caught.value.check == FRESH_INPUTS


def test_the_poisoned_call_is_drawn_by_reservoir_sampling():
    calls = []
    output = torch.zeros(2)

    def run():
        calls.append(len(calls) + 1)
        return output.fill_(len(calls))

    subject = Subject(run, output, lambda: output, None, torch.device("cpu"), Tolerance())
    draws = iter([0.5, 0.4, 0.9, 0.2, 0.3])  # call k is drawn when draw * k < 1
    sentinel = integrity.TimedCallSentinel(subject, draw=lambda: next(draws))
    for _ in range(5):
        sentinel()
    assert sentinel.snapshot.tolist() == [4.0, 4.0]  # calls 1, 4 drawn (0.5, 0.8 < 1); 4 last


def test_late_work_is_a_timeline_failure_not_a_wrong_output():
    output, right = torch.zeros(4), torch.arange(4.0)

    def run():  # the work lands 20 ms after run() returned
        threading.Timer(0.02, lambda: output.copy_(right)).start()
        return output

    subject = Subject(run, output, lambda: right, None, torch.device("cpu"), Tolerance())
    probe = IntegrityProbe(subject, "wall", HostStopwatch, verified=right.clone())
    probe.sentinel = integrity.TimedCallSentinel(subject, draw=lambda: 0.0)
    probe.sentinel()
    with pytest.raises(IntegrityError) as caught:
        probe.check_timed_output(SimpleNamespace())
    assert caught.value.check == TIMELINE
    assert "unfinished when run() returned" in str(caught.value)


def _burn_cpu(seconds: float) -> None:
    """Spin until this thread has used ``seconds`` of CPU time."""
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass


@pytest.fixture
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_torch_thread")
def test_cpu_time_spent_by_other_threads_during_the_timed_calls_is_a_timeline_failure():
    output = torch.zeros(4)
    # a worker started before the calls: each call only hands it 30 ms of CPU work (starting
    # a thread per call waited for it to run, which on a loaded machine lengthened the calls'
    # wall time and so the limit; and a 0.15 s sleep did not always see the work done)
    work: queue.Queue = queue.Queue()

    def worker():
        for seconds in iter(work.get, None):
            _burn_cpu(seconds)
            work.task_done()

    threading.Thread(target=worker, daemon=True).start()

    def run():
        work.put(0.03)
        return output

    subject = Subject(run, output, lambda: output, None, torch.device("cpu"), Tolerance())
    probe = IntegrityProbe(subject, "wall", HostStopwatch)
    timed = probe.timed_fn()
    before, after = call_hooks(timed)

    def call() -> None:
        before()
        timed()
        after()

    for _ in range(3):
        call()
    work.join()  # the 90 ms handed off are done: inside the timed calls' span
    call()
    work.join()
    work.put(None)
    with pytest.raises(IntegrityError) as caught:
        probe.check_timed_output(SimpleNamespace())
    assert caught.value.check == TIMELINE
    assert "other threads used" in str(caught.value)


def _burning(subject: Subject, calls: float) -> Subject:
    """``subject`` whose first ``calls`` calls each wait on a thread that burns 20 ms of CPU:
    the thread's time falls inside the call, and it is gone when the call returns."""
    made = {"calls": 0}

    def run():
        made["calls"] += 1
        if made["calls"] <= calls:
            helper = threading.Thread(target=_burn_cpu, args=(0.02,))
            helper.start()
            helper.join()
        return subject.run()

    return Subject(
        run, subject.output, subject.reference, subject.inputs, subject.device, Tolerance()
    )


@pytest.mark.usefixtures("one_torch_thread")
def test_other_threads_busy_during_the_first_fresh_call_only_is_retried_not_failed():
    # another thread's one-off burst (seen on a loaded 2-core CI machine: 0.28 ms against 0.275)
    probe = _probe(_burning(_subject(exploits._honest), calls=5), "wall")
    probe.check_fresh_inputs(SimpleNamespace(), SimpleNamespace(median=1.0))


@pytest.mark.usefixtures("one_torch_thread")
def test_other_threads_busy_during_every_fresh_call_is_a_timeline_failure():
    # the call is timed by the CPU time the process ran: on a loaded machine the wall time
    # of a call that waits on a busy thread grows, and half of it covered the thread's 20 ms
    ran = lambda: HostStopwatch(time.process_time)  # noqa: E731
    probe = _probe(_burning(_subject(exploits._honest), calls=math.inf), "wall", ran)
    with pytest.raises(IntegrityError) as caught:
        probe.check_fresh_inputs(SimpleNamespace(), SimpleNamespace(median=1.0))
    assert caught.value.check == TIMELINE
    assert "other threads used" in str(caught.value)
    assert f"{1 + integrity.TIME_RETRIES} tries" in str(caught.value)


def test_fresh_values_are_written_in_place_into_floating_inputs_only():
    subject = _subject(exploits._honest)
    inputs = subject.inputs
    tensors = integrity.floating_tensors(inputs)
    assert [t.data_ptr() for t in tensors] == [
        inputs.q.data_ptr(),
        inputs.k_cache.data_ptr(),
        inputs.v_cache.data_ptr(),
    ]
    before = [t.clone() for t in tensors]
    table = inputs.table.kv_indices.clone()
    integrity.refill_(tensors)
    assert all(not torch.equal(a, b) for a, b in zip(before, tensors, strict=True))
    assert torch.equal(table, inputs.table.kv_indices)
    assert math.isclose(float(tensors[1].float().std()), 1.0, rel_tol=0.05)


def test_the_time_limit_is_a_factor_with_slack_for_tiny_calls():
    probe = IntegrityProbe(_subject(exploits._honest), "wall", HostStopwatch)
    assert probe.time_limit_ms(1.0) == pytest.approx(integrity.TIME_FACTOR)
    assert probe.time_limit_ms(0.001) == pytest.approx(0.001 + integrity.TIME_SLACK_MS)


def test_the_integrity_column_names_the_failed_check():
    assert integrity.integrity_column(False) == {"integrity": INTEGRITY_OFF}
    assert integrity.integrity_column(True) == {"integrity": INTEGRITY_PASS}
    failed = IntegrityError(TIMELINE, "late")
    assert integrity.integrity_column(True, failed) == {"integrity": TIMELINE}


# ---------------------------------------------------------------- FlashInfer, stand-ins


SCRIPTS = (
    "bench_batch_decode",
    "bench_batch_prefill_paged",
    "bench_batch_prefill_ragged",
    "bench_batch_mla",
)


@pytest.mark.parametrize("release", fake_flashinfer.RELEASES)
@pytest.mark.parametrize("script", SCRIPTS)
def test_flashinfer_wrappers_pass_every_check_under_every_timer(monkeypatch, script, release):
    """The stand-ins (0.6.1's and the MetaX 0.2.6 port's signatures) compute the reference:
    no check may fire on them, whichever way the timer runs its calls."""
    monkeypatch.setitem(sys.modules, "flashinfer", fake_flashinfer.make_module(release))
    module = importlib.import_module(script)
    case = module.SPEC.presets["cpu"][0]
    settings = Settings(torch.device("cpu"), torch.float16, 16, "flashinfer", seed=5)
    prepared = prepare_case(module.SPEC, case, settings)
    subject = Subject(
        prepared.run,
        prepared.output,
        prepared.reference,
        prepared.inputs,
        settings.device,
        Tolerance(),
    )
    kernels: list[str] = []
    logged = _logged(subject, kernels)

    def replay():
        for _ in range(2):
            logged.run()

    sessions = {
        "wall": SimpleNamespace(),
        "profiler": PROFILER_SESSION,
        "cuda_graph": _graph_session(kernels, replay, calls=2),
    }
    for timer, session in sessions.items():
        probe = _probe(logged, timer)
        for audit in probe.audits():
            audit(session, SimpleNamespace(median=1000.0))
