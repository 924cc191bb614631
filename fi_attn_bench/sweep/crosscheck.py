"""What the parent holds a worker's samples against: its own clock, a floor no real kernel
can beat, and the paired ratio (pure functions; ``fi_attn_bench.sweep.isolation`` calls
them, docs/INTEGRITY.md explains them)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from fi_attn_bench.timing.paired import PairedRatio
from fi_attn_bench.timing.statistics import MEDIAN_CI_FACTOR, quantile

CPU_CLOCK_SHARE = 0.5
"""On the CPU a batch is its calls back to back, so its samples add up to nearly the wall
time the parent saw between its beacons (0.93-0.99 for 0.4 ms calls here); the best batch
may not report less than this share.  A worker reporting a third of its time is at 0.33."""

CPU_UNSEEN_MS_PER_CALL = 0.05
"""... unless the wall time its samples leave out is at most this per call: the loop's own
work between calls (two clock reads, an append: 1-10 us per call on a loaded 2-core machine),
which is most of a batch of 1 us calls.  A cheat must hide more than this per call."""

PIPE_LATENCY_MS = 2.0
"""Per batch, this much of the wall time the parent saw may be the pipe's and the parent's
own latency (a loaded parent reads a beacon late by a few ms: 0.5 ms batches then read as
3 ms), so it is not counted as time the samples left out."""

SPAN_FACTOR, SPAN_SLACK_MS = 1.1, 50.0
"""The samples of all batches may add up to at most this share of the parent's span from the
first beacon to the last, plus this (the first beacon read late by a loaded parent)."""

CPU_PEAK_GB_S_PER_THREAD = 1000.0
CPU_PEAK_TFLOPS_PER_THREAD = 5.0
"""The CPU floor's declared peaks per torch thread, conservative for any CPU: twice a core's
L1 load bandwidth (2 x 64 B x 4 GHz = 512 GB/s) and above a core's AMX bf16 rate (about 4
TFLOP/s at 4 GHz); DRAM is 10-100x slower."""

WARM_L2_BANDWIDTH_FACTOR = 6.0
"""With a warm L2 a kernel may read its inputs from L2, at several times the DRAM bandwidth
(H100: about 2.5-3x); the floor's bandwidth is the peak times this."""

PAIRED_SLACK = 0.3
"""The per-implementation medians' ratio and the paired ratio may differ by this much in log
units (35 %) beyond their intervals: drift moves medians, the paired ratio cancels it; a
row reported at a third of its time is 1.1 away."""


@dataclass(frozen=True)
class BatchWindow:
    """One timed batch as the parent saw it: its wall ms between the worker's beacons, and
    the samples (count and sum) the worker said it took."""

    session: int
    wall_ms: float
    samples: int
    sum_ms: float
    harness_ms: float = 0.0  # the worker's refreshes and checks between calls, as it says
    allowed_ms: float = 0.0  # of that, what this process accepts (``allow_harness_time``)
    preempted_ms: float = 0.0  # the worker waited for a CPU meanwhile (the kernel's count)


def clock_failure(windows: Sequence[BatchWindow], session: int, on_cpu: bool) -> str | None:
    """On the CPU: even the best batch of ``session`` reports less than ``CPU_CLOCK_SHARE``
    of the parent's wall time for it.  None when it passes or nothing can be judged."""
    if not on_cpu:
        return None
    mine = [w for w in windows if w.session == session and w.samples and w.wall_ms > 0]
    if not mine:
        return None
    # the best batch: a loaded machine preempts the worker between calls in some batches (time
    # its samples rightly leave out), while a worker that shrinks its samples shrinks every one
    # preemption excuses only the unseen time: time a call was preempted is in its own sample
    # too, so it must not shrink the share's wall time (a cheat's third would read as more)
    share = max(w.sum_ms / max(w.wall_ms - w.allowed_ms, 1e-9) for w in mine)
    unseen = min(
        max(w.wall_ms - w.allowed_ms - w.preempted_ms - w.sum_ms - PIPE_LATENCY_MS, 0.0) / w.samples
        for w in mine
    )
    if share >= CPU_CLOCK_SHARE or unseen <= CPU_UNSEEN_MS_PER_CALL:
        return None
    return (
        f"the best timed batch reported {share:.0%} of the wall time the harness saw for "
        f"it, leaving out {unseen:.3g} ms per call ({len(mine)} batches; on the CPU at least "
        f"{CPU_CLOCK_SHARE:.0%}, or at most {CPU_UNSEEN_MS_PER_CALL:g} ms per call left out "
        f"beyond {PIPE_LATENCY_MS:g} ms per batch)"
    )


CPU_BUSY_SHARE = 0.5
"""On the CPU the worker computes its timed calls itself: from the first beacon of a case to
its result, its threads must have run on a CPU (or waited for one) for at least this share
of the samples all its batches report (honestly more than all of them: the checks run too).
A worker that sleeps through batches it reports (a reply forged into the pipe, its beacons
paced to match the parent's clock) is near 0."""


