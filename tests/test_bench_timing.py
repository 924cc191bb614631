"""bench_timing: statistics, the stop hook, event attribution, timers behind fakes (CPU only)."""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from types import SimpleNamespace

import pytest
import torch

from fi_attn_bench.results.schema import OPTIONAL_COLUMN_NAMES
from fi_attn_bench.timing import l2 as tl2
from fi_attn_bench.timing import loop as tloop
from fi_attn_bench.timing import options as topts
from fi_attn_bench.timing import queue as tqueue
from fi_attn_bench.timing import statistics as tstats
from fi_attn_bench.timing import timers
from fi_attn_bench.timing import trace as ttrace

# ---------------------------------------------------------------- Measurement


def test_measurement_statistics():
    m = tstats.Measurement((5.0, 1.0, 3.0, 2.0, 4.0), "profiler", "cold", ("k",))
    assert m.median == 3.0
    assert (m.min, m.q1, m.q3, m.max) == (1.0, 2.0, 4.0, 5.0)
    assert m.noise_pct == pytest.approx(2.0 / 3.0 * 100)


def test_measurement_even_count_interpolates():
    m = tstats.Measurement((1.0, 2.0, 3.0, 4.0), "events", "warm")
    assert m.median == pytest.approx(2.5)
    assert m.q1 == pytest.approx(1.75)
    assert m.q3 == pytest.approx(3.25)


def test_measurement_single_sample_has_unknown_noise():
    m = tstats.Measurement((0.25,), "wall", "warm")
    assert (m.median, m.q1, m.q3) == (0.25, 0.25, 0.25) and math.isnan(m.noise_pct)


def test_measurement_timed_ms_counts_every_run():
    assert tstats.Measurement((1.0, 2.0), "events", "cold").timed_ms == 3.0
    assert tstats.Measurement((1.0, 2.0), "cuda_graph", "warm", runs_per_sample=4).timed_ms == 12.0


def test_measurement_is_immutable_and_validated():
    m = tstats.Measurement((1.0,), "wall", "warm")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.samples = (2.0,)
    with pytest.raises(topts.TimingError):
        tstats.Measurement((), "wall", "warm")
    with pytest.raises(topts.TimingError):
        tstats.Measurement((1.0, float("nan")), "wall", "warm")


def test_measurement_columns_are_registered():
    m = tstats.Measurement((1.0, 2.0, 3.0), "profiler", "cold", ("a", "b"))
    columns = m.columns()
    assert set(columns) <= set(OPTIONAL_COLUMN_NAMES)
    assert columns["samples"] == 3
    assert columns["kernels"] == "a;b"
    assert columns["time_min_ms"] == 1.0 and columns["time_max_ms"] == 3.0
    assert "timer" not in columns and "l2" not in columns  # the sweep writes them, from its timer


# ---------------------------------------------------------------- the stop hook and the loop


def test_should_stop_rules():
    options = topts.TimingOptions(
        min_time_ms=0.0, min_samples=10, noise_target_pct=1.0, max_time_s=2.0
    )
    quiet = [1.0] * 10
    assert tloop.should_stop(quiet, 0.1, options)
    assert not tloop.should_stop(quiet[:9], 0.1, options)  # too few
    noisy = [1.0, 1.1] * 5
    assert not tloop.should_stop(noisy, 0.1, options)
    assert tloop.should_stop(noisy, 2.0, options)  # budget spent
    assert not tloop.should_stop([], 5.0, options)


def test_median_ci_rule_lets_many_jittery_samples_stop():
    jittery = [1.0, 1.03] * 500  # 3% per-call spread that no number of samples removes
    spread = topts.TimingOptions(
        min_time_ms=0.0, min_samples=10, noise_target_pct=1.0, stop_rule="spread"
    )
    median_ci = topts.TimingOptions(
        min_time_ms=0.0, min_samples=10, noise_target_pct=1.0, stop_rule="median_ci"
    )
    assert not tloop.should_stop(jittery, 0.1, spread)
    assert tloop.should_stop(jittery, 0.1, median_ci)
    assert not tloop.should_stop(jittery[:10], 0.1, median_ci)  # 1.57 x 3% / sqrt(10) > 1%
    assert tstats.stop_noise_pct(jittery, "median_ci") == pytest.approx(
        1.57 * tstats.stop_noise_pct(jittery) / math.sqrt(1000)
    )


def test_timing_options_reject_unknown_rules():
    with pytest.raises(ValueError, match="stop_rule"):
        topts.TimingOptions(stop_rule="mean")
    with pytest.raises(ValueError, match="attribution"):
        topts.TimingOptions(attribution="max")


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class ScriptedSession(timers.SessionDefaults):
    """Returns scripted batches; each batch advances the fake clock."""

    def __init__(self, batches, clock, seconds_per_batch=0.1):
        self.batches, self.clock, self.step = list(batches), clock, seconds_per_batch
        self.calls = []

    def batch(self, calls):
        self.calls.append(calls)
        self.clock.now += self.step
        samples = self.batches.pop(0) if len(self.batches) > 1 else self.batches[0]
        return tstats.Batch(tuple(samples), frozenset({"void k<int>(float*)"}))


class OneMsSession(timers.SessionDefaults):
    def batch(self, calls):
        return tstats.Batch((1.0,) * calls)


FAKE_TIMER = SimpleNamespace(name="profiler", l2="cold", flusher=None, set_up=lambda: None)


