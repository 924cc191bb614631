"""Energy per call: the device's energy counter over the timed batches.

The measuring loops call ``EnergyRecorder.start`` right before a timed batch and ``stop``
right after its synchronize, so each batch's energy covers what the GPU did for it: the
calls, their L2 flushes when L2 is cold, the queue-ahead spin and the idle gap while the
host launched and read the batch.  The counter moves in steps (every ~100 ms on an H100),
so a difference of two reads is off by up to one step at each end; with a ``CounterTrace``
(the counter polled in a background thread while batches run) each step's time is known
and a batch's energy is read off the steps by linear interpolation instead.
``energy_per_call`` groups the kept batches into windows of several counter updates and
gives the median over windows of energy / calls (``energy_mJ``) and the mean power over
the batches (``avg_power_W``).  Anything it cannot trust leaves the columns empty with a
note.
"""

from __future__ import annotations

import bisect
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fi_attn_bench.device.energy import (
    ENERGY_WINDOW_UPDATES,
    CounterStep,
    CounterTrace,
    EnergyCounter,
)


@dataclass(frozen=True)
class BatchEnergy:
    """One timed batch as the energy counter saw it."""

    calls: int  # run() calls in the batch (batch calls x runs per sample)
    start_s: float  # clock at the read before the batch
    end_s: float  # clock at the read after its synchronize
    energy_mj: float | None  # counter difference over the batch (None: a read failed)

    @property
    def wall_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class CallEnergy:
    """A case's energy per call, or why there is none (``note``)."""

    energy_mj: float | None = None
    avg_power_w: float | None = None
    windows: int = 0
    note: str = ""
    # The kept batches and the window length behind energy_mj (for an independent check)
    batches: tuple[BatchEnergy, ...] = field(default=(), repr=False)
    window_s: float = 0.0

    def columns(self) -> dict[str, object]:
        if self.energy_mj is None:
            return {}
        return {
            "energy_mJ": self.energy_mj,
            "avg_power_W": self.avg_power_w,
            "energy_windows": self.windows,
        }


def unavailable(reason: str) -> CallEnergy:
    return CallEnergy(note=f"energy: {reason}")


def counter_at(steps: Sequence[CounterStep], at: float) -> float:
    """The counter at ``at``: linear between the two steps around it, and beyond the first
    or last step along that end's period (``steps``: two or more, all under load)."""
    times = [step.time_s for step in steps]
    right = min(max(bisect.bisect_right(times, at), 1), len(steps) - 1)
    before, after = steps[right - 1], steps[right]
    slope = (after.energy_mj - before.energy_mj) / (after.time_s - before.time_s)
    return before.energy_mj + slope * (at - before.time_s)


def traced_batches(
    batches: Sequence[BatchEnergy], steps: Sequence[CounterStep]
) -> list[BatchEnergy] | None:
    """The batches with their energy read off the counter's steps; None with fewer than two
    steps inside the batches' span (the periods used must all be under load)."""
    if not batches:
        return []
    first, last = batches[0].start_s, batches[-1].end_s
    inside = [step for step in steps if first <= step.time_s <= last]
    if len(inside) < 2:
        return None
    return [
        BatchEnergy(
            b.calls,
            b.start_s,
            b.end_s,
            counter_at(inside, b.end_s) - counter_at(inside, b.start_s),
        )
        for b in batches
    ]