def idle_failure(windows: Sequence[BatchWindow], busy_ms: float | None) -> str | None:
    """``busy_ms``: the kernel's count of the worker's CPU time and runqueue wait from the
    first beacon to the result; the parent may read the first beacon late, by up to
    ``PIPE_LATENCY_MS``, so that much is allowed."""
    if busy_ms is None:
        return None
    reported = sum(w.sum_ms for w in windows)
    if busy_ms + PIPE_LATENCY_MS >= CPU_BUSY_SHARE * reported:
        return None
    return (
        f"the worker ran on a CPU for {busy_ms:.4g} ms while its batches reported "
        f"{reported:.4g} ms of samples (on the CPU at least {CPU_BUSY_SHARE:.0%}): it "
        "reported samples while it slept"
    )


HARNESS_COST_FACTOR = 3.0
"""The worker's refreshes and sampled checks between calls are accepted up to this many times
what they cost in this process (a loaded machine slows one process more than the other)."""


@dataclass(frozen=True)
class HarnessCosts:
    """What one fresh-values refresh and one reference call cost in this process (ms), and
    the chance that timed call n is checked (None: no sampled checks)."""

    refresh_ms: float
    reference_ms: float
    chance: Callable[[int], float] | None


def allow_harness_time(
    windows: Sequence[BatchWindow], session: int, costs: HarnessCosts
) -> list[BatchWindow]:
    """``windows`` with each of ``session``'s batches allowed the harness time its worker
    reported, capped by what its calls' refreshes and (at twice the expected count, plus
    one) sampled checks cost here: a worker cannot hide a call's time as harness time."""
    allowed, calls = [], 0
    for window in windows:
        if window.session != session:
            allowed.append(window)
            continue
        numbers = range(calls + 1, calls + window.samples + 1)
        calls += window.samples
        checks = sum(map(costs.chance, numbers)) if costs.chance is not None else -0.5
        cap = HARNESS_COST_FACTOR * (
            window.samples * costs.refresh_ms + (2 * checks + 1) * costs.reference_ms
        )
        allowed.append(replace(window, allowed_ms=min(window.harness_ms, cap)))
    return allowed


def span_failure(windows: Sequence[BatchWindow], span_ms: float) -> str | None:
    """The batches' samples add up to more than the parent's span of them allows."""
    reported = sum(w.sum_ms for w in windows)
    limit = SPAN_FACTOR * span_ms + SPAN_SLACK_MS
    if reported <= limit:
        return None
    return (
        f"the timed batches reported {reported:.4g} ms of samples within {span_ms:.4g} ms of "
        f"the harness's wall time (limit {limit:.4g} ms)"
    )


def batch_sum_failure(
    windows: Sequence[BatchWindow], session: int, samples: Sequence[float]
) -> str | None:
    """On the CPU the measurement's samples are its batches' samples: their sums must agree
    (a worker that shrinks the samples after its batches reported them)."""
    mine = [w for w in windows if w.session == session]
    beaconed, counted = sum(w.sum_ms for w in mine), sum(w.samples for w in mine)
    if not mine or (len(samples) == counted and math.isclose(sum(samples), beaconed, rel_tol=1e-6)):
        return None
    return (
        f"the row's {len(samples)} samples add up to {sum(samples):.6g} ms, its timed batches "
        f"reported {counted} adding up to {beaconed:.6g} ms"
    )


def floor_ms(io_bytes: float, flops: float, bandwidth_GB_s: float, tflops: float) -> float:
    """The least time any kernel needs: bytes at the bandwidth or FLOPs at the rate."""
    times = [0.0]
    if bandwidth_GB_s > 0 and math.isfinite(bandwidth_GB_s):
        times.append(io_bytes / (bandwidth_GB_s * 1e9) * 1e3)
    if tflops > 0 and math.isfinite(tflops):
        times.append(flops / (tflops * 1e12) * 1e3)
    return max(times)


def floor_failure(median_ms: float, floor: float, basis: str) -> str | None:
    if not median_ms < floor:
        return None
    return (
        f"a median of {median_ms:.4g} ms is below {floor:.4g} ms, the least time the case's "
        f"bytes and FLOPs take at {basis}"
    )


def _median_ci(samples: Sequence[float]) -> float:
    """The relative half-width of a median's 95 % interval (McGill), in log units."""
    ordered = sorted(samples)
    median = quantile(ordered, 0.5)
    if len(ordered) < 2 or median <= 0:
        return math.inf
    iqr = quantile(ordered, 0.75) - quantile(ordered, 0.25)
    return MEDIAN_CI_FACTOR * iqr / math.sqrt(len(ordered)) / median


def paired_failure(
    samples: Sequence[float], baseline: Sequence[float], ratio: PairedRatio
) -> str | None:
    """The medians' ratio and the paired ratio disagree beyond their noise."""
    mine, theirs = statistics.median(samples), statistics.median(baseline)
    if mine <= 0 or theirs <= 0 or ratio.ratio <= 0:
        return None
    medians = mine / theirs
    width = 0.0
    if ratio.interval is not None and ratio.interval[0] > 0:
        width = math.log(ratio.interval[1] / ratio.interval[0]) / 2
    allowed = width + _median_ci(samples) + _median_ci(baseline) + PAIRED_SLACK
    if abs(math.log(medians / ratio.ratio)) <= allowed:
        return None
    return (
        f"the medians' ratio {medians:.4g} and the paired ratio {ratio.ratio:.4g} disagree "
        f"beyond their noise (log distance {abs(math.log(medians / ratio.ratio)):.3g} > "
        f"{allowed:.3g})"
    )
