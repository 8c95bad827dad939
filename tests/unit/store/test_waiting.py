"""bluedove/store/waiting.py without a server: when a poll looks at its queue, when it parks,
and that it answers once, whatever ends it."""

from __future__ import annotations

import asyncio
import time

import pytest

from bluedove.store.waiting import EMPTY, Looked, PollWait, waited

NOTHING = Looked(0, EMPTY, "", False)
ONE = Looked(1, '{"messages":[{"x":1}]}', "1-0", False)


class _Table:
    """The wake-up table as PollWait uses it."""

    def __init__(self, live: bool = True) -> None:
        self.live, self.polls, self.stops = live, set(), []

    def park(self, stream: str, poll: PollWait) -> None:
        self.polls.add((stream, poll))

    def unpark(self, stream: str, poll: PollWait) -> None:
        self.polls.discard((stream, poll))

    def stop_on(self, stop: asyncio.Event) -> None:
        self.stops.append(stop)


class _Queue:
    """Looks that find what `found` holds, in turn (then nothing); `gate`, when set, holds each look."""

    def __init__(self, *found: Looked) -> None:
        self.found, self.looks, self.gate = list(found), 0, None

    async def look(self) -> Looked:
        self.looks += 1
        if self.gate is not None:
            await self.gate.wait()
        return self.found.pop(0) if self.found else NOTHING


def _poll(q: _Queue, table: _Table, wait_s: float = 10.0, **kw) -> tuple[PollWait, list]:
    answers: list = []
    p = PollWait(q.look, table, "s", wait_s, answers.append, **kw)
    p.start()
    return p, answers


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_poll_that_finds_deliveries_answers_at_once_and_leaves_the_table():
    table, q = _Table(), _Queue(ONE)
    _, answers = _poll(q, table)
    await _settle()
    assert answers == [(1, ONE.body, "1-0")] and q.looks == 1 and not table.polls


async def test_an_empty_queue_parks_the_poll_with_no_task_until_a_wake_up():
    table, q = _Table(), _Queue(NOTHING, ONE)
    p, answers = _poll(q, table)
    await _settle()
    assert answers == [] and q.looks == 1
    assert p._task is None and p._timer is not None and len(table.polls) == 1  # parked: a timer, no task
    p.wake()
    await _settle()
    assert answers == [(1, ONE.body, "1-0")] and q.looks == 2 and not table.polls


async def test_a_wake_up_during_a_look_is_not_lost():
    """The look under way found nothing, but a delivery was announced while it ran: look again."""
    table, q = _Table(), _Queue(NOTHING, ONE)
    q.gate = asyncio.Event()
    p, answers = _poll(q, table)
    await _settle()
    p.wake()  # the wake-up lands while the POLL call is under way
    q.gate.set()
    await _settle()
    assert answers == [(1, ONE.body, "1-0")] and q.looks == 2


async def test_a_poll_that_finds_nothing_answers_empty_when_its_wait_is_over():
    table, q = _Table(), _Queue()
    start = time.monotonic()
    _, answers = _poll(q, table, wait_s=0.05)
    while not answers:
        await asyncio.sleep(0.01)
    assert answers == [(0, EMPTY, "")] and time.monotonic() - start >= 0.05
    assert q.looks == 2 and not table.polls  # one look at the start, one when the wait is over


async def test_without_the_subscription_a_poll_looks_again_every_second():
    """No wake-up is heard while the subscription is down (or for a visibility timeout passing):
    the poll looks every second on its own."""
    table, q = _Table(live=False), _Queue(NOTHING, ONE)
    p, answers = _poll(q, table)
    await _settle()
    assert 0.9 < p._timer.when() - asyncio.get_running_loop().time() <= 1.0
    pending = _Queue(Looked(0, EMPTY, "", True))
    p2, _ = _poll(pending, _Table(live=True))
    await _settle()
    assert p2._timer.when() - asyncio.get_running_loop().time() <= 1.0
    p2.cancel()
    while not answers:
        await asyncio.sleep(0.05)
    assert answers == [(1, ONE.body, "1-0")]


async def test_a_poll_whose_client_has_gone_answers_empty_without_looking():
    table, q = _Table(), _Queue(NOTHING, ONE)
    gone = [False]
    p, answers = _poll(q, table, gone=lambda: gone[0])
    await _settle()
    gone[0] = True
    p.wake()
    await _settle()
    assert answers == [(0, EMPTY, "")] and q.looks == 1  # ONE is still in the queue, for someone else


async def test_a_stopping_process_answers_its_parked_polls():
    table, q = _Table(), _Queue()
    stop = asyncio.Event()
    p, answers = _poll(q, table, stop=stop)
    await _settle()
    assert table.stops == [stop]  # the table wakes every poll when it is set
    stop.set()
    p.wake()
    await _settle()
    assert answers == [(0, EMPTY, "")] and q.looks == 2


async def test_a_cancelled_poll_leaves_the_table_and_never_answers():
    table, q = _Table(), _Queue()
    p, answers = _poll(q, table)
    await _settle()
    p.cancel()
    assert not table.polls and p._timer is None
    p.wake()
    await asyncio.sleep(0.02)
    assert answers == [] and q.looks == 1


async def test_a_failed_look_is_the_answer_and_waited_raises_it():
    class Refused(Exception):
        pass

    async def look() -> Looked:
        raise Refused

    table = _Table()
    with pytest.raises(Refused):
        await waited(lambda done: PollWait(look, table, "s", 10.0, done))
    assert not table.polls


async def test_cancelling_the_coroutine_cancels_the_poll():
    table, q = _Table(), _Queue()
    task = asyncio.create_task(waited(lambda done: PollWait(q.look, table, "s", 10.0, done)))
    await _settle()
    assert len(table.polls) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not table.polls
