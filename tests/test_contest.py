"""Contest scoring (fi_attn_bench.summarizer.contest): fast_p counts a case only where its
paired interval lies beyond p, its bootstrap interval, ties in the ranking, suspicious
speedups; end to end on the real H100 fa2-vs-fa3 run."""

from __future__ import annotations

import csv
import json
import math
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import summarize_results
from fi_attn_bench.summarizer import contest
from fi_attn_bench.summarizer.headtohead import ApiComparison, CaseComparison, ImplResult

FA = Path(__file__).parent / "fixtures" / "real_csv" / "h100_ragged_fa2_vs_fa3.csv"
NO_VIEW = SimpleNamespace(rows=0)  # no rows: no pct_peak_bw to read


def _api(results_per_case: list[dict[str, tuple[float, float, float]]]) -> ApiComparison:
    """An API comparison; each case maps impl -> (speedup, lo, hi); "base" is the baseline."""
    cases = []
    for index, results in enumerate(results_per_case):
        found = [ImplResult("base", 1.0, 1.0, math.nan, math.nan)]
        found += [ImplResult(impl, 1.0, *numbers) for impl, numbers in results.items()]
        cases.append(CaseComparison(f"case {index}", tuple(found), "tie"))
    impls = ("base", *dict.fromkeys(i for r in results_per_case for i in r))
    return ApiComparison("Api", "base", impls, tuple(cases), {})


def _fast(score, impl: str, p: float) -> contest.FastP:
    found = next(s for s in score.scores if s.impl == impl)
    return next(level for level in found.fast_p if level.p == p)


def test_a_case_counts_as_faster_only_where_its_interval_lies_beyond_p():
    api = _api(
        [
            {"a": (1.2, 1.05, 1.3)},  # beyond 1
            {"a": (1.2, 0.95, 1.4)},  # interval reaches below 1: not counted
            {"a": (1.6, 1.55, 1.7)},  # beyond 1.5
            {"a": (3.0, math.nan, math.nan)},  # no interval: the point estimate decides
        ]
    )
    (score,) = contest.contest_scores(NO_VIEW, [api])
    assert [_fast(score, "a", p).faster_cases for p in (0.0, 1.0, 1.5, 2.0)] == [4, 3, 2, 1]
    assert _fast(score, "a", 1.0).value == pytest.approx(0.75)


def test_a_case_where_the_implementation_failed_counts_as_neither_correct_nor_faster():
    api = _api([{"a": (2.5, 2.4, 2.6)}, {}])  # case 1: no ok row of a
    (score,) = contest.contest_scores(NO_VIEW, [api])
    assert _fast(score, "a", 0.0).value == pytest.approx(0.5)
    assert _fast(score, "a", 2.0).value == pytest.approx(0.5)


def test_the_bootstrap_interval_brackets_the_share_and_is_reproducible():
    api = _api([{"a": (1.5, 1.4, 1.6) if i % 4 else (0.9, 0.8, 0.95)} for i in range(40)])
    (first,) = contest.contest_scores(NO_VIEW, [api])
    (second,) = contest.contest_scores(NO_VIEW, [api])
    fast_1 = _fast(first, "a", 1.0)
    assert fast_1.value == pytest.approx(0.75)
    assert 0.55 < fast_1.lo < 0.75 < fast_1.hi < 0.9
    assert fast_1 == _fast(second, "a", 1.0)


def test_the_ranking_says_which_implementations_it_cannot_tell_apart():
    cases = [
        {
            "fast": (2.0, 1.9, 2.1),
            "also_fast": (2.0, 1.9, 2.1) if i % 10 else (0.9, 0.8, 0.95),
            "slow": (0.5, 0.45, 0.55),
        }
        for i in range(30)
    ]
    (score,) = contest.contest_scores(NO_VIEW, [_api(cases)])
    ranked = {s.impl: s for s in score.scores}
    assert [s.impl for s in score.scores] == ["fast", "also_fast", "slow"]
    assert ranked["fast"].not_told_apart_from == ("also_fast",)
    assert ranked["slow"].not_told_apart_from == ()


def test_speedups_above_the_factor_are_flagged_with_their_numbers():
    api = _api([{"a": (12.0, 11.0, 13.0)}, {"a": (3.0, 2.9, 3.1)}])
    (score,) = contest.contest_scores(NO_VIEW, [api])
    (flag,) = score.suspicious
    assert (flag.case, flag.impl, flag.speedup) == ("case 0", "a", 12.0)
    assert "speedup 12x over base is above 10x" in flag.reason
    (lenient,) = contest.contest_scores(NO_VIEW, [api], contest.ContestOptions(20.0))
    assert lenient.suspicious == ()
    with pytest.raises(ValueError):
        contest.ContestOptions(1.0)


# ---------------------------------------------------------------- end to end, real run


def _summary_json(tmp_path, *csv_paths, extra=()) -> dict:
    out = tmp_path / "s.json"
    argv = [*map(str, csv_paths), "--output", str(tmp_path / "s.md"), "--json", str(out)]
    assert summarize_results.main([*argv, *extra]) == 0
    return json.loads(out.read_text())


