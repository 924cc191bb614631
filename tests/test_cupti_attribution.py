"""The CUPTI timer's attribution of activity records to calls, on stand-in records: overlapping
calls, missing records, records of other streams and of other processes (contexts)."""

from __future__ import annotations

import itertools
import re
from types import SimpleNamespace

import pytest
import torch

from fi_attn_bench.device import cupti
from fi_attn_bench.device.cupti import KERNEL, MARKER_BYTES, MEMSET, ActivityRecord
from fi_attn_bench.sweep import run_options
from fi_attn_bench.timing import selfcheck, timers
from fi_attn_bench.timing.activity import FlushLayout, batches_of, call_time_ms, split_calls
from fi_attn_bench.timing.options import NoKernelCaptured, TimingError, TimingOptions
from fi_attn_bench.timing.selfcheck import CheckStatus, ProbeCall, SelfCheckFailed

MAIN, SIDE = 7, 8  # stream ids
HERE, ELSEWHERE = 1, 2  # context ids


class Timeline:
    """A stand-in GPU and tracer: launches get correlation ids in order, and run on a clock
    the test moves; ``records`` is what CUPTI would deliver."""

    def __init__(self):
        self.correlation = itertools.count(1)
        self.clock_ns = 0
        self.records: list[ActivityRecord] = []

    def launch(self, name, duration_ns, *, kind=KERNEL, stream=MAIN, context=HERE, at=None, **kw):
        start = self.clock_ns if at is None else at
        record = ActivityRecord(
            kind, name, start, start + duration_ns, next(self.correlation), stream, context, 0, **kw
        )
        self.records.append(record)
        if at is None:
            self.clock_ns = record.end_ns + 100  # a launch gap of 100 ns
        return record

    def marker(self, value: int) -> None:
        self.launch("Memset (Device)", 1_000, kind=MEMSET, bytes=MARKER_BYTES, value=value % 256)

    def flush(self) -> None:
        self.launch("flush", 20_000)

    def call(self, *kernels) -> None:
        for name, ns in kernels:
            self.launch(name, ns)


FLUSH = FlushLayout(1, frozenset({"flush"}))


def _marked_calls(timeline: Timeline, calls: int, kernels, first: int = 0, flush=True) -> None:
    """One batch as the timer queues it: calls x (marker [flush] run()) + closing marker."""
    for index in range(calls):
        timeline.marker(first + index)
        if flush:
            timeline.flush()
        timeline.call(*kernels)
    timeline.marker(first + calls)


DECODE = (("decode", 40_000), ("merge", 3_600))


def test_each_call_gets_its_kernels_and_not_the_flush():
    timeline = Timeline()
    _marked_calls(timeline, 3, DECODE)
    found = split_calls(timeline.records, [3], flush=FLUSH)
    assert [call.names() for call in found] == [("decode", "merge")] * 3
    assert [len(call.flush) for call in found] == [1, 1, 1]
    sums = [call_time_ms(call, "sum") for call in found]
    assert sums == [pytest.approx(0.0436)] * 3
    # stream: from the flush's end: launch gap + decode + gap + merge
    assert call_time_ms(found[0], "stream") == pytest.approx((100 + 40_000 + 100 + 3_600) / 1e6)
    assert call_time_ms(found[0], "span") == pytest.approx((40_000 + 100 + 3_600) / 1e6)


def test_a_flush_that_is_not_where_it_should_be_is_an_error():
    timeline = Timeline()
    _marked_calls(timeline, 2, DECODE, flush=False)
    with pytest.raises(TimingError, match="are not the L2 flush's"):
        split_calls(timeline.records, [2], flush=FLUSH)


def test_warm_calls_time_from_their_marker():
    timeline = Timeline()
    _marked_calls(timeline, 2, DECODE, flush=False)
    found = split_calls(timeline.records, [2])
    assert call_time_ms(found[1], "stream") == pytest.approx((100 + 40_000 + 100 + 3_600) / 1e6)


def test_calls_that_overlap_in_time_are_told_apart_by_launch():
    """Call 1's kernel on the side stream runs before call 0's main kernel has finished:
    by time alone it would be call 0's."""
    timeline = Timeline()
    timeline.marker(0)
    slow = timeline.launch("main", 50_000)
    timeline.marker(1)
    timeline.launch("side", 5_000, stream=SIDE, at=slow.start_ns + 1_000)
    timeline.launch("main", 50_000)
    timeline.marker(2)
    found = split_calls(timeline.records, [2], same_work=False)
    assert found[0].names() == ("main",)
    assert found[1].names() == ("main", "side")


