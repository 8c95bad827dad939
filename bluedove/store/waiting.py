"""A poll that waits: its looks at a queue, and its parks between them, driven by callbacks.

A long poll that finds its queue empty parks until a delivery write names its queue
(bluedove/store/wakeups.py), its time runs out, its process stops, or its client goes. While
parked it is this one object in the wake-up table and one timer: no task, no coroutine frames,
no connection. That is what lets one dispatcher hold tens of thousands of parked polls
(docs/benchmarks.md, "Fleet: parked long polls"). Each look at the queue is a short task of
its own (one POLL call); the answer goes to a callback, once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NamedTuple, Protocol

# The answer of a poll with nothing in it.
EMPTY = '{"messages":[]}'


class Looked(NamedTuple):
    """What one look at a queue found: n deliveries handed out, the REST body, their entry ids
    joined by "," (for the slow path), and whether the queue has deliveries handed out and
    not yet acked (their visibility timeout passing is announced by no write)."""

    n: int
    body: str
    handed: str
    pending: bool


# A poll's answer: (n, body, handed) of its last look, or the error that ended it.
Taken = tuple[int, str, str]
Done = Callable[[Taken | BaseException], None]


class PollWait:
    """One poll of one queue: look; when nothing is there and time is left, park; look again
    when woken; answer `done` once, with the first look that found something, or the last one.

    `look` makes one look (a POLL call). Between looks the poll waits for a wake-up of
    `stream`, or at most 1 s while the queue has unacked deliveries (one may come back when
    its visibility timeout passes) or while the wake-up subscription is down (`wakeups.live`
    is False: a write may go unheard). Once `stop` is set, the next look answers. After a
    wait, a poll whose client has gone (`gone()`) answers empty without looking, so nothing
    is handed out to nobody."""

    __slots__ = ("_deadline", "_done", "_gone", "_look", "_over", "_stop", "_stream", "_task", "_timer",
                 "_wakeups", "_woken")

    def __init__(self, look: Callable[[], Awaitable[Looked]], wakeups: WakeupTable, stream: str, wait_s: float,
                 done: Done, stop: asyncio.Event | None = None, gone: Callable[[], bool] | None = None) -> None:
        self._look, self._wakeups, self._stream, self._done = look, wakeups, stream, done
        self._stop, self._gone = stop, gone
        self._deadline = asyncio.get_running_loop().time() + wait_s
        self._woken = self._over = False
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._stop is not None:
            self._wakeups.stop_on(self._stop)
        self._wakeups.park(self._stream, self)
        self._look_now()

    def wake(self) -> None:
        """A delivery was written to the queue (or every poll is asked to look again)."""
        self._woken = True  # kept if a look is under way: the poll looks once more after it
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._next()

    def cancel(self) -> None:
        """End without an answer (whoever waited for it has gone). A look under way runs to
        its end, and what it found is dropped."""
        self._end()

    def _look_now(self) -> None:
        self._woken = False  # before looking: a wake-up that lands during the look is kept
        self._task = asyncio.get_running_loop().create_task(self._looking())

    async def _looking(self) -> None:
        try:
            got = await self._look()
        except BaseException as exc:
            self._finish(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        self._task = None  # (held while it runs: the loop keeps only a weak reference)
        if self._over:
            return
        loop = asyncio.get_running_loop()
        left = self._deadline - loop.time()
        if got.n or left <= 0 or (self._stop is not None and self._stop.is_set()):
            self._finish((got.n, got.body, got.handed))
        elif self._woken:
            self._next()
        else:
            wait = left if self._wakeups.live and not got.pending else min(left, 1.0)
            self._timer = loop.call_later(wait, self._timed_out)

    def _timed_out(self) -> None:
        self._timer = None
        self._next()

    def _next(self) -> None:
        if self._gone is not None and self._gone():
            self._finish((0, EMPTY, ""))
        else:
            self._look_now()

    def _finish(self, result: Taken | BaseException) -> None:
        if not self._over:
            self._end()
            self._done(result)

    def _end(self) -> None:
        self._over = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wakeups.unpark(self._stream, self)


class WakeupTable(Protocol):
    """What PollWait needs of the wake-up table (bluedove/store/wakeups.py's Wakeups)."""

    live: bool

    def park(self, stream: str, poll: PollWait) -> None: ...

    def unpark(self, stream: str, poll: PollWait) -> None: ...

    def stop_on(self, stop: asyncio.Event) -> None: ...


async def waited(poll: Callable[[Done], PollWait]) -> Taken:
    """The answer of the poll `poll(done)` makes and starts, as a coroutine's result; cancelling
    the coroutine cancels the poll."""
    future: asyncio.Future[Taken | BaseException] = asyncio.get_running_loop().create_future()

    def done(result: Taken | BaseException) -> None:
        if not future.done():
            future.set_result(result)

    waiting = poll(done)
    waiting.start()
    try:
        result = await future
    except asyncio.CancelledError:
        waiting.cancel()
        raise
    if isinstance(result, BaseException):
        raise result
    return result
