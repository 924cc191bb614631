"""Change points on clock-normalized time.

Per device, results form a matrix (runs x cases) of log time.  Three steps remove
machine noise before a change-point search (ruptures' ``KernelCPD``, linear kernel:
least-squares segmentation with a penalty) looks at each case:

1. clock: where a case's time follows the SM clock (the slope of its run-to-run log
   time on log clock), time is scaled to the case's median clock by that exponent;
2. shared drift: the median over cases of each run's deviation is a run-wide factor
   (a slower machine that day); it is removed from every case and searched on its own;
3. one-run blips: a running median of three removes a single slow run (the newest
   run included), while a level held for two runs passes.

A change point is the first run at a new level, its size the ratio of the medians
around it, its confidence one minus Welch's t-test p-value between the two segments.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SHARED_DRIFT_MIN_CASES = 8  # fewer cases cannot tell a run-wide factor from a case's change
MIN_CLOCK_SPREAD = 1e-4  # log-clock spread below this: the clock did not move, nothing to fit
MAX_CLOCK_EXPONENT = 1.5
SIGMA_FLOOR = 5e-4  # 0.05 %: below this, noise is rounding and a penalty would explode
MIN_SERIES_RUNS = 10  # fewer runs give no trustworthy noise estimate


@dataclass(frozen=True)
class DetectionSettings:
    """How series are cleaned and how strict the search is."""

    penalty: float = 15.0  # on the series in units of its noise; larger: fewer, surer points
    min_change_pct: float = 1.5  # smaller level changes are not reported
    normalize_clock: bool = True
    remove_shared_drift: bool = True
    median_filter: bool = True
    min_segment_runs: int = 3  # a new level must hold this many (filtered) runs
    min_confidence: float = 0.9  # Welch confidence between the segments; drops most chance levels
    min_change_sigmas: float = 2.5  # a reported change is also this many noise levels large
    min_baseline_runs: int = 8  # the first change needs this many runs before it to compare with


@dataclass(frozen=True)
class ChangePoint:
    """A level change in one series: the first run at the new level."""

    series: int  # column of the matrix; -1 for the shared run-wide series
    run: int  # row of the matrix
    size_pct: float  # new level / old level - 1, in %
    confidence: float  # 1 - p of Welch's t-test between the segments


@dataclass(frozen=True)
class SeriesNormalization:
    """What was done to one case's times before the search."""

    clock_exponent: float  # time ~ clock ** -exponent was removed; 0: not scaled
    scaled: bool


@dataclass(frozen=True)
class Detection:
    change_points: tuple[ChangePoint, ...]
    normalization: tuple[SeriesNormalization, ...]
    shared_drift: np.ndarray  # per run, log factor removed from every case (0 if none)


DEFAULT_SETTINGS = DetectionSettings()

Engine = Callable[[np.ndarray, float, int], list[int]]


