"""Head to head: several implementations (``impl``) of the same cases in one run.

For each API, each case (its parameters without ``impl``) gets the time of every
implementation, the speedup of each against the baseline implementation (the rows'
``baseline_impl``, else the API's first implementation): 1 / ``paired_ratio`` with its 95 %
interval from ``paired_ratio_lo``/``paired_ratio_hi`` where the bench measured them
interleaved, else the ratio of the times; the paired verdict; and the winner (``winner``);
per API, the geometric mean of each implementation's speedup.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fi_attn_bench.summarizer.frames import success_mask
from fi_attn_bench.summarizer.identity import case_ids, view_codes

TIE = "tie"  # the winner where the paired intervals cannot tell the implementations apart


@dataclass(frozen=True)
class ImplResult:
    """One implementation on one case; speedup: above 1, faster than the baseline."""

    impl: str
    time_ms: float
    speedup: float
    speedup_lo: float  # NaN without a paired interval
    speedup_hi: float
    verdict: str = ""  # the bench's paired_verdict against the baseline ("" for the baseline)


@dataclass(frozen=True)
class CaseComparison:
    case: str
    results: tuple[ImplResult, ...]  # in ApiComparison.impls order; absent impls left out
    winner: str  # an impl, or TIE


@dataclass(frozen=True)
class ApiComparison:
    api: str
    baseline_impl: str
    impls: tuple[str, ...]
    cases: tuple[CaseComparison, ...]
    geomean_speedup: dict  # impl -> geometric mean over cases where both ran ok


def head_to_head(view, ids) -> list[ApiComparison]:
    """Per API with two or more implementations, the side-by-side comparison."""
    if not view.rows or "impl" not in view.case_columns:
        return []
    impl_codes, impls = view_codes(view, "impl")
    if len(set(impl_codes.tolist())) < 2:
        return []
    parameters = [name for name in view.case_columns if name != "impl"]
    groups = case_ids([view], ["api", *parameters])[0]
    ok = success_mask(view.objects("status"))
    apis = view.objects("api")
    found = []
    for api in sorted(set(apis.tolist())):
        rows = np.flatnonzero((apis == api) & ok)
        rows = rows[np.argsort(groups[rows], kind="stable")]
        labels = view.labels(rows, parameters)
        comparison = _api_comparison(view, str(api), rows, groups, (impl_codes, impls), labels)
        if comparison is not None:
            found.append(comparison)
    return found


def _api_comparison(view, api, rows, groups, impl, labels) -> ApiComparison | None:
    """``impl``: (code per row, texts) of the impl column; ``labels``: of ``rows``."""
    impl_codes, impls = impl
    order = list(dict.fromkeys(impls[code] for code in impl_codes[rows].tolist()))
    if len(order) < 2:
        return None
    stated = [text for text in view.distinct("baseline_impl") or [] if text in order]
    baseline = stated[0] if stated else order[0]
    order.remove(baseline)
    order.insert(0, baseline)
    # Python lists, not numpy scalars: the loop below runs once per case.
    time_ms = view.floats("time_ms")[rows].tolist()
    verdicts = _texts(view, "paired_verdict")
    verdicts = verdicts[rows].tolist() if verdicts is not None else [""] * len(rows)
    paired = view.floats("paired_ratio")[rows].tolist()
    lo = view.floats("paired_ratio_lo")[rows].tolist()
    hi = view.floats("paired_ratio_hi")[rows].tolist()
    names = [impls[code] for code in impl_codes[rows].tolist()]
    labels = labels.tolist()
    cases, ratios = [], {impl: [] for impl in order}
    bounds = [0, *(np.flatnonzero(np.diff(groups[rows])) + 1).tolist(), len(rows)]
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        by_impl = {names[i]: i for i in range(start, stop)}
        if baseline not in by_impl:
            continue
        base_ms = time_ms[by_impl[baseline]]
        results = []
        for impl in order:
            if impl not in by_impl:
                continue
            i = by_impl[impl]
            speedup = _speedup(base_ms, time_ms[i], paired[i])
            ratios[impl].append(speedup)
            interval = (1 / hi[i], 1 / lo[i])
            results.append(ImplResult(impl, time_ms[i], speedup, *interval, str(verdicts[i])))
        winner = case_winner(results, baseline)
        cases.append(CaseComparison(str(labels[start]), tuple(results), winner))
    geomean = {
        impl: (math.exp(float(np.log(values).mean())) if values else math.nan)
        for impl, values in ratios.items()
    }
    return ApiComparison(api, baseline, tuple(order), tuple(cases), geomean)


def case_winner(results, baseline: str) -> str:
    """The fastest implementation where the paired verdicts back it (a non-baseline one called
    faster, or the baseline when every other was called slower), else TIE; without verdicts
    (implementations from separate sweeps) the lowest time."""
    best = results[0]
    for result in results[1:]:  # the first of the lowest, as min() gives
        if result.time_ms < best.time_ms:
            best = result
    others = [result for result in results if result.impl != baseline]
    if not any(result.verdict for result in others):
        return best.impl
    if best.impl == baseline:
        return best.impl if all(result.verdict == "slower" for result in others) else TIE
    return best.impl if best.verdict == "faster" else TIE


def _texts(view, name: str):
    """A text column as objects ('' where empty), or None when no input has it."""
    if view.distinct(name) is None:
        return None
    return np.array(["" if v != v or v is None else str(v) for v in view.objects(name)], object)


def _speedup(base_ms: float, time_ms: float, paired_ratio: float) -> float:
    """1 / the paired ratio where the bench measured one (the estimate its interval is
    about), else the ratio of the two times."""
    if paired_ratio == paired_ratio and paired_ratio > 0:
        return 1.0 / paired_ratio
    return base_ms / time_ms
