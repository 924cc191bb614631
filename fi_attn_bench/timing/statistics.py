"""A case's samples and what is computed from them once: median, quartiles, noise, drift."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from fi_attn_bench.timing.energy import CallEnergy
from fi_attn_bench.timing.options import TimingError, TimingOptions

MEDIAN_CI_FACTOR = 1.57  # McGill notch: 95% interval of a median is +-1.57 IQR / sqrt(n)


STARVED_WARN_FRACTION = 0.01


# Samples spread wider than this (IQR / median, %): the calls ran at different speeds for
# stretches of time, so the median moves between runs (docs/DESIGN.md, drift_pct).
WIDE_SPREAD_NOTE_PCT = 5.0


# Consecutive blocks of a case's samples whose medians tell drift from jitter (non-overlapping
# batch means): a GPU at its power limit runs for stretches at one clock, so neighbouring
# samples are not independent and the interval from all samples alone is too narrow.
# Student's t for DRIFT_BLOCKS - 1 degrees of freedom.  Reported in a note; it does not
# decide when to stop (``should_stop``).
DRIFT_BLOCKS = 5


DRIFT_T95 = 2.776


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of already sorted values."""
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    weight = position - low
    return sorted_values[low] * (1.0 - weight) + sorted_values[high] * weight


@dataclass(frozen=True)
class Measurement:
    """Raw samples of one case (ms per run()) and how they were taken; statistics computed once."""

    samples: tuple[float, ...]
    timer: str
    l2: str
    kernels: tuple[str, ...] = ()
    runs_per_sample: int = 1  # a CUDA-graph sample averages several runs
    per_call: bool = True  # False when some profiler batch fell back to its mean per call
    # GPU time of the timed batches, L2 flushes between calls included (0: not known)
    batch_gpu_ms: float = 0.0
    starved_calls: int = 0  # "stream" samples that include a wait for the CPU (see Batch)
    # Samples of batches the throttle policy judged throttled, and those of them dropped
    # (none when every batch was throttled: see ``fi_attn_bench.timing.loop.kept_batches``)
    throttled_samples: int = 0
    discarded_samples: int = 0
    energy: CallEnergy | None = None  # energy per call (None: no counter was read)

    def __post_init__(self):
        if not self.samples:
            raise TimingError("no timed sample")
        if not all(math.isfinite(s) and s >= 0 for s in self.samples):
            raise TimingError(f"invalid timed samples: {self.samples[:5]}")

    @cached_property
    def _sorted(self) -> tuple[float, ...]:
        return tuple(sorted(self.samples))

    @cached_property
    def median(self) -> float:
        return quantile(self._sorted, 0.5)

    @cached_property
    def min(self) -> float:
        return self._sorted[0]

    @cached_property
    def max(self) -> float:
        return self._sorted[-1]

    @cached_property
    def q1(self) -> float:
        return quantile(self._sorted, 0.25)

    @cached_property
    def q3(self) -> float:
        return quantile(self._sorted, 0.75)

    @property
    def timed_ms(self) -> float:
        """Device (or wall) time spent in the timed runs: the cost side of the sweep."""
        return sum(self.samples) * self.runs_per_sample

    @property
    def starved_fraction(self) -> float:
        return self.starved_calls / len(self.samples)

    @cached_property
    def noise_pct(self) -> float:
        """Interquartile range relative to the median, in percent; NaN (unknown, an empty
        cell) from a single sample, which has no spread to judge by."""
        if len(self.samples) < 2:
            return math.nan
        if self.median <= 0:
            return math.inf
        return (self.q3 - self.q1) / self.median * 100.0

    @cached_property
    def drift_pct(self) -> float:
        """How far the median of these samples may sit from another run's (``drift_ci_pct``)."""
        return drift_ci_pct(self.samples)

    def columns(self) -> dict[str, object]:
        """The optional CSV columns this measurement fills (median goes to time_ms)."""
        return {
            "samples": len(self.samples),
            "time_min_ms": self.min,
            "time_q1_ms": self.q1,
            "time_q3_ms": self.q3,
            "time_max_ms": self.max,
            "noise_pct": self.noise_pct,
            "drift_pct": self.drift_pct,
            "kernels": ";".join(self.kernels),
            **(self.energy.columns() if self.energy is not None else {}),
        }


@dataclass(frozen=True)
class Batch:
    """What one batch of timed calls gave: samples in ms and the kernel names counted."""

    samples_ms: tuple[float, ...]
    kernels: frozenset[str] = frozenset()
    per_call: bool = True  # False: one sample per batch (its events could not be split by call)
    gpu_ms: float = 0.0  # GPU time of the batch's calls, their flushes included (0: not known)
    # Calls whose first kernel started more than STARVED_GAP_NS later after the preceding
    # work than the batch's median call: the CPU had not launched them in time, and a
    # "stream" sample counts that wait.  The queue-ahead spin exists to keep this at 0.
    starved: int = 0


def clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def batch_calls(
    per_call_ms: float, remaining_s: float, wall_ms: float, options: TimingOptions
) -> int:
    """Calls in the next batch: enough GPU time to amortize the timer, within the budget."""
    wanted = math.ceil(options.batch_target_ms / max(per_call_ms, 1e-6))
    wanted = clamp(wanted, options.min_batch_calls, options.max_batch_calls)
    affordable = max(1, int(remaining_s * 1e3 / max(wall_ms, 1e-6)))
    return min(wanted, affordable)


def stop_noise_pct(samples: Sequence[float], rule: str = "spread") -> float:
    """Noise the stop hook compares with its target, in % of the median.

    ``spread``: IQR / median (what ``noise_pct`` reports; per-call jitter does not shrink
    with more samples).  ``median_ci``: half-width of the median's 95% interval,
    1.57 IQR / sqrt(n) / median, which does shrink: jittery short kernels stop early.
    """
    ordered = sorted(samples)
    median = quantile(ordered, 0.5)
    if median <= 0:
        return math.inf
    spread = (quantile(ordered, 0.75) - quantile(ordered, 0.25)) / median * 100.0
    if rule == "median_ci":
        return MEDIAN_CI_FACTOR * spread / math.sqrt(len(ordered))
    return spread


def drift_ci_pct(samples: Sequence[float], blocks: int = DRIFT_BLOCKS) -> float:
    """Half-width of the median's 95% interval judged from ``blocks`` consecutive blocks of
    the samples (in the order they were taken), in % of the median: t x stdev(block
    medians) / sqrt(blocks).  Jitter between single calls hardly moves the block medians;
    stretches at another clock do, which is what makes a median move between runs.  NaN
    when there are fewer samples than blocks: nothing to judge by."""
    size = len(samples) // blocks
    if size < 1:
        return math.nan
    medians = [statistics.median(samples[i * size : (i + 1) * size]) for i in range(blocks)]
    median = statistics.median(samples)
    if median <= 0:
        return math.inf
    return DRIFT_T95 * statistics.stdev(medians) / math.sqrt(blocks) / median * 100.0
