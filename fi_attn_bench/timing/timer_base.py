"""What every timer and session declares: the protocols the measuring loop calls, the
one-call stopwatches, and the defaults a timer without flush or set-up work inherits
(``timers`` builds the timers; ``cupti_timer`` the CUPTI one)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from fi_attn_bench.timing.l2 import L2Flusher
from fi_attn_bench.timing.selfcheck import CheckResult, require, required_checks
from fi_attn_bench.timing.statistics import Batch


class TimerSession(Protocol):
    """One case's timing: the loop asks it for batches; nothing else is called on it."""

    runs_per_sample: int  # run() calls behind one sample (a CUDA-graph replay holds several)

    def batch(self, calls: int) -> Batch: ...

    def record(self, loop: Callable[[], None]) -> Sequence[Batch] | None:
        """Run the whole sampling ``loop``; return the batches read from a recording of it,
        or None when the loop's own batches stand."""


class Timer(Protocol):
    """A timing method; tests inject fakes through this seam (``TimerDefaults`` helps)."""

    name: str
    l2: str
    flusher: L2Flusher | None  # the flush before each cold-L2 call; sustain uses it too

    def set_up(self) -> None:
        """One-time work before the first case's warm-up (buffers, calibrations)."""

    def self_check(self) -> None:
        """Before the sweep: raise ``SelfCheckFailed`` (exit 2) where a check this timer
        depends on fails (``fi_attn_bench.timing.selfcheck``)."""

    def open(self, fn: Callable[[], object], estimate_ms: float) -> TimerSession: ...

    def sync(self) -> None: ...

    def calibrate_rounds(self, sessions: Sequence[TimerSession]) -> None:
        """Before interleaved rounds of ``sessions`` (see ``record_rounds``): what telling
        their work apart in one recording needs, measured ahead of the sustain phase."""

    def record_rounds(
        self, sessions: Sequence[TimerSession], loop: Callable[[], Sequence[int]]
    ) -> Sequence[Sequence[Batch]] | None:
        """Run ``loop``, which asks ``sessions`` for batches and returns the session index of
        each batch in order; each session's batches read from one recording of the loop, or
        None when the batches the loop got stand."""


class Stopwatch(Protocol):
    """Times one call as its timer would (the integrity checks' call on fresh values)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def ms(self) -> float: ...


@dataclass
class HostStopwatch:
    """Host time between start() and stop(), read from ``clock``."""

    clock: Callable[[], float] = time.perf_counter
    started: float = 0.0
    stopped: float = 0.0

    def start(self) -> None:
        self.started = self.clock()

    def stop(self) -> None:
        self.stopped = self.clock()

    def ms(self) -> float:
        return (self.stopped - self.started) * 1e3


@dataclass
class EventStopwatch:
    """Device time between two CUDA events recorded on the current stream."""

    events: tuple = ()

    def start(self) -> None:
        self.events = tuple(torch.cuda.Event(enable_timing=True) for _ in range(2))
        self.events[0].record()

    def stop(self) -> None:
        self.events[1].record()

    def ms(self) -> float:
        self.events[1].synchronize()
        return float(self.events[0].elapsed_time(self.events[1]))


class TimerDefaults:
    """What a timer without a flush or set-up work declares."""

    flusher: L2Flusher | None = None

    def set_up(self) -> None:
        return None

    def stopwatch(self) -> Stopwatch | None:
        """A stopwatch for one call, or None where this timer cannot time a call alone (a
        test's scripted timer)."""
        return None

    def calibrate_rounds(self, sessions: Sequence[TimerSession]) -> None:
        return None

    def record_rounds(
        self, sessions: Sequence[TimerSession], loop: Callable[[], Sequence[int]]
    ) -> Sequence[Sequence[Batch]] | None:
        loop()
        return None

    def self_check(self) -> None:
        return None


class DeviceTimerDefaults(TimerDefaults):
    """What a GPU timer declares: one call timed by a CUDA event pair."""

    def stopwatch(self) -> Stopwatch:
        return EventStopwatch()


class SessionDefaults:
    """What a session that times batch by batch declares."""

    runs_per_sample = 1

    def record(self, loop: Callable[[], None]) -> Sequence[Batch] | None:
        loop()
        return None


def run_required_checks(timer: Timer, checks: Mapping[str, Callable[[], CheckResult]]) -> None:
    """Run the checks ``required_checks`` names for this timer and L2 mode, in order; raise
    ``SelfCheckFailed`` at the first that fails."""
    for name in required_checks(timer.name, timer.l2):
        require(checks[name](), timer.name)
