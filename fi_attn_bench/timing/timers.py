"""The timing methods: profiler, CUDA graph, CUDA events, wall clock."""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from fi_attn_bench.timing.cupti_timer import CuptiTimer as CuptiTimer
from fi_attn_bench.timing.l2 import L2Flusher
from fi_attn_bench.timing.options import CPU_TIMER, NoKernelCaptured, TimingError, TimingOptions
from fi_attn_bench.timing.queue import (
    EventPool,
    QueueAhead,
    cuda_sync,
    elapsed_ms,
    enqueue_calls,
    queued_samples,
)
from fi_attn_bench.timing.selfcheck import (
    capture_graph,
    check_cuda_graph,
    check_device_l2,
    check_profiler_kernels,
    matmul_probe,
)
from fi_attn_bench.timing.statistics import Batch, clamp
from fi_attn_bench.timing.timer_base import (
    DeviceTimerDefaults as DeviceTimerDefaults,
)
from fi_attn_bench.timing.timer_base import (
    EventStopwatch as EventStopwatch,
)
from fi_attn_bench.timing.timer_base import (
    HostStopwatch as HostStopwatch,
)
from fi_attn_bench.timing.timer_base import (
    SessionDefaults as SessionDefaults,
)
from fi_attn_bench.timing.timer_base import (
    Stopwatch as Stopwatch,
)
from fi_attn_bench.timing.timer_base import (
    Timer as Timer,
)
from fi_attn_bench.timing.timer_base import (
    TimerDefaults as TimerDefaults,
)
from fi_attn_bench.timing.timer_base import (
    TimerSession as TimerSession,
)
from fi_attn_bench.timing.timer_base import (
    run_required_checks as run_required_checks,
)
from fi_attn_bench.timing.trace import (
    Calibration,
    DeviceEvent,
    attribute_recording,
    profile_device_events,
    split_rounds,
)


def call_hooks(fn: Callable[[], object]) -> tuple[Callable[[], None], Callable[[], None]]:
    """What a per-call timer runs right before and right after each timed call, outside its
    timing window: a timed function's ``before_call`` and ``after_call`` (the integrity
    checks' fresh values and sampled checks, ``timing.fresh.FreshCalls``), else nothing."""
    return getattr(fn, "before_call", _nothing), getattr(fn, "after_call", _nothing)


def _nothing() -> None:
    return None


def method_columns(timer: Timer) -> dict[str, str]:
    """The row's ``timer`` and ``l2`` columns: how the timer in use measures (its one writer)."""
    return {"timer": timer.name, "l2": timer.l2}


class WallTimer(TimerDefaults):
    """CPU device: perf_counter around each call (no kernels, no L2 control)."""

    name = CPU_TIMER
    l2 = "warm"

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock

    def sync(self) -> None:
        return None

    def stopwatch(self) -> Stopwatch:
        """The calling thread's CPU time: on a shared CPU, one call's wall time includes
        whatever the OS ran instead (5 ms for a 0.1 ms call, seen three times running)."""
        return HostStopwatch(time.thread_time)

    def open(self, fn, estimate_ms):
        return _WallSession(fn, self._clock)


@dataclass
class _WallSession(SessionDefaults):
    fn: Callable[[], object]
    clock: Callable[[], float]

    def batch(self, calls: int) -> Batch:
        samples = []
        before, after = call_hooks(self.fn)
        for _ in range(calls):
            before()
            start = self.clock()
            self.fn()
            samples.append((self.clock() - start) * 1e3)
            after()
        return Batch(tuple(samples))


