"""A run-wide shift that every unstepped case follows is the machine's, also when many cases
step by themselves at the same time (40 % of the cases stepping during drift episodes
left the episodes in every case, 10.9 false change points per 200 series), and two
heavy-tailed runs in a row are not a new level."""

from __future__ import annotations

import numpy as np
import pytest

from fi_attn_bench.history.detect import (
    DetectionSettings,
    cases_own_shift,
    detect,
    share_following,
)


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


def votes(followed: int, stayed: int, shift: float = 0.02) -> tuple[np.ndarray, np.ndarray]:
    """(before, after) of quiet cases: ``followed`` moved by ``shift``, ``stayed`` did not."""
    before = np.zeros((10, followed + stayed))
    after = np.zeros((4, followed + stayed))
    after[:, :followed] = shift
    return before, after


@pytest.mark.parametrize(
    ("followed", "stayed", "own"),
    [(3, 1, False), (5, 2, False), (0, 3, True), (2, 3, True), (20, 10, True), (24, 6, False)],
)
def test_a_shift_is_the_cases_own_only_when_more_stayed_than_chance_leaves(followed, stayed, own):
    """One stayer of 4 cases that can tell (or 2 of 7) is what a machine shift gives by
    chance; 3 of 5, or 10 of 30, is a commit the others did not share."""
    before, after = votes(followed, stayed)
    assert cases_own_shift(before, after, 0.02, DetectionSettings()) is own


def test_a_drift_episode_that_few_cases_can_tell_is_removed_despite_one_chance_stayer():
    """The last 4 runs 2 % faster on the machine; 4 cases step 5 % of their own and one quiet
    case's own 2 % slowdown cancels the episode.  Of the 4 quiet cases that can tell, 3
    followed and 1 stayed (share 0.75): that left the episode in every case, and the
    followers reported it as their own change."""
    rng = np.random.default_rng(3)
    runs, cases = 40, 28
    noise = np.full(cases, 0.012)  # too noisy to tell a 2 % shift 4 runs after it
    noise[:4] = 0.002
    log_time = rng.normal(0, 1, (runs, cases)) * noise
    log_time[36:] += np.log(0.98)
    log_time[36:, 3] += np.log(1.02)
    stepped = [4, 5, 6, 7]
    log_time[36:, stepped] += np.log(1.05)
    found = detect(np.exp(log_time), np.full((runs, cases), np.nan))
    in_cases = {point.series for point in found.change_points if point.series >= 0}
    assert in_cases == {3, *stepped}  # the cases that changed against the machine
    assert [(point.series, point.run) for point in found.change_points if point.series < 0] == [
        (-1, 36)
    ]


def test_two_slow_runs_at_the_end_are_seldom_a_change_and_a_step_held_four_runs_is_one():
    """Heavy-tailed noise gives two slow runs in a row: the last two 2.5 % slow and the one
    before 0.5 %.  With 3-run levels, 14 of these 20 series reported a change (3 now); a new
    level now holds 4 runs, the step's own and the 3 after it that a step is found by."""
    excursions = steps = 0
    for seed in range(20):
        log_time = np.random.default_rng(seed).normal(0, 0.003, (30, 12))
        stepped = log_time.copy()
        log_time[-2:, 5] += np.log(1.025)
        log_time[-3, 5] += np.log(1.005)
        stepped[-4:, 5] += np.log(1.02)
        clock = np.full(log_time.shape, np.nan)
        excursions += any(p.series == 5 for p in detect(np.exp(log_time), clock).change_points)
        found = detect(np.exp(stepped), clock).change_points
        steps += [(p.series, abs(p.run - 26) <= 1) for p in found] == [(5, True)]
    assert excursions <= 5
    assert steps == 20
