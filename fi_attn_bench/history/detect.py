"""Change points on clock-normalized time.

Per device, results form a matrix (runs x cases) of log time.  Three steps remove
machine noise before a change-point search (ruptures' ``KernelCPD``, linear kernel:
least-squares segmentation with a penalty) looks at each case:

1. clock: where a case's time follows the SM clock (the least-squares slope of its
   run-to-run log time on log clock, 2 standard errors above 0), time is scaled to the
   case's median clock by that exponent;
2. shared drift: the median over cases of each run's deviation from the case's own level
   is a run-wide factor (a slower machine that day); the levels come from a first search
   on each case, so the cases that stepped do not pull the factor.  It is removed from
   every case and searched on its own, except a lasting shift of it that fewer than 80 %
   of the cases follow, of those that either followed it or stayed (a case that stepped
   itself in the window does neither), where more stayed than a machine shift leaves by
   chance: one commit slowing many cases moves the factor, and that stays in the cases it
   touched (a machine change moves them all, and is removed);
3. one-run blips: the search sees a running median of three (the newest run included).

A change point is the first run at a new level, its size the ratio of the medians around
it, its confidence one minus Welch's t-test p-value between the two segments.  It is
reported when it is large (in % and in noise levels), confident, and its shift passes a
one-sided t test whose noise is estimated from the series itself (so a short series, with
an uncertain noise, needs a larger shift); a change of 3 % or more passes that test at a
looser p, since chance levels that large are rare.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from fi_attn_bench.results.series_noise import MIN_SERIES_RUNS, SIGMA_FLOOR, mad, noise_level

SHARED_DRIFT_MIN_CASES = 8  # fewer cases cannot tell a run-wide factor from a case's change
MIN_CLOCK_SPREAD = 1e-4  # log-clock spread below this: the clock did not move, nothing to fit
MAX_CLOCK_EXPONENT = 1.5
MIN_CLOCK_T = 2.0  # a case is scaled where its exponent is this many standard errors above 0
CHANCE_STAYER_SHARE = 0.1  # a telling case that followed a machine shift reads as stayed
CHANCE_STAYER_P = 0.05  # a commit's shift needs stayers this improbable under a machine shift
REPORT_DELAY_RUNS = 3  # sensitivity is quoted for a step seen by the third run after it


@dataclass(frozen=True)
class DetectionSettings:
    """How series are cleaned and how strict the search is."""

    penalty: float = 15.0  # on the series in units of its noise; larger: fewer, surer points
    min_change_pct: float = 1.5  # smaller level changes are not reported
    normalize_clock: bool = True
    remove_shared_drift: bool = True
    drift_passes: int = 2  # re-estimates of the run-wide factor against each case's levels
    drift_keep_pct: float = 0.5  # the smallest lasting run-wide shift left in the cases
    machine_shift_share: float = 0.8  # a lasting shift this share follows is the machine's (0: all)
    median_filter: bool = True
    min_segment_runs: int = 4  # a new level must hold this many (filtered) runs: a step and the
    # 3 runs after it, so a two-run excursion and its neighbour are not one
    moved_level_runs: int = 3  # a shorter level counts when each of its runs moved by half its
    # shift: a step seen 3 runs has all 3 at the new level, two slow runs and a neighbour do not
    min_confidence: float = 0.9  # Welch confidence between the segments; drops most chance levels
    min_change_sigmas: float = 2.0  # a reported change is also this many noise levels large
    false_alarm_p: float = 1e-4  # one-sided p of the shift test (noise from the series itself)
    large_change_pct: float = 3.0  # a change this large passes the shift test at large_change_p
    large_change_p: float = 1e-3  # chance levels are small, so a large one needs less proof
    outlier_sigmas: float = (
        2.5  # in the shift test, a run this far from its neighbours is pulled in
    )
    min_baseline_runs: int = 8  # a change needs this many runs before it to compare with


@dataclass(frozen=True)
class ChangePoint:
    """A level change in one series: the first run at the new level."""

    series: int  # column of the matrix; -1 for the shared run-wide series
    run: int  # row of the matrix
    size_pct: float  # new level / old level - 1, in %
    confidence: float  # 1 - p of the shift test between the segments


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
    noise: np.ndarray  # per series, its noise per run as the search saw it (log; NaN: too short)


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
    removed = np.zeros(len(scaled))  # per run, the log factor taken out of every case
    if settings.remove_shared_drift:
        removed = shared_drift(scaled, settings, engine)
        if np.any(removed):
            removed = removed - lasting_levels(removed, scaled, settings, engine)
    residual = scaled - removed[:, None]
    points = [
        ChangePoint(column, run, size, confidence)
        for column in range(residual.shape[1])
        for run, size, confidence in series_change_points(residual[:, column], settings, engine)
    ]
    if np.any(removed):  # the run-wide series; a shift left in the cases is theirs
        whole = replace(settings, moved_level_runs=settings.min_segment_runs)  # episodes: 1-3 runs
        points += [
            ChangePoint(-1, run, size, confidence)
            for run, size, confidence in series_change_points(removed, whole, engine)
        ]
    noise = np.array([series_noise(residual[:, column]) for column in range(residual.shape[1])])
    return Detection(tuple(points), normalization, removed, noise)


def series_noise(values: np.ndarray) -> float:
    """The noise per run ``series_change_points`` estimates for a series (NaN: too short)."""
    series = values[np.isfinite(values)]
    return noise_level(series) if len(series) >= MIN_SERIES_RUNS else float("nan")


def smallest_step_pct(
    noise: float, runs_before: int, settings: DetectionSettings = DEFAULT_SETTINGS
) -> float:
    """The size floor (in %) a step must clear to be reported by the time the third run after
    it is added, in a series with this noise per run (log units) and ``runs_before`` runs
    before it: the size gates and the shift test's limit (smaller steps are seldom reported;
    the search and the Welch gate make steps at it a coin toss)."""
    from scipy import stats

    if not noise == noise or runs_before < 1:
        return float("nan")
    runs_after = REPORT_DELAY_RUNS + 1
    spread = noise * np.sqrt(1 / runs_before + 1 / runs_after)
    degrees = runs_before + runs_after - 2
    floor = max(settings.min_change_pct, settings.min_change_sigmas * noise * 100)

    def passing(p_limit: float) -> float:
        return max(floor, float(np.expm1(stats.t.isf(p_limit, degrees) * spread) * 100))

    small = passing(settings.false_alarm_p)
    if small < settings.large_change_pct:
        return small
    large_p = max(settings.false_alarm_p, settings.large_change_p)
    return max(settings.large_change_pct, passing(large_p))


def clock_normalization(
    log_time: np.ndarray, log_clock: np.ndarray, settings: DetectionSettings
) -> SeriesNormalization:
    """The clock exponent of one case, fitted by least squares on run-to-run differences
    (steps cancel), used where it is significantly above 0."""
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
    d_time, d_clock = d_time[keep], d_clock[keep]
    denominator = float(np.sum(d_clock**2))
    if denominator <= 0 or len(d_time) < 3:
        return unscaled
    slope = -float(np.sum(d_clock * d_time)) / denominator
    residual = d_time + slope * d_clock
    standard_error = np.sqrt(np.sum(residual**2) / (len(d_time) - 1) / denominator)
    if not slope >= MIN_CLOCK_T * standard_error:
        return unscaled
    return SeriesNormalization(float(min(slope, MAX_CLOCK_EXPONENT)), True)


def centered(log_clock: np.ndarray) -> np.ndarray:
    """Log clock minus each case's median clock; 0 where unknown."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a case that never had a clock
        return np.nan_to_num(log_clock - np.nanmedian(log_clock, axis=0))


