"""bluedove/store/wakeups.py without a server: which parked polls a wake-up reaches, and the
race between looking at a queue and parking."""

from __future__ import annotations

import asyncio

from bluedove.store.wakeups import Parked, Wakeups


def _offline() -> Wakeups:
    """Wakeups whose subscription never comes up (its connect fails): `live` stays False."""
    def connect(_attempt: int) -> object:
        raise ConnectionError("no server in a unit test")
    return Wakeups(connect)


async def test_a_wake_up_reaches_exactly_the_polls_parked_on_the_streams_it_names():
    w = _offline()
    a1, a2, b, c = w.park("a"), w.park("a"), w.park("b"), w.park("c")
    w.wake("a b")
    assert a1.woken and a2.woken and b.woken and not c.woken
    assert w.parked == 4
    for stream, p in (("a", a1), ("a", a2), ("b", b), ("c", c)):
        w.unpark(stream, p)
    assert w.parked == 0 and not w._parked  # nothing left behind by polls that ended
    await w.close()


async def test_a_wake_up_between_looking_and_waiting_is_not_lost():
    """arm() comes before the look at the queue; a delivery announced while the poll looks
    makes the wait that follows return at once."""
    p = Parked()
    p.arm()
    p.wake()  # the wake-up lands while the poll's POLL call is under way
    assert await p.wait(10.0) is True
    p.arm()
    assert await p.wait(0.01) is False  # nothing since: the wait times out


async def test_a_wake_up_during_the_wait_ends_it():
    p = Parked()
    p.arm()
    waiting = asyncio.create_task(p.wait(10.0))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    p.wake()
    assert await asyncio.wait_for(waiting, 1.0) is True


async def test_wake_all_and_close_answer_every_parked_poll():
    w = _offline()
    a, b = w.park("a"), w.park("b")
    w.wake_all()
    assert a.woken and b.woken
    a.arm()
    b.arm()
    await w.close()
    assert a.woken and b.woken and not w.live


async def test_a_stop_event_wakes_the_parked_polls_through_one_task():
    w = _offline()
    stop = asyncio.Event()
    a = w.park("a")
    w.stop_on(stop)
    w.stop_on(stop)
    assert len(w._stops) == 1
    a.arm()
    stop.set()
    assert await a.wait(5.0) is True
    await w.close()


async def test_a_wake_up_for_no_parked_poll_costs_nothing():
    w = _offline()
    w.wake("x y z")  # nothing parked: not even split
    assert w.parked == 0
    await w.close()
