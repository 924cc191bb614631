"""benchmarks/history_detection.py --real: real H100 runs with injected steps."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.history_detection import Tally
from benchmarks.history_sources import (
    FIRST_STEP_RUN,
    REAL_HISTORY,
    REPORT_DELAY,
    STEP_SIZES,
    RealSource,
    real_history,
    real_runs,
    run_order,
)


def test_the_fixture_holds_every_case_of_every_run_with_its_clock():
    real = real_runs()
    assert real.time_ms.shape == real.clock_MHz.shape == (48, 47)
    assert np.isfinite(real.time_ms).all() and (real.time_ms > 0).all()
    assert real.decode.sum() == 27  # the decode preset; the other 20 are ragged prefill


def test_steps_are_injected_into_half_the_cases_and_the_clock_is_left_as_measured():
    real = real_runs()
    history = real_history(np.random.default_rng(0), [real], shuffled=True)
    stepped = history.step_run >= 0
    assert stepped.sum() == real.time_ms.shape[1] // 2
    assert set(history.step_size[stepped]) <= set(STEP_SIZES)
    runs = len(real.time_ms)
    assert (history.step_run[stepped] >= FIRST_STEP_RUN).all()
    assert (history.step_run[stepped] < runs - REPORT_DELAY).all()
    for case in np.flatnonzero(stepped):
        k, size = history.step_run[case], history.step_size[case]
        before = np.sort(history.time_ms[:k, case])
        after = np.sort(history.time_ms[k:, case] / (1 + size))
        assert np.allclose(np.sort(np.concatenate([before, after])), np.sort(real.time_ms[:, case]))
    unshuffled = real_history(np.random.default_rng(0), [real], shuffled=False)
    assert np.array_equal(unshuffled.clock_MHz, real.clock_MHz)
    flat = unshuffled.step_run < 0
    assert np.array_equal(unshuffled.time_ms[:, flat], real.time_ms[:, flat])


def test_a_step_counts_as_found_only_near_its_run_and_by_the_third_run_after():
    real = real_runs()
    history = real_history(np.random.default_rng(1), [real], shuffled=False)
    case = int(np.flatnonzero(history.step_run >= 0)[0])
    k = int(history.step_run[case])
    everything = np.ones(len(history.step_run), dtype=bool)

    def found(points) -> int:
        reports = [[] for _ in history.step_run]
        reports[case] = points
        tally = Tally()
        tally.add(history, reports, everything)
        return sum(hits for hits, _ in tally.found.values())

    assert found([(k, k + REPORT_DELAY + 1)]) == 1
    assert found([(k + 1, k + 2)]) == 1
    assert found([(k, k + REPORT_DELAY + 2)]) == 0  # too late
    assert found([(k + 2, k + 3)]) == 0  # the wrong run


DEFAULT_BUDGET = REAL_HISTORY.parent.parent / "h100_history_default_budget" / "runs.csv.gz"


def test_the_default_budget_fixture_holds_twenty_ragged_runs_of_every_case():
    real = real_runs(DEFAULT_BUDGET)
    assert real.time_ms.shape == real.clock_MHz.shape == (20, 20)
    assert np.isfinite(real.time_ms).all() and (real.time_ms > 0).all()
    assert not real.decode.any()


@pytest.mark.parametrize("shuffled", [False, True])
def test_longer_histories_repeat_whole_runs_in_new_orders_never_twice_in_a_row(shuffled):
    order = run_order(np.random.default_rng(3), 20, shuffled, 60)
    assert len(order) == 60 and (order[1:] != order[:-1]).all()
    for block in range(3):  # each stretch of 20 runs holds every run once
        assert sorted(order[20 * block : 20 * (block + 1)].tolist()) == list(range(20))
    assert (order[:20].tolist() == list(range(20))) is not shuffled
    real = real_runs(DEFAULT_BUDGET)
    history = real_history(np.random.default_rng(3), [real], shuffled, length=60)
    flat = history.step_run < 0
    assert history.time_ms.shape == (60, 20)
    assert np.array_equal(history.time_ms[:, flat], real.time_ms[order][:, flat])
    assert (history.step_run[~flat] < 60 - REPORT_DELAY).all()


def test_a_prefix_keeps_the_cases_whose_label_starts_with_it():
    decode = real_runs(RealSource.parse(f"{REAL_HISTORY}:BatchDecode"))
    assert decode.time_ms.shape == (48, 27) and decode.decode.all()
    assert RealSource.parse(str(DEFAULT_BUDGET)) == RealSource(DEFAULT_BUDGET)


def test_joined_fixtures_sit_side_by_side_each_in_its_own_run_order():
    decode = real_runs(RealSource(REAL_HISTORY, "BatchDecode"))
    ragged = real_runs(DEFAULT_BUDGET)
    history = real_history(np.random.default_rng(7), [decode, ragged], True, length=60)
    assert history.time_ms.shape == history.clock_MHz.shape == (60, 27 + 20)
    assert history.decode.tolist() == [True] * 27 + [False] * 20
    assert (history.step_run >= 0).sum() == 47 // 2
    flat = history.step_run < 0
    for part, columns in ((decode, slice(0, 27)), (ragged, slice(27, 47))):
        kept = flat[columns]
        times = history.time_ms[:, columns][:, kept]
        # each history run is one whole run of that fixture: its clocks and untouched times
        rows = [
            int(np.flatnonzero((part.clock_MHz == clock).all(axis=1))[0])
            for clock in history.clock_MHz[:, columns]
        ]
        assert np.array_equal(times, part.time_ms[rows][:, kept])
        assert sorted(rows[: len(part.time_ms)]) == list(range(len(part.time_ms)))


def test_events_add_one_case_outliers_and_a_one_run_clock_drop_on_top_of_the_steps():
    real = real_runs()
    plain = real_history(np.random.default_rng(5), [real], True, length=60)
    noisy = real_history(np.random.default_rng(5), [real], True, 60, events=True, clock_drop=True)
    assert np.array_equal(plain.step_run, noisy.step_run)
    k = noisy.clock_drop_run
    assert FIRST_STEP_RUN <= k < 60 - REPORT_DELAY
    assert np.allclose(noisy.clock_MHz[k], plain.clock_MHz[k] * 0.95)
    others = np.arange(60) != k
    assert np.array_equal(noisy.clock_MHz[others], plain.clock_MHz[others])
    factor = noisy.time_ms / plain.time_ms
    exponent = np.where(real.decode, 0.3, 1.0)
    outlier_factor = np.ones_like(factor)
    for run, case in noisy.outliers:
        outlier_factor[run, case] = factor[run, case] / (0.95 ** -exponent[case] if run == k else 1)
    assert noisy.outliers and all(1.05 <= outlier_factor[r, c] <= 1.10 for r, c in noisy.outliers)
    expected = outlier_factor * np.where(others[:, None], 1.0, 0.95**-exponent)
    assert np.allclose(factor, expected)


def test_a_commit_slowing_every_decode_case_leaves_the_prefill_cases_alone():
    """27 of the 47 real series 3 % slower from run 14 on: the run-wide factor follows the
    majority, so removing it whole made every prefill case look faster."""
    from fi_attn_bench.history.detect import detect

    real = real_runs()
    stepped = real.time_ms.copy()
    stepped[14:, real.decode] *= 1.03
    points = detect(stepped[:18], real.clock_MHz[:18]).change_points
    large = np.median(real.time_ms, axis=0) >= 0.05
    assert all(point.series >= 0 for point in points)  # not a run-wide change: decode's own
    per_case = {point.series for point in points}
    assert set(np.flatnonzero(real.decode & large)) <= per_case <= set(np.flatnonzero(real.decode))
    assert all(abs(point.run - 14) <= 1 for point in points)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--real", "--history", "missing.csv.gz"], "--history missing.csv.gz: no such file"),
        (["--real", "--real-runs", "0"], "--real-runs must be positive"),
        (
            ["--real", "--history", f"{REAL_HISTORY}:NoSuchApi"],
            f"--history {REAL_HISTORY}: no case label starts with 'NoSuchApi'",
        ),
        (
            ["--save-real", "runs", "--history", "a.csv.gz", "b.csv.gz"],
            "--save-real writes one fixture: --history PATH",
        ),
    ],
)
def test_bad_real_run_options_are_one_error_and_exit_2_before_any_work(argv, said, capsys):
    from benchmarks.history_detection import main

    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(said)