@dataclass
class EnergyRecorder:
    """Reads ``counter`` around each timed batch of one implementation of a case; with a
    ``trace``, the batches' energy is read off the traced steps when the loop finishes."""

    counter: EnergyCounter
    window_s: float  # the shortest window the counter's update period allows
    clock: Callable[[], float] = time.perf_counter
    batches: list[BatchEnergy] = field(default_factory=list)
    trace: CounterTrace | None = None
    round_s: float = 0.0  # the shortest head-to-head round whose energy is trusted
    note: str = ""  # why the traced energy cannot be used (set by finish)
    _start: tuple[float, float | None] = (0.0, None)
    _tracing: bool = False

    def start(self) -> None:
        """Right before a timed batch is queued."""
        if self.trace is not None and not self._tracing and not self.batches:
            self.trace.acquire()
            self._tracing = True
        self._start = (self.clock(), self._read())

    def stop(self, calls: int) -> None:
        """Right after the batch's synchronize."""
        # stamped before the read as at the start, so the counter's interval lasts the batch's
        now = self.clock()
        energy = self._read()
        began, before = self._start
        difference = None if energy is None or before is None else energy - before
        self.batches.append(BatchEnergy(calls, began, now, difference))

    def _read(self) -> float | None:
        """The counter at a batch's edge; None while tracing (the trace gives the energy)."""
        return None if self._tracing else self.counter.energy_mj()

    def finish(self) -> None:
        """After the last batch (also when the loop failed): stop tracing and put the traced
        energy into the batches.  Idempotent."""
        if not self._tracing:
            return
        self.trace.release()
        self._tracing = False
        traced = traced_batches(self.batches, self.trace.steps())
        if self.trace.failed:
            self.note = "the energy counter could not be read while tracing"
        elif traced is None:
            self.note = "the counter stepped fewer than twice during the timed batches"
        else:
            self.batches = traced

    def estimate(self, kept: Sequence[bool]) -> CallEnergy:
        self.finish()
        if self.note:
            return unavailable(self.note)
        return energy_per_call(self.batches, kept, self.window_s)


def chosen_batches(batches: Sequence[BatchEnergy], kept: Sequence[bool]) -> list[BatchEnergy]:
    """The batches the throttle policy kept, all of them when it kept none or the judgements
    do not match the batches (the rule of ``timing.loop.kept_batches``)."""
    if len(kept) != len(batches) or not any(kept):
        return list(batches)
    return [batch for batch, keep in zip(batches, kept, strict=True) if keep]


def energy_windows(batches: Sequence[BatchEnergy], window_s: float) -> list[list[BatchEnergy]]:
    """Consecutive batches grouped until each group lasts ``window_s``; a short last group
    joins the one before it."""
    windows: list[list[BatchEnergy]] = []
    current: list[BatchEnergy] = []
    for batch in batches:
        current.append(batch)
        if sum(b.wall_s for b in current) >= window_s:
            windows.append(current)
            current = []
    if current and windows:
        windows[-1].extend(current)
    elif current:
        windows.append(current)
    return windows


def energy_per_call(
    batches: Sequence[BatchEnergy], kept: Sequence[bool], window_s: float
) -> CallEnergy:
    """Median over windows of (counter difference / calls), and energy / wall time over all
    the kept batches; empty with a note where the counter cannot tell."""
    chosen = chosen_batches(batches, kept)
    if not chosen:
        return unavailable("no timed batch")
    if any(batch.energy_mj is None for batch in chosen):
        return unavailable("the energy counter could not be read at a batch boundary")
    wall_s = sum(batch.wall_s for batch in chosen)
    if wall_s < window_s:
        return unavailable(
            f"the timed batches lasted {wall_s * 1e3:.1f} ms, under the {window_s * 1e3:.0f} ms "
            f"the counter needs ({ENERGY_WINDOW_UPDATES} updates)"
        )
    windows = energy_windows(chosen, window_s)
    per_call = []
    for window in windows:
        energy = sum(batch.energy_mj for batch in window)
        calls = sum(batch.calls for batch in window)
        if energy <= 0 or calls <= 0:
            return unavailable("the energy counter did not advance over a window of batches")
        per_call.append(energy / calls)
    total_mj = sum(batch.energy_mj for batch in chosen)
    power_w = total_mj / wall_s / 1e3
    return CallEnergy(
        statistics.median(per_call), power_w, len(windows), "", tuple(chosen), window_s
    )


def round_energy_per_call(batches: Sequence[BatchEnergy]) -> list[float] | None:
    """Each round's energy / calls of one implementation (head to head); None when a read
    failed or a round shows no energy."""
    values = []
    for batch in batches:
        if batch.energy_mj is None or batch.energy_mj <= 0 or batch.calls <= 0:
            return None
        values.append(batch.energy_mj / batch.calls)
    return values
