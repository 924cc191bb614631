"""Contest scoring of a head-to-head run: ``fast_p`` with its interval, a ranking that says
which implementations it cannot tell apart, and speedups too large to believe.

``fast_p`` (KernelBench's and flashinfer-bench's metric) is the share of an API's cases on
which an implementation is correct (its row ok: the output check and the integrity checks
passed) and more than ``p`` times as fast as the baseline.  A case counts as faster only where
its paired speedup interval lies wholly beyond ``p`` (the point estimate where the run has no
interval), so noise cannot buy a point.  The 95 % interval comes from a bootstrap over the
cases; two implementations are told apart only where the bootstrap interval of the difference
of their ``fast_p`` (same resampled cases for both) excludes 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fi_attn_bench.summarizer.headtohead import CaseTable, case_table
from fi_attn_bench.summarizer.markdown_text import Block, cell

FAST_P_LEVELS = (0.0, 1.0, 1.5, 2.0)
"""The p of each reported fast_p (fast_0: the share of cases that are correct)."""

RANK_P = 1.0
"""The ranking's fast_p: correct and faster than the baseline."""

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0  # a report's interval is the same every time it is written
CONFIDENCE = 0.95

SUSPICIOUS_SPEEDUP = 10.0
"""A speedup over the baseline above this factor is flagged (KernelBench's)."""

ROOFLINE_PCT = 100.0
"""A row faster than its bytes at the device's peak bandwidth (pct_peak_bw above this)."""


@dataclass(frozen=True)
class ContestOptions:
    """The flag thresholds (``--suspicious-speedup``)."""

    suspicious_speedup: float = SUSPICIOUS_SPEEDUP

    def __post_init__(self) -> None:
        if not self.suspicious_speedup > 1.0:
            raise ValueError("the suspicious speedup factor must be above 1")


DEFAULT_CONTEST = ContestOptions()


@dataclass(frozen=True)
class FastP:
    """fast_p of one implementation over ``cases`` cases, with its bootstrap interval."""

    p: float
    value: float
    lo: float
    hi: float
    faster_cases: int
    cases: int


@dataclass(frozen=True)
class ImplScore:
    """One implementation's fast_p at each level, its rank by fast_{RANK_P} (1: best) and
    the implementations the bootstrap cannot tell from it."""

    impl: str
    fast_p: tuple[FastP, ...]
    rank: int
    not_told_apart_from: tuple[str, ...]


@dataclass(frozen=True)
class Suspicious:
    """A speedup to look at before believing it, with the numbers behind the flag."""

    case: str
    impl: str
    speedup: float
    pct_peak_bw: float  # NaN where the run did not know the device's peak
    reason: str


@dataclass(frozen=True)
class ContestScore:
    """One API's contest: its implementations' scores and the flagged speedups."""

    api: str
    baseline_impl: str
    cases: int
    scores: tuple[ImplScore, ...]  # in rank order
    suspicious: tuple[Suspicious, ...]


def contest_scores(view, comparisons, options: ContestOptions = DEFAULT_CONTEST) -> list:
    """A ContestScore per head-to-head API comparison (``headtohead.head_to_head``)."""
    return [_score(view, api, options) for api in comparisons]


def _score(view, api, options: ContestOptions) -> ContestScore:
    table = case_table(api.impls, api.cases)
    others = api.impls[1:]
    faster = {impl: _faster_matrix(table, impl) for impl in others}
    resampled = _resampled_hits(faster, len(table))
    levels = {impl: _fast_p_levels(faster[impl], resampled[impl]) for impl in others}
    ranked = sorted(others, key=lambda impl: _rank_key(levels[impl]))
    scores = tuple(
        ImplScore(impl, levels[impl], rank + 1, _ties(impl, ranked, resampled, len(table)))
        for rank, impl in enumerate(ranked)
    )
    flagged = tuple(_suspicious(table, _peak_pcts(view, table), api.baseline_impl, options))
    return ContestScore(api.api, api.baseline_impl, len(table), scores, flagged)