def test_loop_stops_once_noise_target_met():
    clock = FakeClock()
    noisy, quiet = [1.0, 2.0, 3.0, 4.0], [2.0] * 40
    session = ScriptedSession([noisy, noisy, quiet], clock)
    options = topts.TimingOptions(
        min_time_ms=0.0, min_samples=10, noise_target_pct=1.0, max_time_s=100
    )
    m = tloop.MeasureLoop(options, clock).run(session, 1.0, FAKE_TIMER)
    assert len(session.calls) == 3
    assert len(m.samples) == 48
    assert m.median == 2.0
    assert m.kernels == ("k<int>",)  # "void" and the parameter list dropped
    assert (m.timer, m.l2) == ("profiler", "cold")


def test_loop_stops_when_budget_runs_out():
    clock = FakeClock()
    session = ScriptedSession([[1.0, 2.0, 3.0, 4.0]], clock, seconds_per_batch=0.5)
    options = topts.TimingOptions(
        min_time_ms=0.0, min_samples=10, noise_target_pct=1.0, max_time_s=2.0
    )
    m = tloop.MeasureLoop(options, clock).run(session, 1.0, FAKE_TIMER)
    assert len(session.calls) == 4  # 0.5 s per batch, 2 s budget
    assert m.noise_pct > 1.0


def test_loop_sizes_batches_from_measured_time():
    clock = FakeClock()
    session = ScriptedSession([[0.01] * 5, [0.01] * 5, [0.01] * 100], clock, seconds_per_batch=0.01)
    options = topts.TimingOptions(
        min_time_ms=0.0,
        min_samples=200,
        batch_target_ms=25.0,
        max_batch_calls=1000,
        max_time_s=100,
    )
    loop = tloop.MeasureLoop(options, clock)
    loop.run(session, 5.0, FAKE_TIMER)  # warm-up estimate 5 ms: the first batch is small
    assert loop.batches[0] == options.min_batch_calls
    assert loop.batches[1] == 1000  # 25 ms / 0.01 ms, clamped


def test_batch_calls_respects_budget():
    options = topts.TimingOptions(batch_target_ms=25.0, min_batch_calls=10, max_batch_calls=1000)
    assert tloop.batch_calls(0.1, 10.0, 0.1, options) == 250
    assert tloop.batch_calls(100.0, 10.0, 100.0, options) == 10
    assert tloop.batch_calls(100.0, 0.3, 100.0, options) == 3  # only 3 calls fit the budget


def test_warm_up_absorbs_first_call_and_estimates():
    clock = FakeClock()
    costs = iter([500.0] + [1.0] * 1000)  # a JIT-compiling first call, then 1 ms calls
    calls = []

    def fn():
        calls.append(1)
        clock.now += next(costs) / 1e3

    options = topts.TimingOptions(warmup_min_calls=3, warmup_min_ms=50.0)
    estimate = tloop.warm_up(fn, lambda: None, options, clock)
    assert estimate == pytest.approx(1.0)
    assert 50 <= len(calls) <= 55


def test_warm_up_gives_up_after_max_time():
    clock = FakeClock()
    costs = iter([1.0, 2.0] * 10_000)  # never two similar calls in a row

    def fn():
        clock.now += next(costs) / 1e3

    options = topts.TimingOptions(warmup_min_ms=5.0, warmup_max_ms=100.0)
    tloop.warm_up(fn, lambda: None, options, clock)
    assert 0.1 <= clock.now <= 0.11


# ---------------------------------------------------------------- profiler events


def ev(name, start, duration):
    return ttrace.DeviceEvent(name, start, duration)


def interleaved(calls, flush=("flush_kernel",), kernels=(("attn", 40_000), ("merge", 4_000))):
    """[flush][attn][merge] x calls, back to back on one stream (times in ns)."""
    events, t = [], 0
    for _ in range(calls):
        for name in flush:
            events.append(ev(name, t, 60_000))
            t += 61_000
        for name, duration in kernels:
            events.append(ev(name, t, duration))
            t += duration + 1_000
    return events


CAL = ttrace.Calibration(
    call_count=2,
    flush_count=1,
    call_names=frozenset({"attn", "merge"}),
    flush_names=frozenset({"flush_kernel"}),
)


def test_attribution_sums_every_kernel_of_each_call():
    batch = ttrace.attribute_events(interleaved(3), 3, CAL)
    assert batch.samples_ms == pytest.approx((0.044,) * 3)
    assert batch.kernels == {"attn", "merge"}


def test_attribution_span_includes_gaps():
    batch = ttrace.attribute_events(interleaved(2), 2, CAL, attribution="span")
    assert batch.samples_ms == pytest.approx((0.045,) * 2)  # 40 + 1 gap + 4 us


def test_attribution_stream_counts_from_the_end_of_the_flush():
    batch = ttrace.attribute_events(interleaved(2), 2, CAL, attribution="stream")
    assert batch.samples_ms == pytest.approx((0.046,) * 2)  # 1 us after the flush + 45 us


def test_attribution_skips_the_queue_ahead_spin():
    spin = ev("spin_kernel", -500_000, 400_000)
    cal = dataclasses.replace(CAL, lead_count=1, lead_names=frozenset({"spin_kernel"}))
    for attribution, expected in (("sum", 0.044), ("stream", 0.046)):
        batch = ttrace.attribute_events([spin, *interleaved(3)], 3, cal, attribution=attribution)
        assert batch.samples_ms == pytest.approx((expected,) * 3) and batch.per_call
    two = ttrace.attribute_events([spin, *interleaved(2)], 2, cal)
    assert two.gpu_ms == pytest.approx(0.213)  # first flush start -> last merge end, no spin
    # a spin the profiler did not show changes nothing
    assert ttrace.attribute_events(interleaved(3), 3, cal).samples_ms == pytest.approx((0.044,) * 3)


