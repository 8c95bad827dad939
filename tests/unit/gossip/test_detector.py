"""Phi-accrual: the formula as a table, and the window that feeds it."""

import math

import pytest

from bluedove.gossip.detector import PHI_MAX, ArrivalWindow, phi, z_for


@pytest.mark.parametrize("mean,std,elapsed,expected", [
    (1.0, 0.1, 0.0, 0.0),               # nothing elapsed: no suspicion
    (1.0, 0.1, 1.0, -math.log10(0.5)),  # at the mean, half the intervals are longer
    (1.0, 0.1, 1.1, -math.log10(0.15865525)),  # one standard deviation late
    (0.2, 0.1, 0.2 + 5.612 * 0.1, 8.0),  # the default threshold ≈ 5.6 deviations late
    (1.0, 0.1, 100.0, PHI_MAX),          # certain: the tail underflows, capped
])
def test_phi_table(mean, std, elapsed, expected):
    assert phi(mean, std, elapsed) == pytest.approx(expected, rel=1e-3)


def test_phi_rises_with_silence():
    values = [phi(0.2, 0.05, t / 10) for t in range(0, 20)]
    assert values == sorted(values)


def test_window_stats_are_the_recent_intervals_and_bounded():
    w = ArrivalWindow(size=4, min_std_s=0.0, first_interval_s=1.0)
    for t in [0.0, 1.0, 2.0, 3.0, 4.0, 4.5, 5.0, 5.5, 6.0]:
        w.record(t)
    assert len(w.intervals) == 4  # only the last four intervals
    mean, std = w.stats()
    assert mean == pytest.approx(0.5) and std == pytest.approx(0.0, abs=1e-6)


def test_min_std_keeps_a_regular_member_from_looking_dead_after_one_hiccup():
    w = ArrivalWindow(size=100, min_std_s=0.1, first_interval_s=0.2)
    for i in range(50):
        w.record(i * 0.2)
    last = 49 * 0.2
    assert w.phi(last + 0.4) < 8  # two intervals late is not death
    assert w.phi(last + 1.0) > 8  # five are


def test_suspect_at_is_where_phi_crosses_the_threshold():
    w = ArrivalWindow(size=100, min_std_s=0.05, first_interval_s=0.2)
    for t in [0.0, 0.21, 0.39, 0.62, 0.8, 1.01]:
        w.record(t)
    at = w.suspect_at(z_for(8.0))
    assert w.phi(at - 1e-3) < 8.0 <= w.phi(at + 1e-3)


def test_before_any_interval_the_gossip_interval_is_assumed():
    w = ArrivalWindow(size=100, min_std_s=0.1, first_interval_s=0.2)
    assert w.phi(5.0) == 0.0  # never heard: no opinion
    w.record(1.0)
    assert w.phi(1.1) < 1 and w.phi(3.0) > 8