def test_records_of_other_streams_count_and_other_contexts_do_not():
    timeline = Timeline()
    for index in range(2):
        timeline.marker(index)
        timeline.launch("main", 10_000)
        timeline.launch("side", 4_000, stream=SIDE)
        timeline.launch("elsewhere", 9_999_000, context=ELSEWHERE)  # another process's work
    timeline.marker(2)
    found = split_calls(timeline.records, [2])
    assert [call.names() for call in found] == [("main", "side")] * 2
    assert call_time_ms(found[0], "sum") == pytest.approx(0.014)


def test_a_lost_marker_is_an_error_naming_it():
    timeline = Timeline()
    _marked_calls(timeline, 3, DECODE)
    del timeline.records[[r.kind for r in timeline.records].index(MEMSET)]
    with pytest.raises(TimingError, match="3 call markers, not the 4"):
        split_calls(timeline.records, [3], flush=FLUSH)


def test_markers_out_of_sequence_are_an_error():
    timeline = Timeline()
    _marked_calls(timeline, 2, DECODE, first=10)
    with pytest.raises(TimingError, match="call marker 0 of the recording holds 10, not 0"):
        split_calls(timeline.records, [2], first_value=0, flush=FLUSH)
    assert len(split_calls(timeline.records, [2], first_value=10, flush=FLUSH)) == 2


def test_a_marker_value_wraps_at_256():
    timeline = Timeline()
    _marked_calls(timeline, 3, DECODE, first=254)
    assert len(split_calls(timeline.records, [3], first_value=254, flush=FLUSH)) == 3


def test_a_lost_kernel_record_is_an_error_not_a_shorter_time():
    timeline = Timeline()
    _marked_calls(timeline, 3, DECODE)
    merges = [i for i, r in enumerate(timeline.records) if r.name == "merge"]
    del timeline.records[merges[1]]
    with pytest.raises(TimingError, match="timed call 1 launched 1 records"):
        split_calls(timeline.records, [3], flush=FLUSH)


def test_a_call_without_records_is_no_kernel_captured():
    timeline = Timeline()
    _marked_calls(timeline, 2, ())
    with pytest.raises(NoKernelCaptured, match="no GPU work between the markers of 2 of 2"):
        split_calls(timeline.records, [2], flush=FLUSH)


def test_a_memset_of_the_markers_size_inside_run_is_caught():
    timeline = Timeline()
    _marked_calls(timeline, 1, DECODE)
    marker = next(r for r in timeline.records if r.kind == MEMSET)
    timeline.records.insert(3, marker._replace(correlation_id=4, value=77))
    with pytest.raises(TimingError, match="call markers"):
        split_calls(timeline.records, [1], flush=FLUSH)


def test_batches_split_the_recording_and_keep_the_pattern():
    timeline = Timeline()
    _marked_calls(timeline, 2, DECODE)
    timeline.launch("queue-ahead spin", 50_000)  # before the next batch's first marker
    _marked_calls(timeline, 3, DECODE, first=3)
    found = split_calls(timeline.records, [2, 3], flush=FLUSH)
    batches = batches_of(found, [2, 3], "sum", re.compile("decode"))
    assert [len(b.samples_ms) for b in batches] == [2, 3]
    assert batches[0].samples_ms[0] == pytest.approx(0.04)
    assert batches[0].kernels == frozenset({"decode"})
    first, last = found[0].start_marker, found[1].end_marker
    assert batches[0].gpu_ms == pytest.approx((last.start_ns - first.end_ns) / 1e6)
    assert "queue-ahead spin" not in {r.name for call in found for r in call.records}
    with pytest.raises(NoKernelCaptured, match="kernels seen: decode; merge"):
        batches_of(found, [5], "sum", re.compile("nothing"))


# ---------------------------------------------------------------- the timer, stand-in tracer


class FakeTracer:
    def __init__(self, timeline: Timeline):
        self.timeline, self.started = timeline, None

    def start(self):
        self.started = len(self.timeline.records)

    def stop(self):
        return self.timeline.records[self.started :]


def _timer(timeline: Timeline, l2="warm") -> timers.CuptiTimer:
    options = TimingOptions(timer="cupti", l2=l2)
    timer = timers.CuptiTimer(
        options,
        torch.device("cpu"),
        SimpleNamespace(flush=timeline.flush, duration_ms=lambda: 0.02),
        tracer_factory=lambda: FakeTracer(timeline),
        marker_factory=lambda device: timeline.marker,
    )
    timer.sync = lambda: None
    return timer