def test_attribution_stream_warm_counts_from_the_previous_call():
    calls = interleaved(3, flush=())  # attn 40 us, 1 us gap, merge 4 us, 1 us gap, ...
    cal = ttrace.Calibration(2, 0, frozenset({"attn", "merge"}), lead_count=1)
    spin = ev("spin_kernel", -3_000, 1_000)  # ends 2 us before the first call
    batch = ttrace.attribute_events([spin, *calls], 3, cal, attribution="stream")
    assert batch.samples_ms == pytest.approx((0.047, 0.046, 0.046))
    # without a predecessor the first call falls back to its span
    nolead = ttrace.attribute_events(calls, 3, cal, attribution="stream")
    assert nolead.samples_ms == pytest.approx((0.045, 0.046, 0.046))


def test_queue_ahead_spins_for_the_cpus_lead_only():
    queue = tqueue.QueueAhead(topts.TimingOptions(queue_ahead_min_ms=0.05, queue_ahead_max_ms=20.0))
    # first batch: the warm-up's estimate stands in for the host's time per call
    # lead 100 x (0.1 - 0.06), the first call's launch twice, the floor
    assert queue.spin_ms(100, gpu_ms_per_call=0.06, fallback_host_ms=0.1) == pytest.approx(4.25)
    queue.host_ms_per_call = 0.03  # the GPU is slower than the CPU: no lead, the first launch
    assert queue.spin_ms(100, 0.06, 0.1) == pytest.approx(0.11)
    queue.host_ms_per_call = 1.0
    assert queue.spin_ms(1000, 0.06, 0.1) == pytest.approx(20.0)  # capped


def test_attribution_is_positional_not_by_name():
    # run() launches a kernel with the flush kernel's name (e.g. a FillFunctor memset)
    kernels = (("flush_kernel", 10_000), ("attn", 100_000))
    events = interleaved(2, kernels=kernels)
    cal = ttrace.Calibration(2, 1, frozenset({"flush_kernel", "attn"}), frozenset({"flush_kernel"}))
    batch = ttrace.attribute_events(events, 2, cal)
    assert batch.samples_ms == pytest.approx((0.110, 0.110))


def test_attribution_unsorted_input_is_sorted_by_start():
    events = interleaved(2)
    batch = ttrace.attribute_events(list(reversed(events)), 2, CAL)
    assert batch.samples_ms == pytest.approx((0.044, 0.044))


def test_attribution_pattern_restricts_counted_kernels():
    batch = ttrace.attribute_events(interleaved(2), 2, CAL, pattern=re.compile("attn"))
    assert batch.samples_ms == pytest.approx((0.040, 0.040))
    assert batch.kernels == {"attn"}


def test_attribution_pattern_matching_nothing_fails_with_names_seen():
    with pytest.raises(topts.NoKernelCaptured, match="attn"):
        ttrace.attribute_events(interleaved(2), 2, CAL, pattern=re.compile("NoSuchKernel"))


def test_attribution_uneven_count_falls_back_to_batch_mean():
    events = interleaved(3)[:-1]  # the last merge kernel is missing
    batch = ttrace.attribute_events(events, 3, CAL)
    assert batch.samples_ms == pytest.approx(((3 * 0.044 - 0.004) / 3,))
    assert not batch.per_call and ttrace.attribute_events(interleaved(3), 3, CAL).per_call


def test_attribution_fallback_refuses_ambiguous_flush_names():
    events = interleaved(3, flush=("same",), kernels=(("same", 5_000),))[:-1]
    cal = ttrace.Calibration(1, 1, frozenset({"same"}), frozenset({"same"}))
    with pytest.raises(topts.TimingError, match="cannot attribute"):
        ttrace.attribute_events(events, 3, cal)


def test_attribution_without_any_event_is_no_kernel():
    with pytest.raises(topts.NoKernelCaptured):
        ttrace.attribute_events([], 2, ttrace.Calibration(call_count=1))


class KinetoLike:
    def __init__(self, name, activity, start, duration, device=torch.autograd.DeviceType.CUDA):
        self._values = (name, activity, start, duration, device)

    def name(self):
        return self._values[0]

    def activity_type(self):
        return self._values[1]

    def start_ns(self):
        return self._values[2]

    def duration_ns(self):
        return self._values[3]

    def device_type(self):
        return self._values[4]


def test_kineto_events_keep_kernels_memsets_memcpys_only():
    raw = [
        KinetoLike("k2", "kernel", 300, 10),
        KinetoLike("aten::mul", "cpu_op", 0, 50, torch.autograd.DeviceType.CPU),
        KinetoLike("Memset (Device)", "gpu_memset", 100, 5),
        KinetoLike("cudaStreamSynchronize", "cuda_sync", 150, 5),
        KinetoLike("my_range", "gpu_user_annotation", 90, 500),
        KinetoLike("Memcpy DtoD", "gpu_memcpy", 200, 7),
    ]
    events = ttrace.device_events_from_kineto(raw)
    assert [e.name for e in events] == ["Memset (Device)", "Memcpy DtoD", "k2"]


def test_function_events_fallback():
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU

    def fe(name, device, start_us, elapsed_us, annotation=False):
        time_range = SimpleNamespace(start=start_us, elapsed_us=lambda: elapsed_us)
        return SimpleNamespace(
            name=name, device_type=device, time_range=time_range, is_user_annotation=annotation
        )

    raw = [
        fe("b", cuda, 5.0, 1.0),
        fe("op", cpu, 0.0, 9.0),
        fe("a", cuda, 1.0, 2.0),
        fe("ann", cuda, 0.5, 9.0, True),
    ]
    events = ttrace.device_events_from_function_events(raw)
    assert [(e.name, e.start_ns, e.duration_ns) for e in events] == [
        ("a", 1000, 2000),
        ("b", 5000, 1000),
    ]