class EventsTimer(DeviceTimerDefaults):
    """A CUDA event pair around each call.

    Cold L2: the batch is [queue-ahead spin] + calls x [flush, start, run(), end]; each
    sample includes the start event's record (microseconds, see ``enqueue_chain``), which
    the profiler's samples do not.  Warm L2: a short GPU spin precedes each call so
    that the start event is not recorded while the GPU waits for the CPU to launch run().
    """

    name = "events"

    def __init__(self, options: TimingOptions, device: torch.device, flusher: L2Flusher):
        self.options, self.device, self.flusher = options, device, flusher
        self.l2 = options.l2
        self.sync = cuda_sync(device)
        self.queue = QueueAhead(options)
        self.checked = False  # self_check passed once: a suite's scripts share the timer

    def cover_launch(self) -> None:
        """A GPU spin before a warm call, so its start event is not recorded while the GPU
        waits for the CPU to launch run()."""
        self.queue.spin(self.options.launch_cover_cycles)

    def set_up(self) -> None:
        """The flush buffer and its duration, once per timer (see ``measure``)."""
        if self.l2 == "cold":
            self.flusher.duration_ms()

    def self_check(self) -> None:
        """Cold L2: the flush must evict (``required_checks``)."""
        if not self.checked:
            run_required_checks(
                self, {"l2_flush": lambda: check_device_l2(self.flusher, self.device)}
            )
        self.checked = True

    def open(self, fn, estimate_ms):
        flush_ms = self.flusher.duration_ms() if self.l2 == "cold" else 0.0
        return _EventsSession(self, fn, estimate_ms, flush_ms)


@dataclass
class _EventsSession(SessionDefaults):
    timer: EventsTimer
    fn: Callable[[], object]
    estimate_ms: float
    flush_ms: float
    run_ms: float = 0.0  # median of the last batch

    def batch(self, calls: int) -> Batch:
        timer = self.timer
        if timer.l2 == "cold":
            samples = queued_samples(self, calls, timer.flusher.flush)
        else:
            pairs = enqueue_calls(self.fn, calls, timer.cover_launch, timer.queue.events)
            timer.sync()
            samples = elapsed_ms(pairs)
        return Batch(samples, gpu_ms=sum(samples) + calls * self.flush_ms)


class CudaGraphTimer(DeviceTimerDefaults):
    """Replays a CUDA graph of K run() calls; sample = replay time / K (warm L2 only)."""

    name = "cuda_graph"
    l2 = "warm"

    def __init__(
        self,
        options: TimingOptions,
        device: torch.device,
        profile: Callable[..., list[DeviceEvent]] = profile_device_events,
    ):
        self.options, self.device = options, device
        self.sync = cuda_sync(device)
        self.profile = profile  # counts the kernels of the self-check's eager call and replay
        self.checked = False

    def self_check(self) -> None:
        """A replay must run every kernel of the captured call (``required_checks``)."""
        if not self.checked:
            graph = lambda: check_cuda_graph(  # noqa: E731
                matmul_probe(self.device), self.device, self.sync, self.profile
            )
            run_required_checks(self, {"cuda_graph": graph})
        self.checked = True

    def open(self, fn, estimate_ms):
        calls = clamp(
            math.ceil(self.options.graph_target_ms / max(estimate_ms, 1e-6)),
            1,
            self.options.max_graph_calls,
        )
        try:
            graph = capture_graph(fn, self.device, calls)
        except Exception as exc:
            raise TimingError(
                f"CUDA graph capture of run() failed: {type(exc).__name__}: {exc}"
            ) from exc
        graph.replay()
        self.sync()
        return _GraphSession(self, graph, calls)


@dataclass
class _GraphSession(SessionDefaults):
    timer: CudaGraphTimer
    graph: object
    calls_per_replay: int
    events: EventPool = field(default_factory=EventPool)

    @property
    def runs_per_sample(self) -> int:
        return self.calls_per_replay

    def batch(self, calls: int) -> Batch:
        pairs = enqueue_calls(self.graph.replay, calls, pool=self.events)
        self.timer.sync()
        replays = elapsed_ms(pairs)
        return Batch(tuple(r / self.calls_per_replay for r in replays), gpu_ms=sum(replays))


