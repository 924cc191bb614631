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

from fi_attn_bench.summarizer.frames import success_mask
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
    return [_score(api, _peak_pcts(view, api), options) for api in comparisons]


def _score(api, peak_pcts: dict, options: ContestOptions) -> ContestScore:
    others = api.impls[1:]
    faster = {impl: _faster_matrix(api, impl) for impl in others}
    draws = _draws(len(api.cases))
    levels = {impl: _fast_p_levels(faster[impl], draws) for impl in others}
    ranked = sorted(others, key=lambda impl: _rank_key(levels[impl]))
    scores = tuple(
        ImplScore(impl, levels[impl], rank + 1, _ties(impl, ranked, faster, draws))
        for rank, impl in enumerate(ranked)
    )
    flagged = tuple(_suspicious(api, peak_pcts, options))
    return ContestScore(api.api, api.baseline_impl, len(api.cases), scores, flagged)


def _faster_matrix(api, impl: str) -> np.ndarray:
    """[level, case]: whether ``impl`` is correct and beyond p on the case (absent: it
    failed there, so it is neither)."""
    rows = np.zeros((len(FAST_P_LEVELS), len(api.cases)), dtype=bool)
    for column, case in enumerate(api.cases):
        result = next((r for r in case.results if r.impl == impl), None)
        if result is None:
            continue
        low = result.speedup_lo if result.speedup_lo == result.speedup_lo else result.speedup
        for level, p in enumerate(FAST_P_LEVELS):
            rows[level, column] = low > p if p > 0 else True
    return rows


def _draws(cases: int) -> np.ndarray:
    """[resample, case index]: the bootstrap's resampled cases, shared by every impl."""
    generator = np.random.default_rng(BOOTSTRAP_SEED)
    return generator.integers(0, max(cases, 1), size=(BOOTSTRAP_RESAMPLES, max(cases, 1)))


def _interval(resampled: np.ndarray) -> tuple[float, float]:
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(resampled, [tail, 100 - tail])
    return float(low), float(high)


def _fast_p_levels(faster: np.ndarray, draws: np.ndarray) -> tuple[FastP, ...]:
    cases = faster.shape[1]
    found = []
    for level, p in enumerate(FAST_P_LEVELS):
        hits = faster[level]
        if cases == 0:
            found.append(FastP(p, math.nan, math.nan, math.nan, 0, 0))
            continue
        low, high = _interval(hits[draws].mean(axis=1))
        found.append(FastP(p, float(hits.mean()), low, high, int(hits.sum()), cases))
    return tuple(found)


def _rank_key(levels: tuple[FastP, ...]) -> tuple[float, ...]:
    """Best first by fast_{RANK_P}, ties broken by the higher levels in turn."""
    return tuple(-level.value for level in levels if level.p >= RANK_P)


def _ties(impl: str, ranked: list[str], faster: dict, draws: np.ndarray) -> tuple[str, ...]:
    """The implementations whose fast_{RANK_P} differs from ``impl``'s by a bootstrap
    interval that includes 0 (the same resampled cases for both)."""
    level = FAST_P_LEVELS.index(RANK_P)
    mine = faster[impl][level]
    if mine.size == 0:
        return ()
    tied = []
    for other in ranked:
        if other == impl:
            continue
        difference = mine[draws].mean(axis=1) - faster[other][level][draws].mean(axis=1)
        low, high = _interval(difference)
        if low <= 0.0 <= high:
            tied.append(other)
    return tuple(tied)


def _peak_pcts(view, api) -> dict[tuple[str, str], float]:
    """(case label, impl) -> pct_peak_bw of the API's ok rows (empty where no peak is known)."""
    if not view.rows or view.distinct("pct_peak_bw") is None:
        return {}
    parameters = [name for name in view.case_columns if name != "impl"]
    rows = np.flatnonzero((view.objects("api") == api.api) & success_mask(view.objects("status")))
    labels = view.labels(rows, parameters).tolist()
    impls = view.objects("impl")[rows].tolist()
    pcts = view.floats("pct_peak_bw")[rows].tolist()
    return {
        (str(label), str(impl)): pct for label, impl, pct in zip(labels, impls, pcts, strict=True)
    }


def _suspicious(api, peak_pcts: dict, options: ContestOptions):
    for case in api.cases:
        for result in case.results:
            if result.impl == api.baseline_impl:
                continue
            pct = peak_pcts.get((case.case, result.impl), math.nan)
            reasons = []
            if result.speedup > options.suspicious_speedup:
                reasons.append(
                    f"speedup {result.speedup:.3g}x over {api.baseline_impl} is above "
                    f"{options.suspicious_speedup:g}x"
                )
            if pct == pct and pct > ROOFLINE_PCT:
                reasons.append(
                    f"{pct:.3g}% of the device's peak bandwidth: faster than the case's bytes "
                    "can move"
                )
            if reasons:
                yield Suspicious(case.case, result.impl, result.speedup, pct, "; ".join(reasons))


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