def test_extract_prefers_kineto_results():
    prof = SimpleNamespace(
        profiler=SimpleNamespace(
            kineto_results=SimpleNamespace(events=lambda: [KinetoLike("k", "kernel", 1, 2)])
        )
    )
    assert ttrace.extract_device_events(prof) == [ev("k", 1, 2)]


@pytest.mark.parametrize(
    ("raw", "short"),
    [
        ("PersistentVariableLengthMergeStatesKernel", "PersistentVariableLengthMergeStatesKernel"),
        (
            "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 4u, 8u, 16u, 1u, 8u, flashinfer::DefaultAttention<false, false, false, false>, flashinfer::BatchDecodeParams<__half, __half, __half, int> >(flashinfer::BatchDecodeParams<__half, __half, __half, int>)",
            "flashinfer::BatchDecodeWithPagedKVCacheKernel<…>",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::Half>, std::array<char*, 1ul> >(int, at::native::FillFunctor<c10::Half>, std::array<char*, 1ul>)",
            "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<…>, std::array<…> >",
        ),
    ],
)
def test_shorten_kernel_name(raw, short):
    assert ttrace.shorten_kernel_name(raw) == short


# ---------------------------------------------------------------- L2 and the profiler timer


def test_l2_flush_bytes_from_device_and_fallback():
    size, note = tl2.l2_flush_bytes(SimpleNamespace(L2_cache_size=60 * 2**20))
    assert size == 120 * 2**20 and "reported" in note
    size, note = tl2.l2_flush_bytes(SimpleNamespace())
    assert size == 2 * tl2.FALLBACK_L2_BYTES and "no L2 size" in note
    assert tl2.l2_flush_bytes(SimpleNamespace(L2_cache_size=0))[0] == 2 * tl2.FALLBACK_L2_BYTES


@pytest.fixture(autouse=True)
def marked_events(monkeypatch):
    """CUDA events that write "event" into the trace of the profiler fakes below."""
    log = []

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self, stream=None):
            log.append("event")

        def elapsed_time(self, end):
            return 0.5  # the provisional (events) sample

    monkeypatch.setattr(torch.cuda, "Event", Event)
    return log


def make_profiler(call_kernels, cold=True, pattern=None):
    """A ProfilerTimer whose profiler records a scripted kernel list per call and flush."""
    trace = []

    def record_flush():
        trace.append("flush")

    def profile(body, sync):
        trace.clear()
        body()
        events, t = [], 0
        for item in trace:
            kernels = [("flush_kernel", 50_000)] if item == "flush" else call_kernels
            for name, duration in kernels:
                events.append(ev(name, t, duration))
                t += duration + 500
        return events

    options = topts.TimingOptions(
        timer="profiler", l2="cold" if cold else "warm", kernel_pattern=pattern
    )
    timer = timers.ProfilerTimer(
        options, torch.device("cpu"), SimpleNamespace(flush=record_flush), profile=profile
    )
    timer.sync = lambda: None
    return timer, trace


def recorded(session, *calls):
    """Batches of ``calls`` under one recording, as MeasureLoop runs them."""
    provisional = []
    batches = session.record(lambda: provisional.extend(session.batch(c) for c in calls))
    # the fake events read 0.5 ms around each [flush] run(); the flush's calibrated time is
    # taken off
    expected = 0.5 - session.flush_ms
    assert all(
        b.samples_ms == pytest.approx((expected,) * c)
        for b, c in zip(provisional, calls, strict=True)
    )
    return batches


def test_profiler_timer_counts_all_kernels_of_each_call():
    timer, trace = make_profiler([("fill", 11_000), ("attn", 100_000)])
    session = timer.open(lambda: trace.append("call"), 0.1)
    first, second = recorded(session, 4, 2)
    # cold L2 -> "auto" attribution is the stream time: the 0.5 us gap after the flush,
    # 11 us, the 0.5 us gap between run()'s kernels, 100 us
    assert first.samples_ms == pytest.approx((0.112,) * 4)
    assert second.samples_ms == pytest.approx((0.112,) * 2)
    assert first.kernels == {"fill", "attn"} and first.per_call


def test_profiler_timer_cold_batch_records_no_event_between_flush_and_run(marked_events):
    # an event record there costs the GPU 3-4 us before run()'s first kernel (H200)
    timer, trace = make_profiler([("attn", 20_000)])
    session = timer.open(lambda: trace.append("call"), 0.1)
    marked_events.clear()
    real_flush = timer.flusher.flush
    timer.flusher.flush = lambda: (real_flush(), marked_events.append("flush"))
    session.fn = lambda: marked_events.append("run")
    session.batch(2)
    assert marked_events == ["event"] + ["flush", "run", "event"] * 2


def test_events_timer_cold_batch_brackets_each_call_with_its_own_pair(marked_events):
    flushes = SimpleNamespace(flush=lambda: marked_events.append("flush"))
    flushes.duration_ms = lambda: 0.05
    timer = timers.EventsTimer(topts.TimingOptions(timer="events"), torch.device("cpu"), flushes)
    timer.sync = lambda: None
    session = timer.open(lambda: marked_events.append("run"), 0.1)
    marked_events.clear()
    batch = session.batch(2)
    assert marked_events == ["flush", "event", "run", "event"] * 2
    assert batch.samples_ms == (0.5, 0.5)  # the pair's reading, the flush outside it