@pytest.mark.parametrize("l2", ["warm", "cold"])
def test_sessions_number_their_markers_and_split_the_loop_into_batches(l2):
    timeline = Timeline()
    timer = _timer(timeline, l2)
    timer._open_tracer()
    assert timer.flush_layout() == (FLUSH if l2 == "cold" else FlushLayout())
    for _ in range(2):  # a second case's session starts its markers at 0 again
        session = timer.open(lambda: timeline.call(*DECODE), 0.05)

        def loop(session=session):
            for calls in (2, 3):
                session.calls.append(calls)
                for _ in range(calls):
                    session.fn()
                session.mark()

        batches = session.record(loop)
        assert [len(b.samples_ms) for b in batches] == [2, 3]
        # warm: the sum of run()'s kernels; cold: "stream", from the flush's end
        expected = 0.0436 if l2 == "warm" else 0.0438
        assert all(s == pytest.approx(expected) for b in batches for s in b.samples_ms)


def test_a_tracer_that_cannot_start_is_exit_2_naming_why():
    def unavailable():
        raise cupti.CuptiUnavailable("cupti.cupti cannot be imported (ModuleNotFoundError: x)")

    timer = timers.CuptiTimer(
        TimingOptions(timer="cupti", l2="warm"),
        torch.device("cpu"),
        SimpleNamespace(),
        tracer_factory=unavailable,
        marker_factory=lambda device: None,
    )
    with pytest.raises(SelfCheckFailed, match="--timer cupti cannot start: cupti.cupti cannot"):
        timer.self_check()


def _check(timeline: Timeline, late_side: bool = False):
    probe = ProbeCall(lambda: timeline.call(*DECODE), None, "decode stand-in")
    pending = []

    def two_streams():
        timeline.call(*DECODE)
        if late_side:
            pending.append(1)  # launched by a thread after the next call's marker
        else:
            timeline.launch("side mm", 3_000, stream=SIDE)

    def marker(value):
        timeline.marker(value)
        while pending:
            pending.pop()
            timeline.launch("side mm", 3_000, stream=SIDE)

    return selfcheck.check_cupti_attribution(
        probe, FakeTracer(timeline), marker, lambda: None, two_streams
    )


def test_the_attribution_check_passes_when_each_call_gets_its_own_records():
    result = _check(Timeline())
    assert result.status is CheckStatus.PASS, result.summary


def test_the_attribution_check_fails_on_work_attributed_to_the_wrong_call():
    result = _check(Timeline(), late_side=True)
    assert result.status is CheckStatus.FAIL
    assert "misattributed" in result.summary or "second stream" in result.summary


def test_cupti_is_the_default_only_where_it_imports_and_is_switched_on(monkeypatch):
    monkeypatch.setattr(run_options, "cupti_importable", lambda: True)
    monkeypatch.setattr(run_options, "CUPTI_IS_DEFAULT", True)
    assert run_options.default_gpu_timer() == "cupti"
    monkeypatch.setattr(run_options, "cupti_importable", lambda: False)
    assert run_options.default_gpu_timer() == "profiler"
    monkeypatch.setattr(run_options, "cupti_importable", lambda: True)
    monkeypatch.setattr(run_options, "CUPTI_IS_DEFAULT", False)
    assert run_options.default_gpu_timer() == "profiler"


def test_cupti_never_imports_on_metax(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0", raising=False)
    monkeypatch.setattr(torch.version, "maca", "3.7.0", raising=False)
    assert not cupti.cupti_importable()


def test_kernel_names_are_demangled_as_the_profiler_shows_them():
    name = "_ZN10flashinfer4demoILj8EEEvPf"
    assert cupti.demangle(name) == "void flashinfer::demo<8u>(float*)"
    assert cupti.demangle("Memset (Device)") == "Memset (Device)"


def test_the_stopwatch_times_one_call_from_its_records():
    """The integrity checks' single calls, timed as the sessions time theirs."""
    timeline = Timeline()
    timer = _timer(timeline)
    watch = timer.stopwatch()
    watch.start()
    timeline.call(*DECODE)
    timeline.launch("side", 4_000, stream=SIDE)
    watch.stop()
    assert watch.ms() == pytest.approx(0.0476)
