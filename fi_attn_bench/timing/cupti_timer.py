"""``--timer cupti``: CUPTI activity records around a case's measuring loop, each call's
work found between the harness's markers (``timing.activity``), no runtime API traced."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from fi_attn_bench.timing.l2 import L2Flusher
from fi_attn_bench.timing.options import TimingOptions
from fi_attn_bench.timing.queue import QueueAhead, cuda_sync, elapsed_ms
from fi_attn_bench.timing.selfcheck import (
    check_cupti_attribution,
    check_device_l2,
    matmul_probe,
    second_stream_call,
)
from fi_attn_bench.timing.statistics import Batch
from fi_attn_bench.timing.timer_base import (
    DeviceTimerDefaults,
    SessionDefaults,
    Stopwatch,
    run_required_checks,
)


class CuptiTimer(DeviceTimerDefaults):
    """CUPTI activity records around the whole measuring loop of a case; each call's sample
    from the kernels, memsets and memcpys launched between its marker and the next, its L2
    flush's records aside (``activity``), every stream included, no runtime API traced.
    Batches: [spin] + event + calls x (marker [flush] run() event) + marker, the events
    steering the stop hook; the GPU runs flush -> run() back to back, as under the profiler."""

    name = "cupti"

    def __init__(
        self,
        options: TimingOptions,
        device: torch.device,
        flusher: L2Flusher,
        tracer_factory: Callable[[], object] | None = None,
        marker_factory: Callable[[torch.device], Callable[[int], None]] | None = None,
    ):
        from fi_attn_bench.device import cupti

        self.options, self.device, self.flusher = options, device, flusher
        self.l2 = options.l2
        self.sync = cuda_sync(device)
        self.pattern = re.compile(options.kernel_pattern) if options.kernel_pattern else None
        self.queue = QueueAhead(options)
        self._tracer_factory = tracer_factory or cupti.CuptiTracer
        self._marker_factory = marker_factory or cupti.MemsetMarker
        self.tracer = None
        self.marker: Callable[[int], None] | None = None
        self._flush_layout = None
        self.checked = False

    def _open_tracer(self) -> None:
        """The tracer and the marker, once; a failure is bad input (exit 2) naming why."""
        if self.tracer is not None:
            return
        from fi_attn_bench.device.cupti import CuptiUnavailable
        from fi_attn_bench.timing.selfcheck import SelfCheckFailed

        try:
            self.tracer = self._tracer_factory()
            self.marker = self._marker_factory(self.device)
        except CuptiUnavailable as exc:
            raise SelfCheckFailed(f"--timer cupti cannot start: {exc}") from None

    def flush_layout(self):
        """What one L2 flush launches, from a recording of a flush between two markers
        (once: the same buffer every case); nothing with warm L2."""
        from fi_attn_bench.timing.activity import FlushLayout, split_calls

        if self._flush_layout is None:
            self._flush_layout = FlushLayout()
            if self.l2 == "cold":
                self._open_tracer()
                self.flusher.flush()
                self.sync()
                self.tracer.start()
                try:
                    self.marker(0)
                    self.flusher.flush()
                    self.marker(1)
                    self.sync()
                finally:
                    records = self.tracer.stop()
                (flush,) = split_calls(records, [1])
                self._flush_layout = FlushLayout(
                    len(flush.records), frozenset(r.name for r in flush.records)
                )
        return self._flush_layout

    def set_up(self) -> None:
        self._open_tracer()
        self.queue.prepare()
        if self.l2 == "cold":
            self.flusher.duration_ms()
        self.flush_layout()

    def self_check(self) -> None:
        """Calls must get their own records (``check_cupti_attribution``); cold L2: the
        flush must evict."""
        if self.checked:
            return
        self._open_tracer()
        probe = matmul_probe(self.device)
        attribution = lambda: check_cupti_attribution(  # noqa: E731
            probe,
            self.tracer,
            self.marker,
            self.sync,
            second_stream_call(probe.run, self.device),
        )
        flush = lambda: check_device_l2(self.flusher, self.device)  # noqa: E731
        run_required_checks(self, {"cupti_attribution": attribution, "l2_flush": flush})
        self.checked = True

    def open(self, fn, estimate_ms):
        self._open_tracer()
        flush_ms = self.flusher.duration_ms() if self.l2 == "cold" else 0.0
        return _CuptiSession(self, fn, estimate_ms, flush_ms, self.flush_layout())

    def stopwatch(self) -> Stopwatch:
        """One call timed as the sessions time it: its records between two markers."""
        self._open_tracer()
        return CuptiStopwatch(self)


@dataclass
class CuptiStopwatch:
    """The records of what was launched between start() and stop(), read at stop(): the
    attribution's "sum" with warm L2, "span" with cold (no flush precedes this call)."""

    timer: CuptiTimer
    found_ms: float = 0.0

    def start(self) -> None:
        self.timer.sync()
        self.timer.tracer.start()
        self.timer.marker(0)

    def stop(self) -> None:
        from fi_attn_bench.timing.activity import call_time_ms, split_calls

        timer = self.timer
        timer.marker(1)
        timer.sync()
        (call,) = split_calls(timer.tracer.stop(), [1])
        mode = "sum" if timer.options.effective_attribution == "sum" else "span"
        self.found_ms = call_time_ms(call, mode, timer.pattern)

    def ms(self) -> float:
        return self.found_ms


@dataclass
class _CuptiSession(SessionDefaults):
    """One CUPTI recording around the whole measuring loop of a case (as the profiler
    timer's, one recording per case: stopping between batches idles the GPU)."""

    timer: CuptiTimer
    call: Callable[[], object]
    estimate_ms: float
    flush_ms: float
    flush: object  # activity.FlushLayout
    run_ms: float = 0.0
    calls: list[int] = field(default_factory=list)
    markers: int = 0  # markers launched so far: the next one's value

    def mark(self) -> None:
        self.timer.marker(self.markers)
        self.markers += 1

    def fn(self) -> None:
        """marker [flush] run(): one timed call as the batch queues it."""
        self.mark()
        if self.timer.l2 == "cold":
            self.timer.flusher.flush()
        self.call()

    def batch(self, calls: int) -> Batch:
        """[spin] + event + calls x (marker [flush] run() event) + marker: provisional
        samples (the flush's calibrated time taken off each)."""
        timer = self.timer
        gpu_ms = self.flush_ms + self.run_ms
        pairs = timer.queue.batch(self.fn, calls, None, gpu_ms, self.estimate_ms, chain=True)
        self.mark()  # closes the batch's last call
        timer.sync()
        samples = tuple(max(ms - self.flush_ms, 0.0) for ms in elapsed_ms(pairs))
        self.run_ms = statistics.median(samples) if samples else 0.0
        self.calls.append(calls)
        return Batch(samples)

    def record(self, loop: Callable[[], None]) -> list[Batch]:
        from fi_attn_bench.timing.activity import batches_of, split_calls

        timer = self.timer
        timer.sync()
        first = self.markers
        timer.tracer.start()
        try:
            loop()
            timer.sync()
        finally:
            records = timer.tracer.stop()
        found = split_calls(records, self.calls, first_value=first, flush=self.flush)
        attribution = timer.options.effective_attribution
        return batches_of(found, self.calls, attribution, timer.pattern)