def test_event_chain_pairs_consecutive_distinct_events():
    pool = tqueue.EventPool()
    for calls in (1, 2, 5):
        pairs = tqueue.enqueue_chain(lambda: None, calls, pool=pool)
        assert len(pairs) == calls
        assert all(pairs[i][1] is pairs[i + 1][0] for i in range(calls - 1))
        flat = [pairs[0][0]] + [end for _, end in pairs]
        assert len({id(e) for e in flat}) == calls + 1


def test_recording_of_several_batches_is_split_at_each_batchs_spin():
    spin = ("spin_kernel", 400_000)
    cal = dataclasses.replace(CAL, lead_count=1, lead_names=frozenset({"spin_kernel"}))
    events, t = [], 0
    for calls in (3, 2):
        events.append(ev(*spin[:1], t, spin[1]))
        t += spin[1] + 1_000
        events += [e._replace(start_ns=e.start_ns + t) for e in interleaved(calls)]
        t = events[-1].end_ns + 1_000
    batches = ttrace.attribute_recording(events, [3, 2], cal, attribution="stream")
    assert [b.samples_ms for b in batches] == [
        pytest.approx((0.046,) * 3),
        pytest.approx((0.046,) * 2),
    ]
    assert all(b.per_call for b in batches)
    # one event lost: no way to split by call; one mean sample for the whole recording
    (mean,) = ttrace.attribute_recording(events[:-1], [3, 2], cal)
    assert not mean.per_call and len(mean.samples_ms) == 1


def test_measure_loop_reports_the_recordings_samples_not_the_provisional_ones():
    class Recording(timers.SessionDefaults):
        def __init__(self):
            self.calls = []

        def record(self, loop):
            loop()
            return self.result()

        def batch(self, calls):
            self.calls.append(calls)
            return tstats.Batch((9.0,) * calls)  # what the stop hook sees

        def result(self):
            return [tstats.Batch((1.0,) * c, frozenset({"k"}), gpu_ms=2.0 * c) for c in self.calls]

    options = topts.TimingOptions(min_time_ms=0.0, min_samples=10, max_time_s=100)
    m = tloop.MeasureLoop(options, FakeClock()).run(Recording(), 1.0, FAKE_TIMER)
    assert set(m.samples) == {1.0} and m.kernels == ("k",)
    assert m.batch_gpu_ms == pytest.approx(2.0 * len(m.samples))


def test_measure_loop_books_profiler_start_stop_and_reading_as_readout():
    clock = FakeClock()

    class Recording(timers.SessionDefaults):
        def record(self, loop):
            clock.now += 0.25  # profiler start
            loop()
            clock.now += 0.5  # profiler stop and trace reading
            return self.result()

        def batch(self, calls):
            clock.now += 0.1
            return tstats.Batch((1.0,) * calls)

        def result(self):
            clock.now += 0.125  # attribution
            return [tstats.Batch((1.0,) * 10)]

    options = topts.TimingOptions(min_time_ms=0.0, min_samples=10, max_time_s=100)
    loop = tloop.MeasureLoop(options, clock)
    loop.run(Recording(), 1.0, FAKE_TIMER)
    assert loop.phases.seconds == pytest.approx({"timing": 0.1, "readout": 0.875})


@pytest.mark.parametrize(
    ("attribution", "l2", "effective"),
    [
        ("auto", "cold", "stream"),
        ("auto", "warm", "sum"),
        ("sum", "cold", "sum"),
        ("span", "warm", "span"),
    ],
)
def test_auto_attribution_follows_the_l2_mode(attribution, l2, effective):
    options = topts.TimingOptions(timer="profiler", l2=l2, attribution=attribution)
    assert options.effective_attribution == effective


def test_profiler_timer_warm_l2_has_no_flush():
    timer, trace = make_profiler([("attn", 20_000)], cold=False)
    session = timer.open(lambda: trace.append("call"), 0.1)
    (batch,) = recorded(session, 3)
    assert batch.samples_ms == pytest.approx((0.02,) * 3)
    assert "flush" not in trace


@pytest.mark.parametrize("cold", [True, False])
def test_profiler_timer_no_kernel_is_an_error(cold):
    timer, trace = make_profiler([], cold=cold)
    session = timer.open(lambda: trace.append("call"), 0.1)
    with pytest.raises(topts.NoKernelCaptured, match="no GPU kernel for run"):
        recorded(session, 3, 2)


def test_profiler_timer_opens_a_case_without_a_profiler_session_of_its_own():
    timer, trace = make_profiler([("attn", 20_000), ("merge", 3_000)])
    sessions = []
    original = timer.profile
    timer.profile = lambda body, sync: sessions.append(body) or original(body, sync)
    timer.open(lambda: trace.append("call"), 0.1)  # the flush calibration: once per timer
    sessions.clear()
    session = timer.open(lambda: trace.append("call"), 0.1)
    assert sessions == [] and session.calibration.call_count is None
    (batch,) = recorded(session, 4)
    assert len(sessions) == 1 and batch.per_call and batch.kernels == {"attn", "merge"}