def shared_drift(
    log_time: np.ndarray,
    settings: DetectionSettings = DEFAULT_SETTINGS,
    engine: Engine = kernel_cpd_breakpoints,
) -> np.ndarray:
    """Per run, the median over cases of their deviation from their own level: first their
    median, then (``drift_passes`` times) the piecewise level a search finds in each case."""
    drift = run_medians(log_time - nanmedian(log_time, axis=0))
    for _ in range(settings.drift_passes if np.any(drift) else 0):
        levels = np.column_stack(
            [piecewise_levels(column, settings, engine) for column in (log_time - drift[:, None]).T]
        )
        drift = run_medians(log_time - levels)
    return drift


def nanmedian(values: np.ndarray, axis: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runs or cases without results
        return np.nanmedian(values, axis=axis)


def run_medians(deviation: np.ndarray) -> np.ndarray:
    """Each run's median deviation, where enough cases have a result (else 0)."""
    drift = np.zeros(deviation.shape[0])
    if deviation.shape[1] < SHARED_DRIFT_MIN_CASES:
        return drift
    enough = np.isfinite(deviation).sum(axis=1) >= SHARED_DRIFT_MIN_CASES
    drift[enough] = nanmedian(deviation[enough], axis=1)
    return drift


def piecewise_levels(series: np.ndarray, settings: DetectionSettings, engine: Engine) -> np.ndarray:
    """The series replaced by the median of each segment the search finds (NaN stays NaN)."""
    levels = np.full_like(series, np.nan)
    positions = np.flatnonzero(np.isfinite(series))
    values = series[positions]
    if len(values) < 2 * settings.min_segment_runs:
        levels[positions] = np.median(values) if len(values) else np.nan
        return levels
    cleaned = running_median3(values) if settings.median_filter else values
    starts = engine(
        (cleaned / noise_level(values)).reshape(-1, 1), settings.penalty, settings.min_segment_runs
    )
    bounds = [0, *starts, len(values)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        levels[positions[start:end]] = np.median(values[start:end])
    return levels


def lasting_levels(
    drift: np.ndarray, log_time: np.ndarray, settings: DetectionSettings, engine: Engine
) -> np.ndarray:
    """The run-wide factor's lasting shifts that most cases do not share (a code change in
    some of them pulls the factor; a machine change moves them all): a step function at the
    changes the factor's own search reports, down to ``drift_keep_pct``."""
    confirmed = replace(
        settings, min_change_pct=settings.drift_keep_pct, moved_level_runs=settings.min_segment_runs
    )  # a 1-3 run drift episode at the series' end moves every run: not a lasting shift
    starts = [run for run, _, _ in series_change_points(drift, confirmed, engine)]
    bounds = [0, *starts, len(drift)]
    medians = [float(np.median(drift[a:b])) for a, b in zip(bounds, bounds[1:], strict=False)]
    levels = np.zeros_like(drift)
    kept = 0.0
    for index in range(1, len(medians)):
        shift = medians[index] - medians[index - 1]
        before, start, end = bounds[index - 1], bounds[index], bounds[index + 1]
        if cases_own_shift(log_time[before:start], log_time[start:end], shift, settings):
            kept += shift
        levels[start:end] = kept
    return levels


def cases_own_shift(
    before: np.ndarray, after: np.ndarray, shift: float, settings: DetectionSettings
) -> bool:
    """Whether a lasting run-wide shift is the cases' own (a commit), not the machine's: fewer
    than ``machine_shift_share`` of the cases that can tell followed it, and more of them
    stayed than a machine shift leaves by chance (each telling case misread as staying with
    probability ``CHANCE_STAYER_SHARE``: heavy-tailed noise, or its own step cancelling the
    shift).  Without that test, 1 or 2 chance stayers among the 3-7 cases that can tell 3-4
    runs after a drift episode left the episode in every case (6 false points at once)."""
    from scipy import stats

    followed, stayed = follow_counts(before, after, shift)
    telling = followed + stayed
    if telling == 0 or followed / telling >= settings.machine_shift_share:
        return False
    return float(stats.binom.sf(stayed - 1, telling, CHANCE_STAYER_SHARE)) < CHANCE_STAYER_P


def share_following(before: np.ndarray, after: np.ndarray, shift: float) -> float:
    """Of the cases whose own level either moved by about ``shift`` or stayed (each within
    half of it), the share that moved (1.0 when none can tell)."""
    followed, stayed = follow_counts(before, after, shift)
    if followed + stayed == 0:
        return 1.0
    return followed / (followed + stayed)


def follow_counts(before: np.ndarray, after: np.ndarray, shift: float) -> tuple[int, int]:
    """(followed, stayed): the cases whose own level moved by about ``shift``, and those
    whose level stayed (each within half of it).  A case that stepped itself near the shift
    moved by neither and is left out: counted as not following, the 40 % of cases that
    stepped during a machine's drift episode made it look like their code change, left in
    every case."""
    level_before, level_after = nanmedian(before, axis=0), nanmedian(after, axis=0)
    moved = level_after - level_before
    residual = np.vstack([before - level_before, after - level_after])
    spread = 1.4826 * nanmedian(np.abs(residual), axis=0)
    counts = np.isfinite(before).sum(axis=0), np.isfinite(after).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        uncertainty = 1.25 * spread * np.sqrt(1 / counts[0] + 1 / counts[1])
    # a case whose own noise cannot tell the shift from none says nothing either way
    telling = np.isfinite(moved) & (uncertainty <= 0.25 * abs(shift))
    moved = moved[telling]
    followed = int(np.sum(np.abs(moved - shift) <= 0.5 * abs(shift)))
    stayed = int(np.sum(np.abs(moved) <= 0.5 * abs(shift)))
    return followed, stayed


def series_change_points(
    values: np.ndarray, settings: DetectionSettings, engine: Engine
) -> list[tuple[int, float, float]]:
    """(run, size %, confidence) of each change in one series (NaN: run without a result)."""
    positions = np.flatnonzero(np.isfinite(values))
    series = values[positions]
    if len(series) < max(MIN_SERIES_RUNS, 2 * settings.min_segment_runs):
        return []
    cleaned = running_median3(series) if settings.median_filter else series
    sigma = noise_level(series)
    tamed = cleaned + np.clip(
        series - cleaned, -settings.outlier_sigmas * sigma, settings.outlier_sigmas * sigma
    )
    shortest = min(settings.min_segment_runs, settings.moved_level_runs)
    starts = engine((cleaned / sigma).reshape(-1, 1), settings.penalty, shortest)
    bounds = [0, *starts, len(series)]
    found = []
    for before, start, after in zip(bounds, bounds[1:], bounds[2:], strict=False):
        if start < settings.min_baseline_runs:
            continue
        shift = float(np.median(series[start:after]) - np.median(series[before:start]))
        if after - start < settings.min_segment_runs and not all_moved(
            series[start:after] - np.median(series[before:start]), shift
        ):
            continue
        size = float(np.expm1(shift) * 100)
        confidence = welch_confidence(series[before:start], series[start:after])
        p_value = shift_p_value(tamed[before:start], tamed[start:after], sigma, len(series) - 2)
        floor = max(settings.min_change_pct, settings.min_change_sigmas * sigma * 100)
        if (
            abs(size) >= floor
            and not confidence < settings.min_confidence
            and p_value <= shift_p_limit(size, settings)
        ):
            found.append((int(positions[start]), size, confidence))
    return found


def all_moved(deviation: np.ndarray, shift: float) -> bool:
    """Whether each run of a level moved from the level before by over half its ``shift``."""
    return bool(np.all(deviation * np.sign(shift) > 0.5 * abs(shift)))


def shift_p_limit(size_pct: float, settings: DetectionSettings) -> float:
    """The largest p-value of the shift test that reports a change of this size."""
    if abs(size_pct) >= settings.large_change_pct:
        return max(settings.false_alarm_p, settings.large_change_p)
    return settings.false_alarm_p


def shift_p_value(before: np.ndarray, after: np.ndarray, sigma: float, degrees: int) -> float:
    """One-sided p-value of the shift of the means under Student's t, with the series' noise
    ``sigma`` estimated on ``degrees`` degrees of freedom (few runs: a wider tail)."""
    from scipy import stats

    shift = abs(float(np.mean(after) - np.mean(before)))
    z = shift / (sigma * np.sqrt(1 / len(before) + 1 / len(after)))
    return float(stats.t.sf(z, degrees))


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
    # Welch's t-test by hand: scipy's ttest_ind warns of cancellation on near-constant groups.
    spread_before = np.var(before, ddof=1) / len(before)
    spread_after = np.var(after, ddof=1) / len(after)
    spread = spread_before + spread_after
    degrees = spread**2 / (
        spread_before**2 / (len(before) - 1) + spread_after**2 / (len(after) - 1)
    )
    t = (np.mean(after) - np.mean(before)) / np.sqrt(spread)
    p_value = 2 * stats.t.sf(abs(t), degrees)
    return float(1 - p_value) if np.isfinite(p_value) else float("nan")
