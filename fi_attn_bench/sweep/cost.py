"""Where one case's wall time went, per phase: the row's ``cost_*_s`` columns."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from fi_attn_bench.results.schema import COST_PHASES

# The measuring loop's phase names (``timing.loop.PhaseClock``) grouped as the columns
# name them; "timing" is split into timed calls, L2 flushes and the rest.
PHASE_GROUPS: Mapping[str, tuple[str, ...]] = {
    "prepare": ("prepare",),
    "warm_up": ("warm-up", "sustain"),
    "calibration": ("set-up", "calibrate"),
    "readout": ("readout",),
    "checks": ("check", "integrity"),
}


@dataclass(frozen=True)
class CaseCost:
    """Wall seconds of one case by phase (``results.schema.COST_PHASES``)."""

    prepare: float = 0.0
    warm_up: float = 0.0
    calibration: float = 0.0
    timed: float = 0.0
    l2_flush: float = 0.0
    readout: float = 0.0
    checks: float = 0.0
    other: float = 0.0

    @property
    def wall_s(self) -> float:
        return sum(dataclasses.astuple(self))

    def columns(self) -> dict[str, float]:
        return {f"cost_{name}_s": round(getattr(self, name), 6) for name, _ in COST_PHASES}


def case_cost(
    before: Mapping[str, float],
    after: Mapping[str, float],
    wall_s: float,
    timed_ms: float,
    batch_gpu_ms: float,
) -> CaseCost:
    """The case's cost from the sweep's phase seconds before and after it, its wall time,
    the time inside its timed calls and its timed batches' GPU time (L2 flushes included):
    what the flushes took is the batches' GPU time beyond the timed calls, and ``other`` is
    the wall time no phase accounts for (never below zero)."""
    spent = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in after}
    grouped = {
        column: sum(spent.get(phase, 0.0) for phase in phases)
        for column, phases in PHASE_GROUPS.items()
    }
    timed = timed_ms / 1e3
    flush = max(batch_gpu_ms - timed_ms, 0.0) / 1e3 if batch_gpu_ms > 0 else 0.0
    named = sum(grouped.values()) + timed + flush
    return CaseCost(**grouped, timed=timed, l2_flush=flush, other=max(wall_s - named, 0.0))


def measured_wall_s(row: Mapping[str, object]) -> float | None:
    """A row's case wall time from its ``cost_*_s`` columns; None when it has none (a row of
    an older harness, or a failed case)."""
    total, found = 0.0, False
    for name, _ in COST_PHASES:
        value = row.get(f"cost_{name}_s", "")
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            continue
        if seconds == seconds and seconds >= 0:
            total, found = total + seconds, True
    return total if found else None
