"""A batching lane: items submitted one by one leave together in calls, each submitter awaiting its own result.

A call to a matcher or to the store costs both ends far more than an item it carries, so the
lanes gather what queues up while calls are under way into the next call. Every lane of the
dispatcher is a `Batcher`: one per matcher for publishes (its items chunks of messages,
bluedove/dispatcher/publish/forwarder.py), the catalogue writer and one per matcher for
subscribes (its items subscriptions, bluedove/dispatcher/subscriber.py); so is the store's lane
of the polls' looks and acks (bluedove/store/queues.py).

- A call carries what has queued up, oldest first, up to `max_weight`: an item counts for
  its weight (a subscription 1, a chunk its messages); the first item of a call always goes,
  however heavy.
- At most `max_inflight` calls are under way.
- An idle lane's call leaves at the next turn of the event loop, so that the items submitted
  by the callbacks ready meanwhile share it. While calls are under way, a further call leaves
  alongside only once `alongside` weight waits; until then the items wait for a call to end
  and leave together in the next. The publish lanes wait for half a call's worth
  (`forward_batch_max // 2`), because sending each publish's chunk as soon as a slot was free
  made twice the calls, each half as full (docs/benchmarks.md, "Publish"); the subscribe lanes
  for 16 subscriptions, for the same reason; the catalogue writer sends on any free slot
  (`alongside` 1, the default).
- With `hold_s`, a call that ends while less than `alongside` waits lets the next leave that
  much later, with what queued up meanwhile (the subscribe lanes: 2 ms). An idle lane's call
  is not held.
- `handle(items)` returns one result per item, in order. If it raises, the exception is each
  item's result: a submitter's future gets its result or the exception, never raises.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Batcher(Generic[T, R]):
    """A lane of calls `handle(items) -> results`, batched: see the module docstring for the rules."""

    def __init__(self, handle: Callable[[list[T]], Awaitable[Sequence[R]]], max_weight: int, max_inflight: int,
                 alongside: int = 1, hold_s: float = 0.0) -> None:
        self.handle = handle
        self.max_weight, self.max_inflight, self.alongside = max_weight, max_inflight, alongside
        self.hold_s = hold_s
        self.items: deque[tuple[T, int, asyncio.Future[R | Exception]]] = deque()
        self.queued = 0  # the weight of `items`
        self.inflight = 0
        self.scheduled = False

    def submit(self, item: T, weight: int = 1) -> asyncio.Future[R | Exception]:
        """Queue `item`; its future gets its result, or the exception its call met."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[R | Exception] = loop.create_future()
        self.items.append((item, weight, fut))
        self.queued += weight
        if not self.scheduled:  # after the callbacks ready now: items submitted meanwhile share the call
            self.scheduled = True
            loop.call_soon(self._pump)
        return fut

    def _pump(self) -> None:
        self.scheduled = False
        while self.items and self.inflight < self.max_inflight \
                and (not self.inflight or self.queued >= self.alongside):
            batch: list[tuple[T, int, asyncio.Future[R | Exception]]] = []
            n = 0
            while self.items and (not batch or n + self.items[0][1] <= self.max_weight):
                batch.append(self.items.popleft())
                n += batch[-1][1]
            self.queued -= n
            self.inflight += 1
            asyncio.get_running_loop().create_task(self._call(batch))

    async def _call(self, batch: list[tuple[T, int, asyncio.Future[R | Exception]]]) -> None:
        results: Sequence[R | Exception]
        try:
            try:
                results = await self.handle([item for item, _, _ in batch])
            except Exception as exc:  # noqa: BLE001 - reported to each waiting submitter
                results = [exc] * len(batch)
            for (_, _, fut), r in zip(batch, results):
                if not fut.done():  # a submitter that stopped waiting cancelled it
                    fut.set_result(r)
        finally:
            self.inflight -= 1
            if self.hold_s and self.items and self.queued < self.alongside:
                if not self.scheduled:
                    self.scheduled = True
                    asyncio.get_running_loop().call_later(self.hold_s, self._pump)
            else:
                self._pump()