def _faster_matrix(table: CaseTable, impl: str) -> np.ndarray:
    """[level, case]: whether ``impl`` is correct and beyond p on the case (absent: it
    failed there, so it is neither)."""
    column = table.impls.index(impl)
    present = table.present[:, column]
    lo, speedup = table.speedup_lo[:, column], table.speedup[:, column]
    low = np.where(np.isnan(lo), speedup, lo)
    with np.errstate(invalid="ignore"):
        return np.array([present & (low > p) if p > 0 else present for p in FAST_P_LEVELS])


def _resampled_hits(faster: dict, cases: int) -> dict:
    """impl -> [level, resample]: the hits of each bootstrap resample of the cases.  A
    resample of n cases with replacement draws each joint pattern of hits (every impl's bits
    of a case) as many times as a multinomial of n over the patterns' shares; drawing those
    counts takes the same distribution at a cost of patterns, not cases (2000 x 100k draws
    took 0.85 s)."""
    counts = {
        impl: np.zeros((len(FAST_P_LEVELS), BOOTSTRAP_RESAMPLES), np.int64) for impl in faster
    }
    if cases == 0:
        return counts
    impls = list(faster)
    bits = np.stack([_level_bits(faster[impl]) for impl in impls])  # [impl, case]
    patterns, occurrences = _joint_patterns(bits)  # [impl, pattern]
    generator = np.random.default_rng(BOOTSTRAP_SEED)
    drawn = generator.multinomial(cases, occurrences / cases, size=BOOTSTRAP_RESAMPLES)
    for row, impl in enumerate(impls):
        for level in range(len(FAST_P_LEVELS)):
            counts[impl][level] = drawn @ ((patterns[row] >> level) & 1).astype(np.int64)
    return counts