class ProfilerTimer(DeviceTimerDefaults):
    """torch.profiler around a batch of calls; every kernel/memset/memcpy of run() counted."""

    name = "profiler"

    def __init__(
        self,
        options: TimingOptions,
        device: torch.device,
        flusher: L2Flusher,
        profile: Callable[..., list[DeviceEvent]] = profile_device_events,
    ):
        self.options, self.device, self.flusher = options, device, flusher
        self.l2 = options.l2
        self.sync = cuda_sync(device)
        self.profile = profile
        self.pattern = re.compile(options.kernel_pattern) if options.kernel_pattern else None
        self.queue = QueueAhead(options)
        self._flush_events: list[DeviceEvent] | None = None
        self._lead_events: list[DeviceEvent] | None = None
        self._refresh_events: dict[int, tuple[object, list[DeviceEvent]]] = {}
        self.checked = False

    def _flush_calibration(self) -> list[DeviceEvent]:
        if self.l2 != "cold":
            return []
        if self._flush_events is None:  # the same buffer every case: calibrate once
            self.flusher.flush()
            self._flush_events = self.profile(self.flusher.flush, self.sync)
        return self._flush_events

    def _lead_calibration(self) -> list[DeviceEvent]:
        """What the queue-ahead spin launches (nothing when the build has no spin)."""
        if self._lead_events is None:
            self._lead_events = []
            if self.queue.prepare():
                self._lead_events = self.profile(lambda: self.queue.hold(1, 0.0, 0.0), self.sync)
        return self._lead_events

    def set_up(self) -> None:
        """The spin's and the flush's calibration profiles, once per timer: a process's first
        profiler session takes seconds (see ``measure``)."""
        self._lead_calibration()
        self._flush_calibration()

    def self_check(self) -> None:
        """The profiler must record device kernels; cold L2: the flush must evict
        (``required_checks``)."""
        if not self.checked:
            kernels = lambda: check_profiler_kernels(  # noqa: E731
                matmul_probe(self.device), self.sync, self.profile
            )
            flush = lambda: check_device_l2(self.flusher, self.device)  # noqa: E731
            run_required_checks(self, {"profiler_kernels": kernels, "l2_flush": flush})
        self.checked = True

    def open(self, fn, estimate_ms):
        """A session for one case.  run()'s own event count comes from the case's recording
        (``infer_call_layout``), not from a profiler session of its own, one profiler
        start and stop less per case."""
        lead = self._lead_calibration()
        flush = self._flush_calibration()
        if self.l2 == "cold" and not flush:
            raise NoKernelCaptured(
                "the profiler captured no GPU kernel of the L2 flush, so it cannot tell the "
                "flush's work from run()'s (is the device profiler usable on "
                f"{self.device}? --timer events does not need it; --l2 warm needs no flush)"
            )
        before, _ = call_hooks(fn)
        prepare = None if before is _nothing else before
        # the inputs' refresh before each call is recorded as the flush's first kernels, so
        # the split by stream order counts it out of run()'s time (its count: one recording)
        refresh = self.calibrate_call(fn)
        calibration = Calibration(
            call_count=None,
            flush_count=len(refresh) + len(flush),
            flush_names=frozenset(e.name for e in (*refresh, *flush)),
            lead_count=len(lead),
            lead_names=frozenset(e.name for e in lead),
        )
        flush_ms = sum(e.duration_ns for e in (*refresh, *flush)) / 1e6
        return _ProfilerSession(self, fn, calibration, estimate_ms, flush_ms, prepare=prepare)

    def calibrate_call(self, fn: Callable[[], object]) -> list[DeviceEvent]:
        """The device events of ``fn``'s ``before_call`` (the inputs' refresh), recorded once
        per timed function: ``measure`` asks before the sustain phase, so the recording's
        idle GPU does not fall between sustain and timing."""
        before, _ = call_hooks(fn)
        if before is _nothing:
            return []
        key = id(fn)
        if self._refresh_events.get(key, (None,))[0] is not fn:
            self._refresh_events = {key: (fn, self.profile(before, self.sync))}
        return self._refresh_events[key][1]

    def calibrate_rounds(self, sessions: Sequence[_ProfilerSession]) -> None:
        """Each session's run() event count and names from a recording of one call: the
        rounds' recording holds several implementations' calls, whose counts differ."""
        for session in sessions:
            events = self.profile(session.fn, self.sync)
            if not events:
                raise NoKernelCaptured("the profiler captured no GPU kernel for run()")
            session.calibration = dataclasses.replace(
                session.calibration,
                call_count=len(events),
                call_names=frozenset(e.name for e in events),
            )

    def record_rounds(
        self, sessions: Sequence[_ProfilerSession], loop: Callable[[], Sequence[int]]
    ) -> list[list[Batch]]:
        """One recording around all rounds, split by stream order into each session's
        batches (``split_rounds``)."""
        order: list[int] = []
        events = self.profile(lambda: order.extend(loop()), self.sync)
        return split_rounds(
            events,
            order,
            [session.calls for session in sessions],
            [session.calibration for session in sessions],
            pattern=self.pattern,
            attribution=self.options.effective_attribution,
        )


