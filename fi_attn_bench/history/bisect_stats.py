"""The comparison behind each bisect step: is a revision's time different from, or the same
as, another's?  Pinpoint's rule: a two-sided rank test at alpha says "different"; "same" needs
an interval, so that it is a decision and not a failure to find a difference.

Two rank tests: Mann-Whitney U on the two sides' values (Pinpoint's), or Wilcoxon's signed-rank
test on the log ratios of the runs that shared a round (the bisect interleaves its runs in
rounds, so a machine that is slower for a while slows both sides of a round alike and cancels).

Each side is one value per fresh process (the case's time_ms), never the samples inside one
process, which share that process's memory layout and clock state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from statistics import NormalDist

import numpy as np

from fi_attn_bench.summarizer.rank_test import mann_whitney_p

DEFAULT_ALPHA = 0.001  # Pinpoint's significance level
DEFAULT_INTERVAL = 0.95  # confidence of the reported ratio interval
# Confidence of the interval that "the same" needs: a wrong "same" also needs a wrong
# "different" (at alpha) on the other end, so this one can be looser (benchmarks/bisect_trials.py).
DEFAULT_SAME_INTERVAL = 0.80
# Paired runs farther apart than this many times their median |log ratio| are left out: a run
# that met one of the machine's slow spells (VALIDATION "Bisect: trimmed pairs") swamps the ranks.
DEFAULT_TRIM = 4.0
MANN_WHITNEY, SIGNED_RANK = "mann-whitney", "signed-rank"
TESTS = (MANN_WHITNEY, SIGNED_RANK)
EXACT_SIGNED_RANK_PAIRS = 40  # up to this many pairs without ties, the exact distribution


class Verdict(Enum):
    DIFFERENT = "different"
    SAME = "same"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class RatioEstimate:
    """Hodges-Lehmann ratio of two sides' times (the median of all pairwise ratios) with its
    distribution-free (Moses) interval."""

    ratio: float
    low: float
    high: float
    confidence: float


@dataclass(frozen=True)
class Comparison:
    """One side against another: medians, ratio (second / first), p-value, repeats."""

    first_median_ms: float
    second_median_ms: float
    estimate: RatioEstimate
    p_value: float
    first_repeats: int
    second_repeats: int
    test: str = MANN_WHITNEY
    same_interval: RatioEstimate | None = None  # the interval "the same" is judged on
    pairs_kept: int | None = None  # signed-rank with a trim: the pairs the test used

    def different(self, alpha: float) -> bool:
        return self.p_value <= alpha

    def within(self, margin_log: float) -> bool:
        """The whole "same" interval lies within exp(+-margin_log): any change is smaller."""
        interval = self.same_interval or self.estimate
        return math.log(interval.low) > -margin_log and math.log(interval.high) < margin_log

    def describe(self) -> str:
        e = self.estimate
        return (
            f"{self.first_median_ms:.4g} -> {self.second_median_ms:.4g} ms, ratio {e.ratio:.4f} "
            f"[{e.low:.4f}, {e.high:.4f}] ({e.confidence:.0%}), p {self.p_value:.2g} "
            f"({self.test}), repeats {self.first_repeats}+{self.second_repeats}"
            + (f", {self.pairs_kept} pairs kept" if self.pairs_kept is not None else "")
        )


def ratio_estimate(first, second, confidence: float = DEFAULT_INTERVAL) -> RatioEstimate:
    """second / first as exp of the Hodges-Lehmann shift of log times, with Moses' interval
    (the normal approximation of U's distribution picks the order statistics)."""
    x = np.log(np.asarray(first, dtype=np.float64))
    y = np.log(np.asarray(second, dtype=np.float64))
    differences = np.sort((y[:, None] - x[None, :]).ravel())
    pairs = len(differences)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    lower_rank = int(
        math.floor(pairs / 2 - z * math.sqrt(len(x) * len(y) * (len(x) + len(y) + 1) / 12))
    )
    lower_rank = min(max(lower_rank, 0), pairs - 1)
    return RatioEstimate(
        ratio=float(math.exp(np.median(differences))),
        low=float(math.exp(differences[lower_rank])),
        high=float(math.exp(differences[pairs - 1 - lower_rank])),
        confidence=confidence,
    )


def paired_ratio_estimate(log_ratios, confidence: float = DEFAULT_INTERVAL) -> RatioEstimate:
    """exp of the Hodges-Lehmann centre of paired log ratios (the median of their Walsh
    averages) with the signed-rank interval."""
    d = np.asarray(log_ratios, dtype=np.float64)
    n = len(d)
    upper = np.triu_indices(n)
    walsh = np.sort(((d[:, None] + d[None, :]) / 2)[upper])
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    lower_rank = int(math.floor(n * (n + 1) / 4 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24)))
    lower_rank = min(max(lower_rank, 0), len(walsh) - 1)
    return RatioEstimate(
        ratio=float(math.exp(np.median(walsh))),
        low=float(math.exp(walsh[lower_rank])),
        high=float(math.exp(walsh[len(walsh) - 1 - lower_rank])),
        confidence=confidence,
    )