def _joint_patterns(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(bits, axis=1, return_counts=True)`` of uint8 [impl, case] bits, in the same
    order: up to 8 impls are packed into one uint64 per case (first impl highest), whose
    1-D unique took 4-5 ms of 100k cases against 39-83 ms for 1-3 impls."""
    if len(bits) > 8:
        return np.unique(bits, axis=1, return_counts=True)
    keys = np.zeros(bits.shape[1], dtype=np.uint64)
    for row in bits:
        keys = (keys << np.uint64(8)) | row
    distinct, counts = np.unique(keys, return_counts=True)
    shifts = np.uint64(8) * np.arange(len(bits) - 1, -1, -1, dtype=np.uint64)
    return (distinct[None, :] >> shifts[:, None]).astype(np.uint8), counts


def _level_bits(faster: np.ndarray) -> np.ndarray:
    """Per case, one byte whose bit ``level`` says whether it counts at that level."""
    weights = (1 << np.arange(len(FAST_P_LEVELS))).astype(np.uint8)
    return (faster.astype(np.uint8) * weights[:, None]).sum(axis=0, dtype=np.uint8)


def _interval(resampled: np.ndarray) -> tuple[float, float]:
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(resampled, [tail, 100 - tail])
    return float(low), float(high)


def _fast_p_levels(faster: np.ndarray, resampled: np.ndarray) -> tuple[FastP, ...]:
    cases = faster.shape[1]
    found = []
    for level, p in enumerate(FAST_P_LEVELS):
        hits = faster[level]
        if cases == 0:
            found.append(FastP(p, math.nan, math.nan, math.nan, 0, 0))
            continue
        low, high = _interval(resampled[level] / cases)
        found.append(FastP(p, float(hits.mean()), low, high, int(hits.sum()), cases))
    return tuple(found)


def _rank_key(levels: tuple[FastP, ...]) -> tuple[float, ...]:
    """Best first by fast_{RANK_P}, ties broken by the higher levels in turn."""
    return tuple(-level.value for level in levels if level.p >= RANK_P)


def _ties(impl: str, ranked: list[str], resampled: dict, cases: int) -> tuple[str, ...]:
    """The implementations whose fast_{RANK_P} differs from ``impl``'s by a bootstrap
    interval that includes 0 (the same resampled cases for both)."""
    level = FAST_P_LEVELS.index(RANK_P)
    if cases == 0:
        return ()
    mine = resampled[impl][level] / cases
    tied = []
    for other in ranked:
        if other == impl:
            continue
        low, high = _interval(mine - resampled[other][level] / cases)
        if low <= 0.0 <= high:
            tied.append(other)
    return tuple(tied)


def _peak_pcts(view, table: CaseTable) -> np.ndarray:
    """pct_peak_bw of each case's row of each implementation (NaN where none is known)."""
    if not view.rows:
        return np.full(table.present.shape, np.nan)
    rows = table.rows  # floats() is all NaN where the run has no such column
    return np.where(rows >= 0, view.floats("pct_peak_bw")[np.maximum(rows, 0)], np.nan)


def _suspicious(table: CaseTable, pcts: np.ndarray, baseline: str, options: ContestOptions):
    judged = table.present & (np.array(table.impls, dtype=object) != baseline)
    with np.errstate(invalid="ignore"):
        too_fast = table.speedup > options.suspicious_speedup
        beyond = pcts > ROOFLINE_PCT
    for index, column in zip(*np.nonzero(judged & (too_fast | beyond)), strict=True):
        speedup, pct = float(table.speedup[index, column]), float(pcts[index, column])
        reasons = []
        if too_fast[index, column]:
            reasons.append(
                f"speedup {speedup:.3g}x over {baseline} is above {options.suspicious_speedup:g}x"
            )
        if beyond[index, column]:
            reasons.append(
                f"{pct:.3g}% of the device's peak bandwidth: faster than the case's bytes can move"
            )
        yield Suspicious(
            table.label(int(index)), table.impls[column], speedup, pct, "; ".join(reasons)
        )


# ---------------------------------------------------------------------- Markdown


def contest_markdown(scores) -> list[Block]:
    """Per API: fast_p with its interval, the ranking, and the flagged speedups."""
    parts = []
    for score in scores:
        levels = ", ".join(f"fast_{p:g}" for p in FAST_P_LEVELS)
        lines = [
            f"### Contest score: {cell(score.api)}",
            "",
            f"{levels}: share of the {score.cases} cases on which the implementation is "
            f"correct and more than p times as fast as {cell(score.baseline_impl)}, a case "
            f"counting only where its paired interval lies beyond p; [{CONFIDENCE:.0%} "
            "interval, bootstrap over cases].",
            "",
            "| Rank | Implementation | " + " | ".join(f"fast_{p:g}" for p in FAST_P_LEVELS) + " |",
            "|---:|---|" + "---:|" * len(FAST_P_LEVELS),
        ]
        lines += [_score_line(impl) for impl in score.scores]
        lines += _tie_lines(score)
        lines += _suspicious_lines(score)
        parts.append(Block([*lines, ""]))
    return parts


def _score_line(score: ImplScore) -> str:
    cells = [
        f"{level.value:.3f} [{level.lo:.3f}, {level.hi:.3f}]" if level.cases else "n/a"
        for level in score.fast_p
    ]
    return f"| {score.rank} | {cell(score.impl)} | " + " | ".join(cells) + " |"


def _tie_lines(score: ContestScore) -> list[str]:
    pairs = sorted(
        {tuple(sorted((s.impl, other))) for s in score.scores for other in s.not_told_apart_from}
    )
    if not pairs:
        return []
    told = "; ".join(f"{cell(a)} and {cell(b)}" for a, b in pairs)
    return ["", f"Not told apart by fast_{RANK_P:g} (the difference's interval includes 0): {told}"]


def _suspicious_lines(score: ContestScore) -> list[str]:
    if not score.suspicious:
        return []
    lines = ["", f"Suspicious ({len(score.suspicious)}): check these before believing them", ""]
    lines += [f"- {cell(s.impl)} on {cell(s.case)}: {s.reason}" for s in score.suspicious]
    return lines
