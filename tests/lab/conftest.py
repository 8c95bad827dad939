"""Fixtures of the lab's tests: a fake clock for the load generators (time is an argument)."""

from __future__ import annotations

import asyncio
import heapq
import itertools

import pytest


class FakeClock:
    """A clock that moves only when `run_until` moves it: sleepers wake in time order, each
    once every task has run as far as it can (the load talks to an httpx.MockTransport, which
    answers at once)."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t
        self._sleepers: list[tuple[float, int, asyncio.Future]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.t + seconds, next(self._seq), fut))
        await fut

    async def _settle(self) -> None:
        for _ in range(50):
            await asyncio.sleep(0)

    async def run_until(self, t: float) -> None:
        """Advance to `t`, waking every sleeper due by then."""
        await self._settle()
        while self._sleepers and self._sleepers[0][0] <= t:
            wake, _, fut = heapq.heappop(self._sleepers)
            self.t = max(self.t, wake)
            if not fut.done():
                fut.set_result(None)
            await self._settle()
        self.t = max(self.t, t)

    async def run_for(self, seconds: float) -> None:
        await self.run_until(self.t + seconds)

    async def finish(self, task: asyncio.Task, limit_s: float = 600.0) -> object:
        """Advance time until `task` is done (at most `limit_s` of it); its result."""
        end = self.t + limit_s
        while not task.done() and self.t < end:
            await self.run_for(0.05)
        return task.result()


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock at t=1000 s; tests move it with run_until / run_for / finish."""
    return FakeClock()
