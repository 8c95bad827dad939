"""A dimension's input queue and its worker: drain in batches, match in one index call,
store every delivery of the batch in one atomic call (overlapping the next match), then answer."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from concurrent.futures import Executor
from dataclasses import dataclass, field

import numpy as np

from bluedove.store import Store
from matcher.index import SubscriptionSet
from matcher.stats import ValueSample, WindowStats


@dataclass
class _Request:
    ids: list[str]
    bodies: list[bytes]
    points: np.ndarray
    ttls: list[int]  # dedup mark lifetime per message (s)
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass
class BatchResult:
    matched: int = 0
    delivered: int = 0
    fresh: int = 0


class DimensionQueue:
    def __init__(self, dim: int, get_set, store: Store, executor: Executor, stats: WindowStats,
                 batch_max: int = 256, deliver: str = "store", store_inflight: int = 2) -> None:
        self.dim = dim
        self._get_set = get_set  # returns the live SubscriptionSet (it is swapped on reload)
        self.store = store
        self.executor = executor
        self.stats = stats
        self.sample = ValueSample()  # where inside the segment the work lies (split points)
        self.batch_max = batch_max
        self.deliver_mode = deliver  # "store" (normal) or "count" (benchmarks: match only)
        # Batches matched and not yet stored: while one batch's store call is under way the
        # next is matched (the store round trip no longer idles the index), and what queues
        # meanwhile forms a bigger next batch. Each batch is still one atomic store call.
        self._slots = asyncio.Semaphore(store_inflight)
        self._pending: deque[_Request] = deque()
        self._queued = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._finishing: set[asyncio.Task] = set()

    def __len__(self) -> int:
        return self._queued

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dim{self.dim}")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._finishing) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass

    async def submit(self, ids: list[str], bodies: list[bytes], points: np.ndarray,
                     ttls: list[int] | None = None) -> BatchResult:
        req = _Request(ids, bodies, points, ttls or [self.store.limits.dedup_window_s] * len(ids))
        self._pending.append(req)
        self._queued += len(ids)
        self.stats.arrived(len(ids), time.monotonic())
        self._wake.set()
        return await req.done

    def _take(self) -> list[_Request]:
        taken, n = [], 0
        while self._pending and (not taken or n + len(self._pending[0].ids) <= self.batch_max):
            req = self._pending.popleft()
            taken.append(req)
            n += len(req.ids)
        return taken

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            await self._slots.acquire()  # released when the batch taken next is answered
            batch = self._take()
            n = sum(len(r.ids) for r in batch)
            try:
                points = batch[0].points if len(batch) == 1 else np.concatenate([r.points for r in batch])
                subset: SubscriptionSet = self._get_set()
                t0 = time.perf_counter()
                groups = await loop.run_in_executor(self.executor, subset.match_batch, points)
                busy = time.perf_counter() - t0
            except BaseException as exc:
                self._answer(batch, n, exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            task = loop.create_task(self._finish(batch, points, groups, n, busy))
            self._finishing.add(task)
            task.add_done_callback(self._finishing.discard)

    async def _finish(self, batch: list[_Request], points: np.ndarray, groups: list[dict[str, list[str]]], n: int,
                      busy: float) -> None:
        """Store one matched batch (one atomic call), then answer each of its forwarders."""
        try:
            result = await self._store(batch, groups)
        except BaseException as exc:  # the store failed: every forwarder of the batch hears it
            self._answer(batch, n, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        self.stats.processed(n, busy, time.monotonic())
        matches = [sum(len(s) for s in g.values()) for g in groups]  # per message
        self.sample.add(points[:, self.dim], np.array(matches, dtype=np.float64))
        pos = 0
        for r in batch:
            matched = sum(matches[pos : pos + len(r.ids)])
            pos += len(r.ids)
            if not r.done.done():
                r.done.set_result(BatchResult(
                    matched=matched,
                    delivered=result.delivered,  # of the whole store batch
                    fresh=result.fresh,
                ))
        self._answer(batch, n, None)

    def _answer(self, batch: list[_Request], n: int, exc: BaseException | None) -> None:
        """The batch leaves the queue: fail whoever still waits with `exc`, free its slot."""
        if exc is not None:
            err = exc if isinstance(exc, Exception) else RuntimeError("matcher stopping")
            for r in batch:
                if not r.done.done():
                    r.done.set_exception(err)
        self._queued -= n
        self._slots.release()

    async def _store(self, batch: list[_Request], groups: list[dict[str, list[str]]]) -> BatchResult:
        if self.deliver_mode == "count":
            return BatchResult()
        messages: list[tuple[str, str, int]] = []
        deliveries: list[tuple[str, int, str]] = []
        i = 0
        for r in batch:
            for mid, body, ttl in zip(r.ids, r.bodies, r.ttls):
                messages.append((mid, body, ttl))  # bytes go to Redis as they are
                for queue, subs in groups[i].items():
                    deliveries.append((queue, i, json.dumps(subs)))
                i += 1
        fresh, written = await self.store.deliver(messages, deliveries)
        return BatchResult(delivered=written, fresh=fresh)
