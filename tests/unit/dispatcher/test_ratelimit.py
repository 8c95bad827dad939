"""bluedove/dispatcher/ratelimit.py: token buckets for a key's messages and bytes per second, time as an argument."""

from __future__ import annotations

import pytest

from bluedove.dispatcher.ratelimit import Bucket, KeyLimit, retry_after


def test_a_bucket_admits_its_burst_then_paces_at_its_rate():
    b = Bucket.full(rate=10, burst=5, now=0.0)
    for _ in range(5):
        assert b.wait(1, 0.0) == 0
        b.take(1, 0.0)
    assert b.wait(1, 0.0) == pytest.approx(0.1)  # empty: one token comes in 1/rate s
    assert b.wait(1, 0.1) == 0
    assert b.wait(3, 0.1) == pytest.approx(0.2)


def test_a_full_bucket_never_holds_more_than_its_burst():
    b = Bucket.full(rate=10, burst=5, now=0.0)
    b.take(5, 0.0)
    assert b.wait(5, 100.0) == 0
    b.take(5, 100.0)
    assert b.wait(1, 100.0) > 0  # 100 s idle filled it to 5, not 1000


def test_a_request_larger_than_the_burst_passes_when_full_and_the_debt_is_paid_after():
    b = Bucket.full(rate=100, burst=100, now=0.0)
    assert b.wait(1000, 0.0) == 0
    b.take(1000, 0.0)
    # 900 in debt plus one token: 9.01 s at 100/s; the average rate holds
    assert b.wait(1, 0.0) == pytest.approx(9.01)
    assert b.wait(1, 9.0) > 0 and b.wait(1, 9.02) == 0


def test_burst_zero_means_one_second_of_the_rate():
    assert Bucket.full(rate=7, burst=0, now=0.0).burst == 7


def test_a_refused_request_takes_nothing_from_either_bucket():
    lim = KeyLimit(rate_msgs=10, rate_bytes=100, burst_msgs=0, burst_bytes=0, now=0.0)
    assert lim.admit(5, 100, 0.0) == 0  # bytes bucket now empty, messages half full
    assert lim.admit(1, 50, 0.0) == pytest.approx(0.5)  # bytes refuse: 50 bytes in 0.5 s
    assert lim.msgs.wait(5, 0.0) == 0  # the message bucket gave nothing to the refused request
    assert lim.admit(5, 0, 0.0) == 0


def test_no_rate_is_no_limit():
    lim = KeyLimit(0, 0, 0, 0, now=0.0)
    assert all(lim.admit(1000, 10**9, 0.0) == 0 for _ in range(100))


def test_a_share_divides_rate_and_burst_and_a_new_share_rescales_what_it_holds():
    lim = KeyLimit(rate_msgs=100, rate_bytes=0, burst_msgs=0, burst_bytes=0, now=0.0, share=0.5)
    assert (lim.msgs.rate, lim.msgs.burst) == (50, 50)
    assert lim.admit(50, 0, 0.0) == 0 and lim.admit(1, 0, 0.0) > 0
    lim.set_share(1.0, 0.5)  # the other dispatcher left: this one holds the whole rate
    assert (lim.msgs.rate, lim.msgs.burst) == (100, 100)
    assert lim.msgs.wait(50, 0.5) == 0 and lim.msgs.wait(51, 0.5) > 0


@pytest.mark.parametrize("wait,header", [(0.001, 1), (1.0, 1), (1.01, 2), (9.5, 10)])
def test_retry_after_is_whole_seconds_at_least_one(wait, header):
    assert retry_after(wait) == header
