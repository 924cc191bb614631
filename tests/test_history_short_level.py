"""A step seen for 3 runs is a change when each of them moved (a 4-run minimum cost quiet
cases' 2 % steps their report at the third run after the step, 90.24 -> 89.82 %)."""

from __future__ import annotations

import numpy as np

from fi_attn_bench.history.detect import all_moved, detect


def last_three_runs(first_pct: float, then_pct: float) -> tuple[int, int]:
    """(series reporting only case 5 near run 27, series reporting anything on case 5) of 20:
    case 5's run 27 ``first_pct`` slower and runs 28-29 ``then_pct``, on 0.3 % noise."""
    exact = anything = 0
    for seed in range(20):
        log_time = np.random.default_rng(seed).normal(0, 0.003, (30, 12))
        log_time[-3, 5] += np.log1p(first_pct / 100)
        log_time[-2:, 5] += np.log1p(then_pct / 100)
        found = detect(np.exp(log_time), np.full(log_time.shape, np.nan)).change_points
        exact += [(p.series, abs(p.run - 27) <= 1) for p in found] == [(5, True)]
        anything += any(p.series == 5 for p in found)
    return exact, anything


def test_a_2_percent_step_seen_for_three_runs_is_reported():
    assert last_three_runs(2.0, 2.0)[0] == 20  # 0 of 20 while every level needed 4 runs


def test_a_three_run_level_whose_first_run_did_not_move_is_seldom_a_change():
    assert last_three_runs(0.2, 2.0)[1] <= 2  # two slow runs and a neighbour: 1 of 20


def test_each_run_of_a_short_level_must_sit_nearer_the_new_level():
    assert all_moved(np.array([0.011, 0.02, 0.019]), 0.02)
    assert not all_moved(np.array([0.009, 0.02, 0.019]), 0.02)
    assert all_moved(np.array([-0.015, -0.02, -0.03]), -0.02)
    assert not all_moved(np.array([0.0, -0.02, -0.03]), -0.02)
