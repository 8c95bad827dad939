"""bluedove/matcher/load.py: λ and μ over a sliding window, with time passed in (the paper's §III-B)."""

from __future__ import annotations

import numpy as np
import pytest

from bluedove.matcher.load import WindowStats, apportion


def steady(stats: WindowStats, start: float, end: float, per_s: int, busy_per_msg_s: float = 0.0):
    """Feed `per_s` arrivals per second from start to end; each is matched in `busy_per_msg_s`."""
    per_step = max(per_s // 100, 1)  # arrivals every 10 ms, or one at a time when slower
    step_s = per_step / per_s
    for k in range(round((end - start) / step_s)):
        now = start + k * step_s
        stats.arrived(per_step, now)
        if busy_per_msg_s:
            stats.processed(per_step, per_step * busy_per_msg_s, now)


# -- λ ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [10, 100, 1000])
def test_lambda_is_the_arrival_rate_over_the_window(rate):
    s = WindowStats(window_s=5.0, bucket_s=0.5)
    steady(s, 0.0, 20.0, rate)
    lam, _ = s.rates(20.0)
    assert lam == pytest.approx(rate, rel=0.05)


def test_lambda_before_the_window_has_filled_divides_by_the_time_seen():
    s = WindowStats(window_s=5.0, bucket_s=0.5)
    s.arrived(10, 0.0)
    assert s.rates(2.0)[0] == pytest.approx(5.0)
    assert s.rates(4.0)[0] == pytest.approx(2.5)


def test_lambda_divides_by_at_least_one_bucket():
    # Ten arrivals "just now" are not an infinite rate.
    s = WindowStats(window_s=5.0, bucket_s=0.5)
    s.arrived(10, 100.0)
    assert s.rates(100.0)[0] == pytest.approx(20.0)


def test_lambda_forgets_arrivals_older_than_the_window():
    s = WindowStats(window_s=5.0, bucket_s=0.5)
    s.arrived(100_000, 0.0)  # a burst long ago
    steady(s, 1.0, 20.0, 10)
    assert s.rates(20.0)[0] == pytest.approx(10.0, rel=0.1)


def test_lambda_is_zero_once_arrivals_stop_for_a_window():
    s = WindowStats(window_s=5.0, bucket_s=0.5)
    steady(s, 0.0, 10.0, 100)
    assert s.rates(10.0)[0] > 50
    assert s.rates(16.0)[0] == 0.0


def test_lambda_follows_a_rate_change():
    s = WindowStats(window_s=2.0, bucket_s=0.25)
    steady(s, 0.0, 10.0, 100)
    steady(s, 10.0, 20.0, 400)
    assert s.rates(20.0)[0] == pytest.approx(400, rel=0.05)


# -- μ ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("busy_per_msg_s, mu", [(0.001, 1000.0), (0.0001, 10_000.0), (0.02, 50.0)])
def test_mu_is_messages_per_second_of_matching_work(busy_per_msg_s, mu):
    # Not per wall-clock second: a matcher busy 10% of the time still reports how fast it matches.
    s = WindowStats(window_s=5.0, bucket_s=0.5)
    steady(s, 0.0, 10.0, 100, busy_per_msg_s)
    assert s.rates(10.0)[1] == pytest.approx(mu, rel=1e-6)


def test_mu_is_zero_before_anything_was_matched():
    s = WindowStats()
    s.arrived(5, 0.0)
    assert s.rates(1.0) == (pytest.approx(5.0), 0.0)


def test_mu_is_kept_when_idle():
    s = WindowStats(window_s=5.0, bucket_s=0.5)
    s.processed(100, 0.5, 0.0)
    assert s.rates(1.0)[1] == pytest.approx(200.0)
    lam, mu = s.rates(60.0)  # nothing for a minute
    assert lam == 0.0
    assert mu == pytest.approx(200.0)


def test_mu_follows_the_recent_window_not_the_whole_history():
    s = WindowStats(window_s=5.0, bucket_s=0.5)
    steady(s, 0.0, 10.0, 100, busy_per_msg_s=0.001)  # 1000/s
    steady(s, 10.0, 20.0, 100, busy_per_msg_s=0.004)  # slowed down to 250/s
    assert s.rates(20.0)[1] == pytest.approx(250.0, rel=1e-6)


# -- a batch's work shared among its dimensions ----------------------------------------------------


def test_each_dimension_gets_its_walk_and_the_rest_by_its_messages():
    work = apportion(1.0, {0: 300, 1: 100}, {0: 0.1, 1: 0.5})
    assert work == {0: pytest.approx(0.1 + 0.4 * 0.75), 1: pytest.approx(0.5 + 0.4 * 0.25)}
    assert sum(work.values()) == pytest.approx(1.0)


def test_walks_over_the_batch_s_cpu_are_scaled_down_to_it():
    # the next batch's walk ran before this one was stored: this one's CPU falls short of its walks
    work = apportion(0.3, {0: 10, 1: 10}, {0: 0.4, 1: 0.2})
    assert work == {0: pytest.approx(0.2), 1: pytest.approx(0.1)}


@pytest.mark.parametrize("cpu_s, messages, walk_s, expect", [
    (0.2, {2: 5}, {}, {2: 0.2}),  # no walk measured: all by messages
    (0.2, {0: 1, 1: 3}, {0: 0.0, 1: 0.0, 5: 1.0}, {0: 0.05, 1: 0.15}),  # a walk of no dimension of the batch
    (0.0, {0: 4}, {0: 0.1}, {0: 0.0}),  # the clock did not move
    (0.5, {}, {}, {}),
])
def test_apportion_edges(cpu_s, messages, walk_s, expect):
    assert apportion(cpu_s, messages, walk_s) == pytest.approx(expect)


# -- bounds and totals -----------------------------------------------------------------------------


@pytest.mark.parametrize("window_s, bucket_s", [(5.0, 0.5), (1.0, 0.1), (10.0, 1.0)])
def test_buckets_older_than_the_window_are_dropped(window_s, bucket_s):
    s = WindowStats(window_s=window_s, bucket_s=bucket_s)
    steady(s, 0.0, 60.0, 100, busy_per_msg_s=0.001)
    s.rates(60.0)
    assert len(s._buckets) <= round(window_s / bucket_s) + 2
    assert s._buckets[0].start >= 60.0 - window_s - 2 * bucket_s


def test_an_idle_gap_leaves_a_single_bucket():
    s = WindowStats(window_s=5.0, bucket_s=0.5)
    steady(s, 0.0, 10.0, 100)
    s.rates(1000.0)
    assert len(s._buckets) == 1


def test_totals_count_everything_ever_seen():
    s = WindowStats(window_s=1.0, bucket_s=0.1)
    s.arrived(3, 0.0)
    s.arrived(4, 50.0)
    s.processed(5, 0.1, 50.0)
    s.rates(100.0)
    assert (s.total_arrived, s.total_processed) == (7, 5)


def test_the_load_median_halves_the_work_not_the_range():
    from bluedove.matcher.load import MESSAGE_WORK, ValueSample

    s = ValueSample(capacity=1000)
    rng = np.random.default_rng(1)
    # Three quarters of the messages fall in [0, 100), the rest in [100, 1000).
    values = np.concatenate([rng.uniform(0, 100, 750), rng.uniform(100, 1000, 250)])
    s.add(values, np.zeros(1000))
    at = s.load_median(0, 1000)
    assert 60 < at < 73  # the 50th percentile: 2/3 of the way through [0, 100)
    # Messages with many matches weigh more: the same values, matches on the upper ones.
    s.add(values, np.where(values >= 100, 10 * MESSAGE_WORK, 0))
    assert s.load_median(0, 1000) > 100
    assert np.isnan(s.load_median(2000, 3000))  # no samples there


def test_the_value_sample_is_a_bounded_ring():
    from bluedove.matcher.load import ValueSample

    s = ValueSample(capacity=64)
    s.add(np.full(100, 5.0), np.zeros(100))
    s.add(np.full(40, 7.0), np.zeros(40))
    assert len(s.values) == 64 and (s.values == 7.0).sum() == 40
