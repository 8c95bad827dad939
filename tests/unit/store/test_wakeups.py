"""bluedove/store/wakeups.py without a server: which parked polls a wake-up reaches."""

from __future__ import annotations

import asyncio

from bluedove.store.wakeups import Wakeups


class _Poll:
    """A parked poll as the table sees it; leaves the table when woken, as a poll that answers does."""

    def __init__(self, w: Wakeups, stream: str) -> None:
        self.w, self.stream, self.woken = w, stream, 0
        w.park(stream, self)

    def wake(self) -> None:
        self.woken += 1
        self.w.unpark(self.stream, self)


def _offline() -> Wakeups:
    """Wakeups whose subscription never comes up (its connect fails): `live` stays False."""
    def connect(_attempt: int) -> object:
        raise ConnectionError("no server in a unit test")
    return Wakeups(connect)


async def test_a_wake_up_reaches_exactly_the_polls_parked_on_the_streams_it_names():
    w = _offline()
    a1, a2, b, c = _Poll(w, "a"), _Poll(w, "a"), _Poll(w, "b"), _Poll(w, "c")
    assert w.parked == 4
    w.wake("a b")  # each woken poll leaves the table while the wake-up goes through it
    assert (a1.woken, a2.woken, b.woken, c.woken) == (1, 1, 1, 0)
    assert w.parked == 1 and set(w._parked) == {"c"}  # nothing left behind by polls that ended
    w.unpark("c", c)
    assert not w._parked
    await w.close()


async def test_wake_all_and_close_answer_every_parked_poll():
    w = _offline()
    a, b = _Poll(w, "a"), _Poll(w, "b")
    w.wake_all()
    assert (a.woken, b.woken) == (1, 1)
    c = _Poll(w, "c")
    await w.close()
    assert c.woken == 1 and not w.live


async def test_a_stop_event_wakes_the_parked_polls_through_one_task():
    w = _offline()
    stop = asyncio.Event()
    a = _Poll(w, "a")
    w.stop_on(stop)
    w.stop_on(stop)
    assert len(w._stops) == 1
    stop.set()
    await asyncio.sleep(0.01)
    assert a.woken == 1
    await w.close()


async def test_a_wake_up_for_no_parked_poll_costs_nothing():
    w = _offline()
    w.wake("x y z")  # nothing parked: not even split
    assert w.parked == 0
    await w.close()