def test_call_layout_is_inferred_from_the_recording():
    spin = ("spin_kernel", 400_000)
    cal = ttrace.Calibration(
        None, 1, flush_names=frozenset({"flush_kernel"}), lead_count=1,
        lead_names=frozenset({"spin_kernel"}),
    )  # fmt: skip
    events, t = [], 0
    for calls in (3, 2):
        events.append(ev(spin[0], t, spin[1]))
        t += spin[1] + 1_000
        events += [e._replace(start_ns=e.start_ns + t) for e in interleaved(calls)]
        t = events[-1].end_ns + 1_000
    inferred = ttrace.infer_call_layout(events, [3, 2], cal)
    assert inferred.call_count == 2 and inferred.call_names == {"attn", "merge"}
    batches = ttrace.attribute_recording(events, [3, 2], cal, attribution="stream")
    assert [b.samples_ms for b in batches] == [
        pytest.approx((0.046,) * 3),
        pytest.approx((0.046,) * 2),
    ]
    # a build whose profiler did not show the spin: the count still fits without leads
    no_spin = [e for e in events if e.name != "spin_kernel"]
    assert ttrace.infer_call_layout(no_spin, [3, 2], cal).call_count == 2
    # one event lost: no count fits; one mean sample over everything but spin and flush
    assert ttrace.infer_call_layout(events[:-1], [3, 2], cal) is None
    (mean,) = ttrace.attribute_recording(events[:-1], [3, 2], cal)
    assert not mean.per_call and mean.samples_ms == pytest.approx(((5 * 0.044 - 0.004) / 5,))


def test_profiler_timer_without_a_visible_flush_fails_before_timing():
    timer, trace = make_profiler([("attn", 20_000)])
    original = timer.profile
    timer.profile = lambda body, sync: [e for e in original(body, sync) if e.name != "flush_kernel"]
    with pytest.raises(topts.NoKernelCaptured, match="no GPU kernel of the L2 flush"):
        timer.open(lambda: trace.append("call"), 0.1)


def test_make_timer_on_cpu_is_wall_clock():
    timer = timers.make_timer(topts.TimingOptions(), torch.device("cpu"), print)
    assert (timer.name, timer.l2) == ("wall", "warm")
    batch = timer.open(lambda: None, 0.0).batch(5)
    assert len(batch.samples_ms) == 5 and all(s >= 0 for s in batch.samples_ms)


def test_measure_end_to_end_with_wall_timer():
    m = tloop.measure(
        lambda: sum(range(1000)),
        timers.WallTimer(),
        topts.TimingOptions(min_time_ms=0.0, max_time_s=0.2, warmup_min_ms=5),
    )
    assert m.timer == "wall" and len(m.samples) >= 1 and m.median > 0


def test_kineto_events_of_a_build_with_other_activity_names():
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    raw = [
        KinetoLike("mc_kernel_a", "mc_kernel", 10, 5, cuda),
        KinetoLike("aten::mul", "cpu_op", 0, 50, cpu),
        KinetoLike("sync", "cuda_sync", 20, 5, cuda),
        KinetoLike("range", "gpu_user_annotation", 5, 50, cuda),
    ]
    assert [e.name for e in ttrace.device_events_from_kineto(raw)] == ["mc_kernel_a"]


class KinetoLikeTorch211:
    """torch 2.11's event: no activity_type(); each question it is asked is counted."""

    def __init__(self, name, start, duration, device, annotation=False):
        self._values = (name, start, duration, device, annotation)
        self.asked: list[str] = []

    def _answer(self, what, index):
        self.asked.append(what)
        return self._values[index]

    def name(self):
        return self._answer("name", 0)

    def start_ns(self):
        return self._answer("start_ns", 1)

    def duration_ns(self):
        return self._answer("duration_ns", 2)

    def device_type(self):
        return self._answer("device_type", 3)

    def is_user_annotation(self):
        return self._answer("is_user_annotation", 4)


def test_kineto_events_of_a_build_without_activity_names():
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    launch = KinetoLikeTorch211("cudaLaunchKernel", 0, 3, cpu)
    raw = [
        KinetoLikeTorch211("decode_kernel", 20, 5, cuda),
        launch,
        KinetoLikeTorch211("range", 5, 50, cuda, annotation=True),
        KinetoLikeTorch211("fill_kernel", 10, 4, cuda),
    ]
    events = ttrace.device_events_from_kineto(raw)
    assert [(e.name, e.start_ns, e.duration_ns) for e in events] == [
        ("fill_kernel", 10, 4),
        ("decode_kernel", 20, 5),
    ]
    assert launch.asked == ["device_type"]  # a CPU-side event costs one question


def test_real_profiler_results_parse_and_hold_no_device_work_on_cpu():
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(64).sum()
    assert (
        ttrace.extract_device_events(prof) == []
    )  # the real kineto API; CPU ops are not device work


def test_loop_budgets_graph_replays_by_runs_per_sample():
    clock = FakeClock()
    session = ScriptedSession([[0.01] * 10], clock, seconds_per_batch=0.01)
    session.runs_per_sample = 50
    options = topts.TimingOptions(
        min_time_ms=0.0, min_samples=10, batch_target_ms=25.0, max_time_s=100
    )
    loop = tloop.MeasureLoop(options, clock)
    m = loop.run(session, 0.01, FAKE_TIMER)
    assert loop.batches == [50]  # 25 ms / (0.01 ms x 50 runs per replay)
    assert m.runs_per_sample == 50 and m.timed_ms == pytest.approx(10 * 0.01 * 50)


def test_attribution_misaligned_groups_fall_back_to_batch_mean():
    # the right number of events, but the groups do not line up with [flush][attn, merge]
    events = interleaved(2)
    events[2] = ev("attn", events[2].start_ns, 40_000)  # call 1 launched attn twice
    events[3] = ev("merge", events[3].start_ns, 4_000)  # and call 2's flush is missing
    batch = ttrace.attribute_events(events, 2, CAL)
    assert batch.samples_ms == pytest.approx(((40 + 40 + 4 + 40 + 4) / 1000 / 2,))