def kernel_cpd_breakpoints(signal: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """Segment starts (excluding 0) of ``signal`` by ruptures' penalized KernelCPD."""
    import ruptures

    detector = ruptures.KernelCPD(kernel="linear", min_size=min_size, jump=1)
    ends = detector.fit(signal).predict(pen=penalty)
    return [int(end) for end in ends[:-1]]


def detect(
    time_ms: np.ndarray,
    clock_MHz: np.ndarray,
    settings: DetectionSettings = DEFAULT_SETTINGS,
    engine: Engine = kernel_cpd_breakpoints,
) -> Detection:
    """Change points of every column of a (runs x cases) matrix; NaN marks no result."""
    with np.errstate(divide="ignore", invalid="ignore"):
        log_time = np.where(time_ms > 0, np.log(time_ms), np.nan)
        log_clock = np.where(clock_MHz > 0, np.log(clock_MHz), np.nan)
    normalization = tuple(
        clock_normalization(log_time[:, column], log_clock[:, column], settings)
        for column in range(log_time.shape[1])
    )
    exponents = np.array([n.clock_exponent for n in normalization])
    scaled = log_time + exponents * centered(log_clock)
    drift = shared_drift(scaled) if settings.remove_shared_drift else np.zeros(len(scaled))
    residual = scaled - drift[:, None]
    points = [
        ChangePoint(column, run, size, confidence)
        for column in range(residual.shape[1])
        for run, size, confidence in series_change_points(residual[:, column], settings, engine)
    ]
    if settings.remove_shared_drift and np.any(drift):
        points += [
            ChangePoint(-1, run, size, confidence)
            for run, size, confidence in series_change_points(drift, settings, engine)
        ]
    return Detection(tuple(points), normalization, drift)


def clock_normalization(
    log_time: np.ndarray, log_clock: np.ndarray, settings: DetectionSettings
) -> SeriesNormalization:
    """The clock exponent of one case, fitted on run-to-run differences (steps cancel)."""
    unscaled = SeriesNormalization(0.0, False)
    if not settings.normalize_clock:
        return unscaled
    valid = np.isfinite(log_time) & np.isfinite(log_clock)
    if valid.sum() < 4:
        return unscaled
    d_time, d_clock = np.diff(log_time[valid]), np.diff(log_clock[valid])
    if np.std(d_clock) < MIN_CLOCK_SPREAD:
        return unscaled
    keep = np.abs(d_time - np.median(d_time)) <= 5 * max(mad(d_time), SIGMA_FLOOR)
    denominator = float(np.sum(d_clock[keep] ** 2))
    if denominator <= 0:
        return unscaled
    exponent = float(
        np.clip(-np.sum(d_clock[keep] * d_time[keep]) / denominator, 0, MAX_CLOCK_EXPONENT)
    )
    if exponent < 0.05 or mad(d_time + exponent * d_clock) >= 0.95 * mad(d_time):
        return unscaled
    return SeriesNormalization(exponent, True)


def centered(log_clock: np.ndarray) -> np.ndarray:
    """Log clock minus each case's median clock; 0 where unknown."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a case that never had a clock
        return np.nan_to_num(log_clock - np.nanmedian(log_clock, axis=0))


def shared_drift(log_time: np.ndarray) -> np.ndarray:
    """Per run, the median over cases of their deviation from their own median."""
    finite = np.isfinite(log_time)
    drift = np.zeros(log_time.shape[0])
    if log_time.shape[1] < SHARED_DRIFT_MIN_CASES:
        return drift
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runs or cases without results
        deviation = log_time - np.nanmedian(log_time, axis=0)
        medians = np.nanmedian(deviation, axis=1)
    counts = finite.sum(axis=1)
    enough = counts >= SHARED_DRIFT_MIN_CASES
    drift[enough] = medians[enough]
    return drift


def mad(values: np.ndarray) -> float:
    """Median absolute deviation scaled to a normal standard deviation."""
    if len(values) == 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(values - np.median(values))))


def series_change_points(
    values: np.ndarray, settings: DetectionSettings, engine: Engine
) -> list[tuple[int, float, float]]:
    """(run, size %, confidence) of each change in one series (NaN: run without a result)."""
    positions = np.flatnonzero(np.isfinite(values))
    series = values[positions]
    if len(series) < MIN_SERIES_RUNS:
        return []
    cleaned = running_median3(series) if settings.median_filter else series
    sigma = noise_level(series)
    if len(cleaned) < 2 * settings.min_segment_runs:
        return []
    starts = engine((cleaned / sigma).reshape(-1, 1), settings.penalty, settings.min_segment_runs)
    bounds = [0, *starts, len(series)]
    found = []
    for before, start, after in zip(bounds, bounds[1:], bounds[2:], strict=False):
        size = float(
            np.expm1(np.median(series[start:after]) - np.median(series[before:start])) * 100
        )
        confidence = welch_confidence(series[before:start], series[start:after])
        if before == 0 and start < settings.min_baseline_runs:
            continue
        floor = max(settings.min_change_pct, settings.min_change_sigmas * sigma * 100)
        if abs(size) >= floor and not confidence < settings.min_confidence:
            found.append((int(positions[start]), size, confidence))
    return found


def noise_level(series: np.ndarray) -> float:
    """Run-to-run noise of a series: the spread of its successive differences (steps
    touch one difference each), winsorized at four robust deviations so a blip counts
    but cannot dominate, and a bimodal case shows its full spread."""
    differences = np.diff(series)
    scale = max(mad(differences), SIGMA_FLOOR)
    clipped = np.clip(
        differences, np.median(differences) - 4 * scale, np.median(differences) + 4 * scale
    )
    return max(float(np.std(clipped)) / np.sqrt(2), SIGMA_FLOOR)


def running_median3(series: np.ndarray) -> np.ndarray:
    """Median of each point and its neighbours; the newest point, without a right
    neighbour, takes the median of itself, the point before and that point's filtered
    value, so a one-run blip there is removed and a level seen twice is kept."""
    if len(series) < 3:
        return series.copy()
    middle = np.median(np.lib.stride_tricks.sliding_window_view(series, 3), axis=1)
    first = np.median(series[:3])
    last = np.median([middle[-1], series[-2], series[-1]])
    return np.concatenate(([first], middle, [last]))


def welch_confidence(before: np.ndarray, after: np.ndarray) -> float:
    from scipy import stats

    if len(before) < 2 or len(after) < 2:
        return float("nan")
    if np.ptp(before) == 0 and np.ptp(after) == 0:
        return 1.0 if before[0] != after[0] else 0.0
    result = stats.ttest_ind(before, after, equal_var=False)
    return float(1 - result.pvalue) if np.isfinite(result.pvalue) else float("nan")
