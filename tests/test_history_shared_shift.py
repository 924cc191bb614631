"""A run-wide shift that every unstepped case follows is the machine's, also when many cases
step by themselves at the same time (40 % of the cases stepping during drift episodes
left the episodes in every case, 10.9 false change points per 200 series)."""

from __future__ import annotations

import numpy as np

from fi_attn_bench.history.detect import detect, share_following


def test_cases_that_stepped_by_themselves_neither_follow_nor_stay():
    before = np.zeros((5, 10))
    after = np.full((5, 10), 0.02)  # every case moved by the 2 % shift...
    after[:, :4] += 0.03  # ...and 4 of them stepped by 3 % of their own as well
    assert share_following(before, after, 0.02) == 1.0  # 0.6 counted them as not following
    code_change = np.zeros((5, 10))
    code_change[:, :7] = 0.02  # a commit slowed 7 cases; 3 stayed
    assert share_following(before, code_change, 0.02) == 0.7  # a code change: kept in them


def test_a_machine_shift_while_40_percent_of_cases_step_leaves_the_others_quiet():
    rng = np.random.default_rng(5)
    runs, cases = 40, 20
    time_ms = np.exp(rng.normal(0, 0.003, (runs, cases)))
    time_ms[20:] *= 1.02  # the machine: every case 2 % slower from run 20 on
    stepped = np.arange(8)  # 40 % of the cases 4 % slower of their own, at the same run
    time_ms[20:, stepped] *= 1.04
    found = detect(time_ms, np.full((runs, cases), np.nan))
    in_cases = [point for point in found.change_points if point.series >= 0]
    assert {point.series for point in in_cases} == set(stepped.tolist())
    assert all(abs(point.run - 20) <= 1 for point in in_cases)