def _fa_rows() -> list[dict]:
    with open(FA, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_fast_p_of_the_real_fa2_vs_fa3_run_is_in_the_summary_and_its_json(tmp_path):
    found = _summary_json(tmp_path, FA)
    (score,) = found["contest"]
    assert (score["baseline_impl"], score["cases"]) == ("flashinfer:fa2", 20)
    (fa3,) = score["scores"]
    levels = {level["p"]: level for level in fa3["fast_p"]}
    rows = [r for r in _fa_rows() if r["impl"] == "flashinfer:fa3"]
    beyond_2 = sum(1 / float(r["paired_ratio_hi"]) > 2.0 for r in rows)
    assert levels[2.0]["faster_cases"] == beyond_2
    assert levels[2.0]["lo"] <= levels[2.0]["value"] == beyond_2 / 20 <= levels[2.0]["hi"]
    assert levels[1.0]["value"] == 1.0
    report = (tmp_path / "s.md").read_text()
    assert "### Contest score: BatchPrefillWithRaggedKVCacheWrapper" in report
    assert "Suspicious" not in report


def test_a_row_beyond_the_peak_bandwidth_and_a_low_factor_are_flagged(tmp_path):
    rows = _fa_rows()
    first_fa3 = next(r for r in rows if r["impl"] == "flashinfer:fa3")
    first_fa3["pct_peak_bw"] = "150.0"
    edited = tmp_path / "edited.csv"
    with open(edited, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (score,) = _summary_json(tmp_path, edited)["contest"]
    (flag,) = score["suspicious"]
    assert flag["pct_peak_bw"] == 150.0 and "150% of the device's peak bandwidth" in flag["reason"]
    above = sum(1 / float(r["paired_ratio"]) > 1.5 for r in rows if r["impl"] == "flashinfer:fa3")
    (score,) = _summary_json(tmp_path, edited, extra=["--suspicious-speedup", "1.5"])["contest"]
    assert len(score["suspicious"]) == above > 0


def test_a_suspicious_factor_of_one_or_less_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        summarize_results.main([str(FA), "--suspicious-speedup", "1", "--output", "-"])
    assert stopped.value.code == 2
    assert "not a finite number above 1" in capsys.readouterr().err


# ------------------------------------------------------------- the bootstrap's cost


def _many_cases(count: int) -> ApiComparison:
    speedups = [1.0 + (index % 7) / 3 for index in range(count)]
    return _api(
        [{"a": (s, s - 0.1, s + 0.1)} if index % 9 else {} for index, s in enumerate(speedups)]
    )


def test_the_interval_is_the_bootstrap_over_the_resampled_cases():
    api = _many_cases(301)
    (score,) = contest.contest_scores(NO_VIEW, [api])
    hits = np.array(
        [bool(case.results[1:]) and case.results[1].speedup_lo > 1.5 for case in api.cases]
    )
    draws = np.random.default_rng(1).integers(
        0, len(hits), size=(contest.BOOTSTRAP_RESAMPLES, len(hits))
    )
    low, high = np.percentile(hits[draws].mean(axis=1), [2.5, 97.5])
    fast = _fast(score, "a", 1.5)
    assert fast.faster_cases == hits.sum()
    assert fast.lo == pytest.approx(low, abs=0.02) and fast.hi == pytest.approx(high, abs=0.02)


def test_resampled_hits_have_the_case_resampling_mean_and_spread_and_share_their_draws():
    cases, share = 1000, 0.3
    hit = np.arange(cases) < share * cases
    levels = len(contest.FAST_P_LEVELS)
    faster = {"a": np.tile(hit, (levels, 1)), "b": np.tile(hit, (levels, 1))}
    counts = contest._resampled_hits(faster, cases)
    mean, spread = counts["a"][1].mean(), counts["a"][1].std()
    assert mean == pytest.approx(share * cases, abs=1.5)  # 3 standard errors of 2000 draws
    assert spread == pytest.approx(math.sqrt(cases * share * (1 - share)), rel=0.06)
    assert (counts["a"] == counts["b"]).all()  # the same resampled cases for both


def test_the_bootstrap_of_many_cases_never_holds_all_its_draws():
    api = _many_cases(20_000)  # all draws at once: 2000 x 20k int64 = 320 MB
    tracemalloc.start()
    try:
        contest.contest_scores(NO_VIEW, [api])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40 * 2**20


@pytest.mark.parametrize("impls", [1, 2, 3, 8, 9])
@pytest.mark.parametrize("cases", [0, 1, 7, 2000])
def test_joint_patterns_are_numpys_unique_columns_in_its_order(impls, cases):
    """The bootstrap draws its multinomial over the patterns in this order, so the order
    (not only the set) must be numpy's."""
    bits = np.random.default_rng(impls * 10_000 + cases).integers(0, 256, size=(impls, cases))
    bits = bits.astype(np.uint8)
    bits[:, : cases // 2] &= 0x0F  # repeats, so counts above 1 are met
    patterns, counts = contest._joint_patterns(bits)
    expected_patterns, expected_counts = np.unique(bits, axis=1, return_counts=True)
    assert patterns.dtype == np.uint8
    assert np.array_equal(patterns, expected_patterns)
    assert np.array_equal(counts, expected_counts)
