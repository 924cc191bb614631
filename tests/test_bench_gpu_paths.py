"""The GPU timers' code paths on the CPU: torch.cuda's events, streams and graphs faked.

A fake device timeline advances by a scripted duration per run() and per L2 flush; CUDA
events read it.  This checks what each timer counts (flush excluded, spin before warm
calls, graph replay divided by its runs), not the real device's behaviour.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from fi_attn_bench.timing import l2 as tl2
from fi_attn_bench.timing import loop as tloop
from fi_attn_bench.timing import options as topts
from fi_attn_bench.timing import timers


class Timeline:
    def __init__(self, run_ms=0.5, flush_ms=0.06):
        self.now, self.run_ms, self.flush_ms = 0.0, run_ms, flush_ms
        self.capture = None
        self.spins = 0

    def run(self):
        if self.capture is not None:
            self.capture.runs += 1
        else:
            self.now += self.run_ms


class FakeGraph:
    def __init__(self, timeline):
        self.timeline, self.runs = timeline, 0

    def replay(self):
        self.timeline.now += self.runs * self.timeline.run_ms


@pytest.fixture
def timeline(monkeypatch):
    line = Timeline()

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self, stream=None):
            self.t = line.now

        def elapsed_time(self, end):
            return end.t - self.t

    class Stream:
        def __init__(self, device=None):
            pass

        def wait_stream(self, other):
            pass

    @contextlib.contextmanager
    def graph(g):
        line.capture = g
        try:
            yield
        finally:
            line.capture = None

    def spin(cycles):
        line.spins += 1
        line.now += 0.1

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: FakeGraph(line))
    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "_sleep", spin, raising=False)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda d: SimpleNamespace(L2_cache_size=4096)
    )
    return line


class TimelineFlusher:
    def __init__(self, line):
        self.line, self.flushes = line, 0

    def flush(self):
        self.flushes += 1
        self.line.now += self.line.flush_ms

    def duration_ms(self):
        return self.line.flush_ms


def test_events_timer_cold_excludes_the_flush(timeline):
    flusher = TimelineFlusher(timeline)
    timer = timers.EventsTimer(
        topts.TimingOptions(timer="events", l2="cold"), torch.device("cpu"), flusher
    )
    session = timer.open(timeline.run, 1.0)
    batch = session.batch(5)
    assert batch.samples_ms == pytest.approx((0.5,) * 5)
    calibration = 4  # the spin's cycles per ms, measured once
    assert flusher.flushes == 5 and timeline.spins == calibration + 1  # one spin per batch
    session.batch(3)
    assert flusher.flushes == 8 and timeline.spins == calibration + 2


def test_events_timer_warm_spins_before_each_call(timeline):
    flusher = TimelineFlusher(timeline)
    timer = timers.EventsTimer(
        topts.TimingOptions(timer="events", l2="warm"), torch.device("cpu"), flusher
    )
    batch = timer.open(timeline.run, 1.0).batch(4)
    assert batch.samples_ms == pytest.approx((0.5,) * 4)
    assert timeline.spins == 4 and flusher.flushes == 0


def test_cuda_graph_timer_divides_replay_by_runs(timeline):
    timer = timers.CudaGraphTimer(
        topts.TimingOptions(timer="cuda_graph", l2="warm", graph_target_ms=2.0), torch.device("cpu")
    )
    session = timer.open(timeline.run, 0.5)
    assert session.runs_per_sample == 4  # 2 ms of graph / 0.5 ms per run
    batch = session.batch(3)
    assert batch.samples_ms == pytest.approx((0.5,) * 3)


def test_cuda_graph_capture_failure_is_a_timing_error(timeline, monkeypatch):
    @contextlib.contextmanager
    def broken(g):
        raise RuntimeError("operation not permitted when stream is capturing")
        yield

    monkeypatch.setattr(torch.cuda, "graph", broken)
    timer = timers.CudaGraphTimer(
        topts.TimingOptions(timer="cuda_graph", l2="warm"), torch.device("cpu")
    )
    with pytest.raises(
        topts.TimingError, match="CUDA graph capture of run\\(\\) failed: RuntimeError"
    ):
        timer.open(timeline.run, 0.5)


def test_measure_with_events_timer_end_to_end(timeline):
    flusher = TimelineFlusher(timeline)
    options = topts.TimingOptions(
        min_time_ms=0.0, timer="events", l2="cold", max_time_s=1.0, warmup_min_ms=1.0
    )
    m = tloop.measure(
        timeline.run, timers.EventsTimer(options, torch.device("cpu"), flusher), options
    )
    assert m.median == pytest.approx(0.5) and m.noise_pct == pytest.approx(0.0)
    assert (m.timer, m.l2) == ("events", "cold") and len(m.samples) >= options.min_samples


def test_l2_flusher_allocates_twice_the_reported_l2_once(timeline):
    notes = []
    flusher = tl2.L2Flusher(torch.device("cpu"), notes.append)
    flusher.flush()
    buffer = flusher._buffer
    first = buffer.clone()
    flusher.flush()
    assert flusher._buffer is buffer and buffer.numel() == 8192 and buffer.dtype == torch.uint8
    assert (buffer != first).all()  # every byte rewritten with a value it did not hold
    assert (buffer == buffer[0]).all()
    for _ in range(300):  # the value cycles through bytes, never repeating back to back
        before = buffer.clone()
        flusher.flush()
        assert (buffer != before).all()
    assert len(notes) == 1 and "2 x reported L2" in notes[0]


def test_make_timer_picks_by_name(timeline):
    device = torch.device("cuda")
    for name, cls in (
        ("profiler", timers.ProfilerTimer),
        ("events", timers.EventsTimer),
        ("cuda_graph", timers.CudaGraphTimer),
    ):
        l2 = "warm" if name == "cuda_graph" else "cold"
        timer = timers.make_timer(topts.TimingOptions(timer=name, l2=l2), device, print)
        assert isinstance(timer, cls) and timer.name == name and timer.l2 == l2
