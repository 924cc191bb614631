"""The measuring loop: warm-up, sustain, timed batches until the stop hook says enough."""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from fi_attn_bench.timing.conditions import BatchWatch, KeepEveryBatch
from fi_attn_bench.timing.energy import CallEnergy, EnergyRecorder
from fi_attn_bench.timing.options import CPU_TIMER, TimingOptions
from fi_attn_bench.timing.statistics import (
    Batch,
    Measurement,
    batch_calls,
    clamp,
    quantile,
    stop_noise_pct,
)
from fi_attn_bench.timing.timers import Timer, TimerSession
from fi_attn_bench.timing.trace import shorten_kernel_name

T = TypeVar("T")


SIMILAR_WARMUP_FRACTION = 0.15  # two warm-up calls within 15% of each other are "similar"


SUSTAIN_CHUNK_MS = 10.0  # the sustain phase checks the clock after about this much work


SUSTAIN_STEADY_CHUNKS = 3


def warm_up(
    fn: Callable[[], object],
    sync: Callable[[], None],
    options: TimingOptions,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Call run() until warm; return the estimated wall ms per synchronized call.

    At least ``warmup_min_calls`` calls and ``warmup_min_ms`` after the first call (JIT),
    ending when two consecutive calls take similar time, or after ``warmup_max_ms``.
    """
    start = clock()
    fn()
    sync()
    first_done = clock()
    times: list[float] = [(first_done - start) * 1e3]
    while True:
        before = clock()
        fn()
        sync()
        after = clock()
        times.append((after - before) * 1e3)
        since_first = (after - first_done) * 1e3
        similar = abs(times[-1] - times[-2]) <= SIMILAR_WARMUP_FRACTION * max(times[-2], 1e-9)
        enough = len(times) >= options.warmup_min_calls and since_first >= options.warmup_min_ms
        if (enough and similar) or since_first >= options.warmup_max_ms:
            return sorted(times[-3:])[len(times[-3:]) // 2]


def should_stop(
    samples: Sequence[float], elapsed_s: float, options: TimingOptions, runs_per_sample: int = 1
) -> bool:
    """The stop hook: the time budget spent, or the noise target met with at least
    ``min_samples``, once the samples add up to ``min_time_ms`` of timed GPU time or (calls
    shorter than ``enough_samples_below_ms``) number ``enough_samples``, whichever first.

    The blocks' interval (``drift_ci_pct``) does not decide, because sampling on while the
    blocks disagree follows the GPU into its slower clock state; it is reported instead
    (``Measurement.drift_pct``: the row, and the wide-spread note)."""
    if not samples:
        return False
    if elapsed_s >= options.max_time_s:
        return True
    if len(samples) < options.min_samples:
        return False
    timed_ms = sum(samples) * runs_per_sample
    if timed_ms < options.min_time_ms and not _enough_samples(samples, options):
        return False
    return stop_noise_pct(samples, options.stop_rule) <= options.noise_target_pct


def _enough_samples(samples: Sequence[float], options: TimingOptions) -> bool:
    """``enough_samples`` in, for a case whose calls are short enough that their samples
    cost more host time than GPU time (``enough_samples_below_ms``)."""
    if len(samples) < options.enough_samples:
        return False
    return statistics.median(samples) < options.enough_samples_below_ms


@dataclass
class MeasureLoop:
    """One measurement loop with a stop hook (tests swap ``clock`` and the timer)."""

    options: TimingOptions
    clock: Callable[[], float] = time.perf_counter
    stop: Callable[[Sequence[float], float, TimingOptions, int], bool] = should_stop
    batches: list[int] = field(default_factory=list)  # calls per batch, for inspection
    # "timing": the loop itself; "readout": the rest (profiler start, stop and trace reading)
    phases: PhaseClock = field(default_factory=lambda: PhaseClock())  # defined below

    def run(
        self,
        session: TimerSession,
        estimate_ms: float,
        timer: Timer,
        watch: BatchWatch | None = None,
        energy: EnergyRecorder | None = None,
    ) -> Measurement:
        """Sample until the stop hook says enough; ``watch`` reads the device between
        batches and may drop a batch's samples (the throttle policy); ``energy`` reads the
        energy counter right around each batch."""
        watch = watch or KeepEveryBatch()
        samples: list[float] = []  # what the stop hook sees: the kept batches' samples
        start = self.clock()
        runs = session.runs_per_sample
        batches: list[Batch] = []
        kept: list[bool] = []  # per batch: what the watch said
        looped = [start, start]  # when the loop body began and ended

        def loop() -> None:
            looped[0] = self.clock()
            try:
                sample_until_stop()
            finally:
                looped[1] = self.clock()

        def sample_until_stop() -> None:
            per_call = estimate_ms
            watch.batches_start()
            while True:
                remaining = self.options.max_time_s - (self.clock() - start)
                calls = batch_calls(per_call * runs, remaining, estimate_ms * runs, self.options)
                self.batches.append(calls)
                if energy is not None:
                    energy.start()
                batch = session.batch(calls)
                if energy is not None:
                    energy.stop(calls * runs)
                batches.append(batch)
                kept.append(watch.batch_done())
                if kept[-1]:
                    samples.extend(batch.samples_ms)
                elapsed = self.clock() - start
                if self.stop(samples, elapsed, self.options, runs):
                    break
                if not samples and elapsed >= self.options.max_time_s:
                    break  # every batch judged throttled: kept_batches keeps them all
                if samples:
                    per_call = max(quantile(sorted(samples), 0.5), 1e-6)

        with gc_paused():
            try:
                recorded = session.record(loop)
            finally:
                if energy is not None:
                    energy.finish()
            if recorded is not None:  # a timer that records the whole loop reads it after
                batches = list(recorded)
        body = looped[1] - looped[0]
        self.phases.add("timing", body)
        self.phases.add("readout", self.clock() - start - body)
        kept_ones, throttled, discarded = kept_batches(batches, kept)
        found = energy.estimate(kept) if energy is not None else None
        return _measurement(kept_ones, timer, runs, throttled, discarded, found)


def kept_batches(batches: Sequence[Batch], kept: Sequence[bool]) -> tuple[list[Batch], int, int]:
    """The batches the watch kept, the samples it judged throttled, and those dropped.

    Nothing is dropped when every batch was judged throttled (a GPU that never reached the
    threshold still gets a time; the verbose note says so) or when the batches cannot be
    matched with the judgements (a recording that gave one mean sample)."""
    if len(batches) != len(kept):
        return list(batches), 0, 0
    throttled = sum(len(b.samples_ms) for b, keep in zip(batches, kept, strict=True) if not keep)
    if all(kept) or not any(kept):
        return list(batches), throttled, 0
    return [b for b, keep in zip(batches, kept, strict=True) if keep], throttled, throttled


@contextlib.contextmanager
def gc_paused():
    """No cyclic garbage collection inside: a full collection of a process holding torch
    takes 0.1-0.2 s, which would stall the queue of calls or the trace reading (timeit
    disables it for the same reason).  Refcounting still frees almost everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _measurement(
    batches: Sequence[Batch],
    timer: Timer,
    runs: int,
    throttled: int = 0,
    discarded: int = 0,
    energy: CallEnergy | None = None,
) -> Measurement:
    samples = tuple(sample for batch in batches for sample in batch.samples_ms)
    kernels = {name for batch in batches for name in batch.kernels}
    names = tuple(sorted({shorten_kernel_name(k) for k in kernels}))
    split = all(batch.per_call for batch in batches)
    gpu_ms = sum(batch.gpu_ms for batch in batches)
    starved = sum(batch.starved for batch in batches)
    return Measurement(
        samples,
        timer.name,
        timer.l2,
        names,
        runs,
        split,
        gpu_ms,
        starved,
        throttled_samples=throttled,
        discarded_samples=discarded,
        energy=energy,
    )


def is_steady(chunk_ms: Sequence[float], elapsed_ms: float, options: TimingOptions) -> bool:
    """Sustained long enough: ``sustain_ms`` spent, or ``sustain_min_ms`` spent and the
    last chunks' GPU times agree within ``sustain_steady_pct`` (clocks settled)."""
    if elapsed_ms >= options.sustain_ms:
        return True
    last = sorted(chunk_ms[-SUSTAIN_STEADY_CHUNKS:])
    if elapsed_ms < options.sustain_min_ms or len(last) < SUSTAIN_STEADY_CHUNKS:
        return False
    return last[-1] - last[0] <= options.sustain_steady_pct / 100.0 * quantile(last, 0.5)


def sustain(
    fn: Callable[[], object],
    timer: Timer,
    options: TimingOptions,
    estimate_ms: float,
    clock: Callable[[], float] = time.perf_counter,
) -> int:
    """Keep the GPU busy with back-to-back calls (L2 flushes included when cold) until
    ``is_steady``, so timing starts at steady-state clocks; a no-op on the CPU.  Chunks of
    about ``SUSTAIN_CHUNK_MS`` of calls between a CUDA event pair, synchronized.  Returns
    the number of chunks run."""
    if timer.name == CPU_TIMER or options.sustain_ms <= 0:
        return 0
    flusher = timer.flusher if timer.l2 == "cold" else None
    chunk = clamp(math.ceil(SUSTAIN_CHUNK_MS / max(estimate_ms, 1e-3)), 1, 1000)
    started = clock()
    chunk_ms: list[float] = []
    while True:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(chunk):
            if flusher is not None:
                flusher.flush()
            fn()
        end.record()
        timer.sync()
        chunk_ms.append(begin.elapsed_time(end))
        if is_steady(chunk_ms, (clock() - started) * 1e3, options):
            return len(chunk_ms)


@dataclass
class PhaseClock:
    """Wall seconds per phase of a sweep (prepare, set-up, warm-up, check, sustain,
    calibrate, timing, readout), so the sweep can say where its time went."""

    seconds: dict[str, float] = field(default_factory=dict)
    clock: Callable[[], float] = time.perf_counter

    def run(self, phase: str, body: Callable[[], T]) -> T:
        started = self.clock()
        try:
            return body()
        finally:
            self.add(phase, self.clock() - started)

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def describe(self) -> str:
        return ", ".join(f"{name} {value:.1f} s" for name, value in self.seconds.items())


def measure(
    fn: Callable[[], object],
    timer: Timer,
    options: TimingOptions,
    clock: Callable[[], float] = time.perf_counter,
    after_warm_up: Callable[[], object] = lambda: None,
    phases: PhaseClock | None = None,
    watch: BatchWatch | None = None,
    energy: EnergyRecorder | None = None,
    timed_fn: Callable[[], object] | None = None,
    audits: Sequence[Callable[[TimerSession, Measurement], None]] = (),
) -> Measurement:
    """Set the timer up, warm up, run ``after_warm_up`` (the correctness check), hold the GPU
    at steady state, open the timer on ``timed_fn`` (default ``fn``), sample until the stop
    hook, then run the ``audits`` (the integrity checks) on the session.

    The timer's one-time set-up comes first: done between sustain and timing, the first
    profiler session's seconds of host work would leave the first case's GPU idle, fresh
    from idle when its timing starts."""
    phases = phases or PhaseClock(clock=clock)
    phases.run("set-up", timer.set_up)
    estimate = phases.run("warm-up", lambda: warm_up(fn, timer.sync, options, clock))
    phases.run("check", after_warm_up)
    calibrate_call = getattr(timer, "calibrate_call", None)  # the profiler's, before sustain
    if calibrate_call is not None and timed_fn is not None:
        phases.run("calibrate", lambda: calibrate_call(timed_fn))
    phases.run("sustain", lambda: sustain(fn, timer, options, estimate, clock))

    session = phases.run("calibrate", lambda: timer.open(timed_fn or fn, estimate))
    loop = MeasureLoop(options, clock, phases=phases)
    measurement = loop.run(session, estimate, timer, watch, energy)
    for audit in audits:
        phases.run("integrity", lambda audit=audit: audit(session, measurement))
    return measurement