@dataclass
class _ProfilerSession(SessionDefaults):
    """One profiler recording around the whole measurement loop of a case.

    Every batch runs a chain of calls with an event after each (``enqueue_chain``), so the
    stop hook judges provisional times as the batches come; when the loop ends, the
    recording is split by stream order into per-call profiler samples, which replace the
    provisional ones.  One recording per
    case, not one per batch: each profiler start/stop left the GPU idle for tens of ms,
    and a GPU that idles half the time runs compute-bound kernels faster (cooler, less
    power-capped) than one under the steady load the events reference sees.
    """

    timer: ProfilerTimer
    fn: Callable[[], object]
    calibration: Calibration
    estimate_ms: float
    flush_ms: float
    run_ms: float = 0.0  # median of the last batch
    calls: list[int] = field(default_factory=list)
    events: list[DeviceEvent] = field(default_factory=list)
    prepare: Callable[[], None] | None = None  # the inputs' refresh before each call

    def record(self, loop: Callable[[], None]) -> list[Batch]:
        """Run the measurement loop under one profiler recording; its per-call samples."""
        self.events = self.timer.profile(loop, self.timer.sync)
        return self.result()

    def batch(self, calls: int) -> Batch:
        """[queue-ahead spin] + event + calls x ([flush] run() event): provisional samples."""
        timer = self.timer
        flush = timer.flusher.flush if timer.l2 == "cold" else None
        if self.prepare is not None:  # refreshed first, then flushed: no input stays in L2
            flush = _then(self.prepare, flush)
        samples = queued_samples(self, calls, flush, chain=True)
        self.calls.append(calls)
        return Batch(samples)

    def result(self) -> list[Batch]:
        """The recording's per-call samples, batch by batch."""
        return attribute_recording(
            self.events,
            self.calls,
            self.calibration,
            pattern=self.timer.pattern,
            attribution=self.timer.options.effective_attribution,
        )


def _then(first: Callable[[], None], second: Callable[[], None] | None) -> Callable[[], None]:
    if second is None:
        return first

    def both() -> None:
        first()
        second()

    return both


def make_timer(options: TimingOptions, device: torch.device, log: Callable[[str], None]) -> Timer:
    """The timer named by ``options`` for ``device`` (wall clock on a CPU device)."""
    if device.type == "cpu":
        return WallTimer()
    flusher = L2Flusher(device, log)
    if options.timer == "profiler":
        return ProfilerTimer(options, device, flusher)
    if options.timer == "events":
        return EventsTimer(options, device, flusher)
    if options.timer == "cuda_graph":
        return CudaGraphTimer(options, device)
    if options.timer == "cupti":
        return CuptiTimer(options, device, flusher)
    raise ValueError(f"unknown timer {options.timer!r}")
