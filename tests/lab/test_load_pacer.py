"""The load's Pacer (bluedove/lab/load.py): a paced sender keeps to its
schedule, makes up a late start of up to a second, forgets more, and restarts the schedule
on a new rate or a pause."""

from __future__ import annotations

import pytest

from bluedove.lab.load import Pacer


def test_on_time_sends_are_spaced_by_the_rate():
    p = Pacer()
    now = 100.0
    for _ in range(5):
        wait = p.wait_s(1000.0, 500, now)  # 500 messages at 1,000/s: one send per 0.5 s
        assert wait == pytest.approx(0.5)
        now += wait


def test_lateness_is_made_up_up_to_a_second():
    p = Pacer()
    assert p.wait_s(1000.0, 500, 0.0) == pytest.approx(0.5)
    # woke 0.3 s late: the next send is due at 1.0, so only 0.2 s of sleep
    assert p.wait_s(1000.0, 500, 0.8) == pytest.approx(0.2)
    # 3 s late: only the last second is made up (this send counts as due at 3.0, the next two
    # at 3.5 and 4.0 go at once), then sends are back at the rate
    waits = [p.wait_s(1000.0, 500, 4.0) for _ in range(5)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3] == pytest.approx(0.5) and waits[4] == pytest.approx(1.0)


def test_a_new_rate_or_a_pause_starts_the_schedule_again():
    p = Pacer()
    p.wait_s(1000.0, 500, 0.0)
    assert p.wait_s(500.0, 500, 50.0) == pytest.approx(1.0)  # new rate: from now, not from 0
    assert p.wait_s(0.0, 500, 51.0) == 0.0  # full speed: no sleeping, schedule dropped
    assert p.wait_s(500.0, 500, 60.0) == pytest.approx(1.0)  # not 9 s of catching up