def signed_rank_p(differences) -> float:
    """Two-sided p of Wilcoxon's signed-rank test (zeros dropped): exact for up to
    EXACT_SIGNED_RANK_PAIRS pairs without ties, else the normal approximation with tie and
    continuity correction; 1.0 with no nonzero difference."""
    d = np.asarray(differences, dtype=np.float64)
    d = d[d != 0]
    n = len(d)
    if n == 0:
        return 1.0
    _, inverse, counts = np.unique(np.abs(d), return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse.reshape(-1)]
    w_plus = float(ranks[d > 0].sum())
    if n <= EXACT_SIGNED_RANK_PAIRS and (counts == 1).all():
        ways = np.zeros(n * (n + 1) // 2 + 1)  # sign patterns of ranks 1..n by their sum
        ways[0] = 1.0
        for rank in range(1, n + 1):
            ways[rank:] = ways[rank:] + ways[:-rank].copy()
        cdf = np.cumsum(ways) / ways.sum()
        low = min(w_plus, n * (n + 1) / 2 - w_plus)
        return min(1.0, 2 * float(cdf[int(round(low))]))
    mean = n * (n + 1) / 4.0
    variance = n * (n + 1) * (2 * n + 1) / 24.0 - float((counts**3 - counts).sum()) / 48.0
    if variance <= 0:
        return 1.0
    z = max(abs(w_plus - mean) - 0.5, 0.0) / math.sqrt(variance)
    return min(1.0, math.erfc(z / math.sqrt(2.0)))


def kept_pairs(log_ratios, trim: float) -> np.ndarray:
    """The pairs whose |log ratio| is at most ``trim`` times the pairs' median |log ratio|
    (all of them for trim 0).  A run that met a slow spell of the machine makes its pair's
    ratio large in either direction; the choice looks at |log ratio| only, so with no change
    each kept pair's sign is still a fair coin and the signed-rank test stays exact."""
    d = np.asarray(log_ratios, dtype=np.float64)
    if trim <= 0 or len(d) == 0:
        return d
    limit = trim * float(np.median(np.abs(d)))
    return d[np.abs(d) <= limit] if limit > 0 else d


def compare(
    first,
    second,
    confidence: float = DEFAULT_INTERVAL,
    test: str = MANN_WHITNEY,
    same_confidence: float = DEFAULT_SAME_INTERVAL,
    trim: float = 0.0,
) -> Comparison:
    """second against first; for SIGNED_RANK the two are aligned by round (equal lengths) and
    pairs beyond ``trim`` (``kept_pairs``) are left out."""
    pairs_kept = None
    if test == SIGNED_RANK:
        log_ratios = np.log(np.asarray(second, float)) - np.log(np.asarray(first, float))
        log_ratios = kept_pairs(log_ratios, trim)
        pairs_kept = len(log_ratios) if trim > 0 else None
        estimate = paired_ratio_estimate(log_ratios, confidence)
        same_interval = paired_ratio_estimate(log_ratios, same_confidence)
        p_value = signed_rank_p(log_ratios)
    else:
        estimate = ratio_estimate(first, second, confidence)
        same_interval = ratio_estimate(first, second, same_confidence)
        p_value = mann_whitney_p(first, second)
    return Comparison(
        first_median_ms=float(np.median(first)),
        second_median_ms=float(np.median(second)),
        estimate=estimate,
        p_value=p_value,
        first_repeats=len(first),
        second_repeats=len(second),
        test=test,
        same_interval=same_interval,
        pairs_kept=pairs_kept,
    )


def verdict(comparison: Comparison, alpha: float, margin_log: float) -> Verdict:
    """Different at alpha; same when the interval excludes a change of margin_log (an
    equivalence test, so "same" means the repeats had the power to see such a change)."""
    if comparison.different(alpha):
        return Verdict.DIFFERENT
    if comparison.within(margin_log):
        return Verdict.SAME
    return Verdict.UNDECIDED


def fewest_repeats_for(alpha: float, test: str = MANN_WHITNEY) -> int:
    """The smallest side size at which the test's p can reach alpha at all (with fewer,
    testing is wasted work): complete separation of the two sides."""
    for n in range(2, 1000):
        if test == SIGNED_RANK:
            p_value = signed_rank_p(np.arange(1, n + 1))
        else:
            p_value = mann_whitney_p(np.arange(n), np.arange(n) + n)
        if p_value <= alpha:
            return n
    return 1000