def test_loop_records_when_a_batch_could_not_be_split_per_call():
    class MeanSession(timers.SessionDefaults):
        def batch(self, calls):
            return tstats.Batch((1.0,), frozenset({"k"}), per_call=False)

    options = topts.TimingOptions(min_time_ms=0.0, min_samples=3, max_time_s=100)
    m = tloop.MeasureLoop(options, FakeClock()).run(MeanSession(), 1.0, FAKE_TIMER)
    assert len(m.samples) == 3 and not m.per_call


def test_stop_hook_waits_until_the_samples_add_up_to_the_minimum_gpu_time():
    options = topts.TimingOptions(min_samples=3, noise_target_pct=1.0, min_time_ms=100.0)
    assert not tloop.should_stop([1.0] * 99, 1.9, options)  # 99 ms timed, whatever the wall
    assert tloop.should_stop([1.0] * 100, 0.001, options)  # 100 ms timed, however short the wall
    assert tloop.should_stop([2.0] * 50, 0.001, options)
    # a CUDA-graph sample is the mean of several runs: its timed GPU time counts them all
    assert not tloop.should_stop([1.0] * 25, 0.001, options)
    assert tloop.should_stop([1.0] * 25, 0.001, options, runs_per_sample=4)


def test_stop_hook_stops_waiting_for_the_minimum_time_once_enough_samples_are_in():
    options = topts.TimingOptions(
        min_samples=3, noise_target_pct=1.0, min_time_ms=300.0, enough_samples=1000
    )
    assert not tloop.should_stop([0.01] * 999, 0.05, options)
    assert tloop.should_stop([0.01] * 1000, 0.05, options)
    noisy = [0.01, 0.02] * 500  # enough samples, but the noise target is not met
    assert not tloop.should_stop(noisy, 0.05, options)


def test_calls_longer_than_a_samples_host_cost_always_wait_for_the_minimum_time():
    options = topts.TimingOptions(
        min_samples=3, min_time_ms=500.0, enough_samples=1000, enough_samples_below_ms=0.1
    )
    assert tloop.should_stop([0.09] * 1000, 0.05, options)  # 90 ms of GPU time: samples cost more
    assert not tloop.should_stop([0.25] * 1000, 0.05, options)  # 250 ms: waits for 500 ms
    assert not tloop.should_stop([0.25] * 1999, 0.05, options)
    assert tloop.should_stop([0.25] * 2000, 0.05, options)


def test_sustain_runs_back_to_back_calls_with_flushes_when_cold():
    trace = []
    timer = SimpleNamespace(
        name="profiler",
        l2="cold",
        flusher=SimpleNamespace(flush=lambda: trace.append("flush")),
        sync=lambda: trace.append("sync"),
    )
    clock = FakeClock()

    def call():
        clock.now += 0.004  # the GPU's pace: 4 ms per call (the estimate said 2 ms)
        trace.append("call")

    options = topts.TimingOptions(sustain_ms=30.0)
    tloop.sustain(call, timer, options, estimate_ms=2.0, clock=clock)
    # chunks of 10 ms / 2 ms = 5 calls, synchronized, until 30 ms of wall time have passed
    assert trace == (["flush", "call"] * 5 + ["sync"]) * 2


def test_sustain_is_a_no_op_on_the_cpu():
    calls = []
    tloop.sustain(
        lambda: calls.append(1), timers.WallTimer(), topts.TimingOptions(), estimate_ms=1.0
    )
    assert calls == []


def test_measure_checks_then_sustains_then_times():
    clock, trace = FakeClock(), []

    def run():
        clock.now += 0.001  # 1 ms per call
        trace.append("call")

    class GpuTimer(timers.TimerDefaults):
        name, l2 = "profiler", "warm"

        def sync(self):
            pass

        def open(self, fn, estimate_ms):
            trace.append("open")
            return OneMsSession()

    options = topts.TimingOptions(
        sustain_ms=10.0, warmup_min_ms=0.0, min_time_ms=0.0, min_samples=10
    )
    phases = tloop.PhaseClock(clock=clock)
    m = tloop.measure(run, GpuTimer(), options, clock, lambda: trace.append("check"), phases)
    check, opened = trace.index("check"), trace.index("open")
    assert 0 < check < opened and trace[check + 1 : opened] == ["call"] * 10  # 10 ms / 1 ms
    assert m.median == 1.0 and list(phases.seconds) == [
        "set-up", "warm-up", "check", "sustain", "calibrate", "timing", "readout"
    ]  # fmt: skip
    assert phases.seconds["sustain"] == pytest.approx(0.010)


@pytest.mark.parametrize(
    ("chunks", "elapsed", "steady"),
    [
        ([1.0, 1.0, 1.0], 40.0, False),  # settled, but before sustain_min_ms
        ([1.0, 1.0, 1.0], 60.0, True),
        ([1.0, 1.0], 60.0, False),  # too few chunks to judge
        ([0.90, 0.95, 1.0], 60.0, False),  # still slowing down (clocks dropping)
        ([0.90, 0.95, 1.0, 1.004, 0.998], 90.0, True),
        ([0.90, 0.95, 1.0], 200.0, True),  # sustain_ms spent: stop regardless
    ],
)
def test_sustain_is_steady_when_the_last_chunks_agree(chunks, elapsed, steady):
    options = topts.TimingOptions(sustain_ms=200.0, sustain_min_ms=50.0, sustain_steady_pct=1.0)
    assert tloop.is_steady(chunks, elapsed, options) is steady


