"""A case's run conditions, read between batches, and the throttle policy that judges each batch.

nvbench's policy: a sample taken while the GPU clock was below a share of its maximum
(75 % by default) is thrown away, and the GPU rests (``--throttle-recovery-delay``) before
going on.  Here the clock is read at the boundaries between timed batches, never inside
one (``device.telemetry``); a batch is throttled when either boundary read below
``throttle_threshold_pct`` of the maximum SM clock.  ``discard`` drops its samples;
``pause`` drops them and sleeps ``cooldown_ms`` before the next batch.  Without a clock
or maximum-clock reading the policy cannot judge, and every batch is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from fi_attn_bench.device.telemetry import Telemetry, TelemetryReading, conditions_columns
from fi_attn_bench.timing.options import TimingOptions


class BatchWatch(Protocol):
    """What the measuring loop calls between batches (cheap: no GPU work)."""

    def batches_start(self) -> None:
        """Right before the first timed batch."""

    def batch_done(self) -> bool:
        """After each batch's synchronize: False drops the batch's samples."""


class KeepEveryBatch:
    """The watch of a loop with nothing to read."""

    def batches_start(self) -> None:
        return None

    def batch_done(self) -> bool:
        return True


@dataclass
class CaseConditions:
    """Reads the device before a case, between its batches and after it (``BatchWatch``),
    applies the throttle policy, and gives the row's condition columns."""

    telemetry: Telemetry | None
    options: TimingOptions
    sleep: Callable[[float], None] = time.sleep
    readings: list[TelemetryReading] = field(default_factory=list)
    max_clock_mhz: float | None = None
    throttled_batches: int = 0
    _previous: TelemetryReading | None = None

    def _read(self) -> TelemetryReading:
        reading = self.telemetry.read() if self.telemetry is not None else TelemetryReading()
        self.readings.append(reading)
        return reading

    def begin(self) -> None:
        """Before the case: the first reading (temperature at start) and the maximum clock."""
        self.readings, self.throttled_batches = [], 0
        if self.telemetry is not None and self.max_clock_mhz is None:
            self.max_clock_mhz = self.telemetry.max_sm_clock_mhz()
        self._read()

    def end(self) -> None:
        """After the case: the last reading (temperature at end)."""
        self._read()

    @property
    def threshold_mhz(self) -> float | None:
        """The clock below which a batch counts as throttled; None when the policy is off
        or no maximum clock is known."""
        if self.options.throttle_policy == "off" or self.max_clock_mhz is None:
            return None
        return self.options.throttle_threshold_pct / 100.0 * self.max_clock_mhz

    @property
    def policy_active(self) -> bool:
        """The policy asked for and able to judge (a clock and its maximum readable)."""
        clocks = any(r.sm_clock_mhz is not None for r in self.readings)
        return self.threshold_mhz is not None and clocks

    def batches_start(self) -> None:
        self._previous = self._read()

    def batch_done(self) -> bool:
        reading = self._read()
        previous, self._previous = self._previous, reading
        if not is_throttled(previous, reading, self.threshold_mhz):
            return True
        self.throttled_batches += 1
        if self.options.throttle_policy == "pause":
            self.sleep(self.options.cooldown_ms / 1e3)
        return False

    def columns(self) -> dict[str, object]:
        return conditions_columns(self.readings, self.max_clock_mhz)


def is_throttled(
    before: TelemetryReading | None, after: TelemetryReading, threshold_mhz: float | None
) -> bool:
    """Whether a batch ran below the threshold: a clock read at either of its boundaries."""
    if threshold_mhz is None:
        return False
    clocks = [r.sm_clock_mhz for r in (before, after) if r is not None]
    return any(clock is not None and clock < threshold_mhz for clock in clocks)
