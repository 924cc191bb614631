"""The sweep's ETA: from each case's predicted cost, calibrated by the
cases finished so far; unknown until one finished.  A fake clock drives it."""

from __future__ import annotations

import pytest

from fi_attn_bench.sweep.progress import Eta
from fi_attn_bench.sweep.run_options import CPU_MAX_TIME_S
from fi_attn_bench.sweep.sharding import case_wall_s
from fi_attn_bench.timing.options import TimingOptions

CPU_TIMING = TimingOptions(timer="wall", l2="warm", max_time_s=CPU_MAX_TIME_S, sustain_ms=0.0)


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_unknown_until_a_case_finished():
    eta = Eta([1.0, 1.0], CPU_TIMING, clock=FakeClock())
    assert eta.seconds_left() is None and eta.text() == "ETA unknown"


def test_equal_cases_share_the_time_evenly():
    clock = FakeClock()
    eta = Eta([0.5] * 4, CPU_TIMING, clock=clock)
    clock.now += 3.0
    eta.case_finished(0.5)
    assert eta.seconds_left() == pytest.approx(9.0)
    assert eta.text() == "ETA 0:00:09"


def test_a_costly_case_ahead_is_not_priced_as_the_cheap_ones_behind():
    """Two 1 ms cases took 1 s each; the third's call is predicted 1000x longer: its
    warm-up and sample alone take seconds, not the 1 s a count of cases would say."""
    clock = FakeClock()
    predicted = [1.0, 1.0, 1000.0]
    eta = Eta(predicted, CPU_TIMING, clock=clock)
    for _ in range(2):
        clock.now += 1.0
        eta.case_finished(1.0)
    per_cost = 2.0 / (2 * case_wall_s(1.0, CPU_TIMING))
    assert eta.seconds_left() == pytest.approx(per_cost * case_wall_s(1000.0, CPU_TIMING))
    assert eta.seconds_left() > 10.0


def test_measured_calls_rescale_the_prediction():
    """The CPU runs the reference 100x slower than the roofline predicts: once a case says
    so, the cases ahead are priced at 100x their predicted call."""
    clock = FakeClock()
    eta = Eta([1.0, 50.0], CPU_TIMING, clock=clock)
    clock.now += 2.0
    eta.case_finished(100.0)
    costs = [case_wall_s(100.0, CPU_TIMING), case_wall_s(5000.0, CPU_TIMING)]
    assert eta.seconds_left() == pytest.approx(2.0 / costs[0] * costs[1])


def test_a_failed_case_counts_as_done_without_rescaling():
    clock = FakeClock()
    eta = Eta([1.0, 1.0, 1.0], CPU_TIMING, clock=clock)
    clock.now += 2.0
    eta.case_finished(None)
    assert eta.seconds_left() == pytest.approx(4.0)