def test_sustain_stops_once_steady_and_runs_the_full_time_otherwise(monkeypatch):
    clock = FakeClock()
    chunk_times = iter([])

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self, stream=None):
            pass

        def elapsed_time(self, end):
            return next(chunk_times)

    monkeypatch.setattr(torch.cuda, "Event", Event)

    def run():
        clock.now += 0.001

    timer = SimpleNamespace(name="events", l2="warm", sync=lambda: None)
    options = topts.TimingOptions(sustain_ms=200.0, sustain_min_ms=50.0)
    chunk_times = iter([10.0] * 100)  # 10 ms chunks of 1 ms calls, all alike
    assert tloop.sustain(run, timer, options, 1.0, clock) == 5  # 50 ms: the minimum
    clock.now, chunk_times = 0.0, iter([10.0 + 0.2 * i for i in range(100)])  # drifting
    assert tloop.sustain(run, timer, options, 1.0, clock) == 20  # the whole 200 ms


def test_measure_loop_runs_without_cyclic_gc_and_restores_it():
    import gc

    seen = []

    class Session(timers.SessionDefaults):
        def batch(self, calls):
            seen.append(gc.isenabled())
            return tstats.Batch((1.0,) * calls)

    options = topts.TimingOptions(min_time_ms=0.0, min_samples=10, max_time_s=100)
    assert gc.isenabled()
    tloop.MeasureLoop(options, FakeClock()).run(Session(), 1.0, FAKE_TIMER)
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    try:
        tloop.MeasureLoop(options, FakeClock()).run(Session(), 1.0, FAKE_TIMER)
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()


@pytest.mark.parametrize(
    ("gaps_us", "starved"),
    [
        ([], 0),
        ([2] * 10, 0),
        ([2, 3, 2, 4, 2, 3, 2, 11, 2, 3], 0),  # 9 us past the median: launch jitter, not a wait
        ([2] * 9 + [40], 1),
        ([2] * 6 + [30, 35, 60, 80], 4),
    ],
)
def test_count_starved_calls_by_their_launch_gap(gaps_us, starved):
    assert ttrace.count_starved([g * 1000 for g in gaps_us]) == starved


def test_stream_samples_that_waited_for_their_launch_are_counted():
    events = interleaved(4)  # [flush, attn, merge] x 4, 1 us gaps
    late = 30_000  # call 3's kernels start 30 us late: the CPU had not launched them
    events = events[:7] + [e._replace(start_ns=e.start_ns + late) for e in events[7:]]
    stream = ttrace.attribute_events(events, 4, CAL, attribution="stream")
    assert stream.starved == 1 and stream.samples_ms[2] == pytest.approx(0.046 + 0.030)
    assert (
        ttrace.attribute_events(events, 4, CAL, attribution="sum").starved == 0
    )  # waits not counted
    m = tloop._measurement([stream, stream], FAKE_TIMER, 1)
    assert m.starved_calls == 2 and m.starved_fraction == pytest.approx(0.25)


def test_timer_is_set_up_before_warm_up_not_between_sustain_and_timing():
    trace = []

    class Timer(timers.TimerDefaults):
        name, l2 = "profiler", "cold"

        def set_up(self):
            trace.append("set-up")

        def sync(self):
            pass

        def open(self, fn, estimate_ms):
            trace.append("open")
            return OneMsSession()

    clock = FakeClock()

    def run():
        clock.now += 0.001
        trace.append("call")

    options = topts.TimingOptions(sustain_ms=1.0, warmup_min_ms=0.0, min_time_ms=0.0)
    tloop.measure(run, Timer(), options, clock)
    assert trace[0] == "set-up" and trace.count("set-up") == 1
    assert trace[trace.index("open") - 1] == "call"  # the last sustain call, then timing


def test_profiler_timer_set_up_runs_the_calibration_profiles_once():
    timer, trace = make_profiler([("attn", 20_000)])
    sessions = []
    original = timer.profile
    timer.profile = lambda body, sync: sessions.append(body) or original(body, sync)
    timer.set_up()
    first = len(sessions)
    timer.set_up()
    timer.open(lambda: trace.append("call"), 0.1)
    assert first >= 1 and len(sessions) == first  # the flush's (and the spin's, if any)


def test_drift_interval_sees_clock_stretches_that_the_samples_interval_misses():
    # 1000 calls: a 300-call stretch 13 % slower (like 1750 vs 1980 MHz) amid fast ones
    stretched = [1.0] * 300 + [1.13] * 300 + [1.0] * 400
    assert tstats.stop_noise_pct(stretched, "median_ci") < 1.0  # iid interval: 0.65 %, fooled
    # blocks of 200: medians 1, 1.065, 1.13, 1, 1 -> 2.776 x stdev / sqrt(5) / median
    medians = [1.0, 1.065, 1.13, 1.0, 1.0]
    expected = 2.776 * statistics.stdev(medians) / math.sqrt(5) / 1.0 * 100
    assert tstats.drift_ci_pct(stretched) == pytest.approx(expected)
    assert tstats.Measurement(tuple(stretched), "profiler", "cold").drift_pct == pytest.approx(
        expected
    )
    # it is reported, not a reason to sample on (v9: sampling on followed the slow clock)
    options = topts.TimingOptions(min_time_ms=0.0, noise_target_pct=1.0, max_time_s=2.0)
    assert tloop.should_stop(stretched, 0.1, options)


def test_drift_interval_ignores_jitter_between_single_calls():
    jittery = [1.0, 1.03] * 500  # every block holds the same mix
    assert tstats.drift_ci_pct(jittery) == pytest.approx(0.0)
    assert math.isnan(tstats.drift_ci_pct([1.0] * 4))  # fewer samples than blocks: no judgement
    assert math.isnan(tstats.Measurement((1.0,) * 4, "profiler", "cold").drift_pct)
