"""Queue-ahead: calls enqueued behind a GPU spin so that no timed call waits for its own launch."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from fi_attn_bench.timing.options import TimingOptions


def cuda_sync(device: torch.device) -> Callable[[], None]:
    return lambda: torch.cuda.synchronize(device)


def event_times(body: Callable[[], object], repeats: int) -> list[float]:
    """ms of ``body`` between a CUDA event pair, ``repeats`` times (synchronizes)."""
    pairs = enqueue_calls(body, repeats)
    torch.cuda.synchronize()
    return elapsed_ms(pairs)


def elapsed_ms(pairs) -> tuple[float, ...]:
    return tuple(start.elapsed_time(end) for start, end in pairs)


def spin_cycles_per_ms(cycles: int = 2_000_000) -> float:
    """GPU cycles per ms of ``torch.cuda._sleep`` (the spin kernel): one warm-up spin, then
    the median of three event-timed spins of ``cycles``.  Raises where the build lacks it."""
    spin = lambda: torch.cuda._sleep(cycles)  # noqa: E731
    spin()
    ms = statistics.median(event_times(spin, 3))
    return cycles / max(ms, 1e-6)


class QueueAhead:
    """A spin kernel ahead of a batch that holds the GPU while the CPU queues the batch
    (nvbench's blocking kernel), so that no timed call waits for its own launch.

    It spins for the CPU's expected lead over the GPU: ``calls`` x (host time per call -
    GPU time per call), measured on the previous batch (the warm-up's estimate before the
    first), plus the first call's own launch, counted twice (the first launch after a
    synchronize is the slowest), plus a small floor.  Builds without
    ``torch.cuda._sleep`` get no spin.
    """

    def __init__(self, options: TimingOptions):
        self.options = options
        self.available = hasattr(torch.cuda, "_sleep")
        self.host_ms_per_call: float | None = None
        self._cycles_per_ms: float | None = None
        self.events = EventPool()

    def spin_ms(self, calls: int, gpu_ms_per_call: float, fallback_host_ms: float) -> float:
        host = self.host_ms_per_call if self.host_ms_per_call is not None else fallback_host_ms
        lead = calls * max(host - gpu_ms_per_call, 0.0) + 2.0 * host
        lead += self.options.queue_ahead_min_ms
        return min(lead, self.options.queue_ahead_max_ms)

    def prepare(self) -> bool:
        """Measure the spin kernel's cycles per ms once; False when there is no usable spin."""
        if self.available and self._cycles_per_ms is None:
            try:
                self._cycles_per_ms = spin_cycles_per_ms()
            except Exception:  # noqa: BLE001 - a build whose spin kernel fails: time without it
                self.available = False
        return self.available

    def hold(self, calls: int, gpu_ms_per_call: float, fallback_host_ms: float) -> None:
        if self.prepare():
            ms = self.spin_ms(calls, gpu_ms_per_call, fallback_host_ms)
            torch.cuda._sleep(max(1, int(ms * self._cycles_per_ms)))

    def spin(self, cycles: int) -> None:
        """A spin of ``cycles`` when the build has a working spin kernel."""
        if self.available:
            try:
                torch.cuda._sleep(cycles)
            except Exception:  # noqa: BLE001 - a build without the spin kernel: time without it
                self.available = False

    def batch(
        self,
        fn: Callable[[], object],
        calls: int,
        before: Callable[[], object] | None,
        gpu_ms_per_call: float,
        fallback_host_ms: float,
        chain: bool = False,
    ) -> list[tuple[object, object]]:
        """Spin, queue the calls (``enqueue_chain`` when ``chain``, else ``enqueue_calls``),
        remember the CPU's time per call."""
        self.hold(calls, gpu_ms_per_call, fallback_host_ms)
        started = time.perf_counter()
        enqueue = enqueue_chain if chain else enqueue_calls
        pairs = enqueue(fn, calls, before, self.events)
        self.host_ms_per_call = (time.perf_counter() - started) * 1e3 / max(calls, 1)
        return pairs


class EventPool:
    """Timing events kept for the next batch (a batch's pairs are read before the next is
    queued): creating two events for every timed call costs host time on every call."""

    def __init__(self):
        self._pairs: list[tuple[object, object]] = []

    def take(self, count: int) -> list[tuple[object, object]]:
        while len(self._pairs) < count:
            self._pairs.append(
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            )
        return self._pairs[:count]

    def chain(self, count: int) -> list[object]:
        """``count + 1`` events for a chain of ``count`` calls (see ``enqueue_chain``)."""
        pairs = self.take((count + 2) // 2)
        return [event for pair in pairs for event in pair][: count + 1]


def enqueue_calls(
    fn: Callable[[], object],
    calls: int,
    before: Callable[[], object] | None = None,
    pool: EventPool | None = None,
) -> list[tuple[object, object]]:
    """Queue ``calls`` x ([before] [start event] fn() [end event]); the event pairs.

    With the L2 flush as ``before``, the events timer's cold-L2 sequence: what CUDA events
    with a flush before each call read, the start event's own record included (see
    ``enqueue_chain``).  Events come from ``pool`` when given (read them before reusing it).
    """
    pairs = (pool or EventPool()).take(calls)
    for start, end in pairs:
        if before is not None:
            before()
        start.record()
        fn()
        end.record()
    return pairs


def enqueue_chain(
    fn: Callable[[], object],
    calls: int,
    before: Callable[[], object] | None = None,
    pool: EventPool | None = None,
) -> list[tuple[object, object]]:
    """Queue event + ``calls`` x ([before] fn() event); the pairs of consecutive events,
    each around one [before] fn().

    No event sits between ``before`` (the L2 flush) and fn(), because an event record there
    costs the GPU microseconds before run()'s first kernel, varying by stream.  The profiler
    reads run()'s time off its kernels, so it times this sequence; the pairs only steer
    the stop hook.
    """
    events = (pool or EventPool()).chain(calls)
    events[0].record()
    for event in events[1:]:
        if before is not None:
            before()
        fn()
        event.record()
    return list(zip(events[:-1], events[1:], strict=True))


def queued_samples(
    session, calls: int, before: Callable[[], object] | None, chain: bool = False
) -> tuple[float, ...]:
    """One queued batch of a session (``timer``, ``fn``, ``estimate_ms``, ``flush_ms``,
    ``run_ms``): spin, queue, synchronize, read the event pairs; the median is kept to
    size the next batch's spin.  ``chain``: the pairs also hold ``before`` (the flush),
    whose calibrated time comes off each sample."""
    timer = session.timer
    gpu_ms = session.flush_ms + session.run_ms
    pairs = timer.queue.batch(session.fn, calls, before, gpu_ms, session.estimate_ms, chain)
    timer.sync()
    samples = elapsed_ms(pairs)
    if chain and before is not None:
        samples = tuple(max(sample - session.flush_ms, 0.0) for sample in samples)
    session.run_ms = statistics.median(samples) if samples else 0.0
    return samples
