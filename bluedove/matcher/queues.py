"""The matcher's input queue and its worker: drain whole requests in batches, match every
dimension of a batch in one index job, store every delivery of the batch in one atomic call
(overlapping the next match), then answer.

One queue per matcher, not per dimension: the index runs on one thread anyway, and the fixed
costs (a thread hop, a store round trip, a gRPC call) are paid per batch, so a batch that
holds all the dimensions' waiting messages pays them once. The per-dimension figures of
the paper's §III-B (λ, μ, q) are still kept per dimension: arrivals and queued messages are
counted by dimension, and a batch's work is shared among its dimensions (`_finish`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import redis.exceptions

from bluedove.core.log_chunk import chunk_fields
from bluedove.core.wire import Part
from bluedove.matcher.errors import NotReady
from bluedove.matcher.filter_book import reader
from bluedove.matcher.index import SubscriptionSet
from bluedove.matcher.index_thread import IndexThread
from bluedove.matcher.load import Totals, ValueSample, WindowStats, apportion
from bluedove.matcher.matches import Matches
from bluedove.runtime.cpu_limit import CpuWatch
from bluedove.store.replays import SEAM_S, SeamRow
from bluedove.store.store import MatcherStore

# A batch of at most this many messages is matched on the event loop when the index thread is
# idle (bluedove/matcher/index_thread.py): a few walks cost less than the thread hops.
INLINE_MOST = 8


def _stopping() -> NotReady:
    return NotReady("this space's input queue is stopping (its space dropped, or the matcher stopping); try another")


@dataclass(eq=False)
class _Request:
    """One Forward call's parts waiting to be batched, and the future its answer goes to."""

    parts: list[Part]
    n: int
    done: asyncio.Future[BatchResult] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass(frozen=True)
class LogTarget:
    """Where a space with a retention logs its batches: the space, this matcher's shard, the
    retention (bluedove/store/message_log.py)."""

    space: str
    shard: int
    retention_s: int


@dataclass
class BatchResult:
    """A request's matches, and the deliveries and new messages its batch stored."""

    matched: int = 0
    delivered: int = 0
    fresh: int = 0


class MatcherQueue:
    """The matcher's one input queue of Forward requests, and the worker that matches and stores them."""

    def __init__(self, k: int, get_set: Callable[[int], SubscriptionSet], store: MatcherStore, index: IndexThread,
                 stats: list[WindowStats], batch_max: int = 1024, deliver: str = "store",
                 store_inflight: int = 8, ttls: tuple[int, int] = (600, 120)) -> None:
        self.k = k
        # a message's dedup marks live this long (s): an id the publisher chose, one we made
        self.client_ttl, self.own_ttl = ttls
        self._get_set = get_set  # the live SubscriptionSet of a dimension (sets are swapped on reload)
        self.store = store
        self.index = index
        self.stats = stats
        self.samples = [ValueSample() for _ in range(k)]  # where inside each segment the work lies
        self.totals = Totals(k)  # matches, deliveries and batches since start (bluedove/matcher/metrics.py)
        self.batch_max = batch_max
        self.deliver_mode = deliver  # "store" (normal) or "count" (benchmarks: match only)
        # Batches matched and not yet stored: while one batch's store call is under way the
        # next is matched (the store round trip no longer idles the index), and what queues
        # meanwhile forms a bigger next batch. Each batch is still one atomic store call.
        # Eight, not two: on a loaded machine a store call spends much of its time waiting
        # for Redis, shared by every matcher, and the index idled behind two such calls
        # (`bench delivery`, write phase: ~31,000 deliveries/s with 2 or 4, ~38,000 with 8).
        self._slots = asyncio.Semaphore(store_inflight)
        self._pending: deque[_Request] = deque()
        self._queued = [0] * k
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._finishing: set[asyncio.Task[None]] = set()
        # Two rates per dimension (bluedove/matcher/load.py WindowStats). `stats`: μ, messages
        # matched per second of matching (the walk and its answer, wall time): what forwarding
        # compares between a matcher's sets, as the paper's §III-B does. `service`: messages
        # served per second of the matcher's whole work on them, what the autoscaler's demand
        # reads: the process's CPU time from when a busy spell began (a Forward that found the
        # queue empty entered the matcher: its decoding counts) to each batch's stored
        # deliveries, the rest since the batch before, cut among the batch's dimensions by
        # `apportion`. CPU time, not the wall time from queue to store: it adds up over the
        # threads (gRPC, decoding, the walk, the store client) and over batches that overlap
        # (8 may wait on the store), leaves out the store's round trip and the waits for a
        # core, and under a CPU quota is what the quota bounds. Divided by the CPU the matcher
        # may use (its cgroup's limit, at most one core: one event loop and one index thread
        # share a GIL), it counts messages per second of the matcher's capacity. `cpu` also
        # gives the report its use of the limit (bluedove/runtime/cpu_limit.py).
        self.service = [WindowStats(st.window_s, st.bucket_s) for st in stats]
        self.cpu = CpuWatch(stats[0].window_s if stats else 5.0)
        self._cpu_mark = time.process_time()
        self.log: LogTarget | None = None  # a space with a retention: each batch's chunk goes to its log
        self._seam: dict[str, float] = {}  # replaying subscription -> when its seam closes (monotonic)
        self._taken: set[_Request] = set()  # requests in a batch being matched or stored

    def open_seam(self, sub_ids: list[str], now: float) -> None:
        """Write these new replaying subscriptions' live deliveries with replay marks for SEAM_S."""
        for s in sub_ids:
            self._seam[s] = now + SEAM_S

    async def barrier(self) -> None:
        """Until every batch taken so far is stored or failed (a subscription filed before this
        call is then in every later batch: whatever was matched without it is in the log)."""
        waiting = [r.done for r in self._taken if not r.done.done()]
        if waiting:
            await asyncio.wait(waiting)

    def _replaying(self) -> list[str]:
        now = time.monotonic()
        for s in [s for s, until in self._seam.items() if until <= now]:
            del self._seam[s]
        return list(self._seam)

    def __len__(self) -> int:
        return sum(self._queued)

    def queued(self, dim: int) -> int:
        """Messages of dimension `dim` waiting or being matched or stored (the paper's q)."""
        return self._queued[dim]

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="match")

    async def stop(self) -> None:
        """Stop matching: a request under way or still queued is refused NotReady (UNAVAILABLE,
        so its dispatcher tries another candidate), never left waiting."""
        tasks = [t for t in (self._task, *self._finishing) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
        while self._pending:
            r = self._pending.popleft()
            if not r.done.done():
                r.done.set_exception(_stopping())

    async def submit(self, parts: list[Part], cpu_at: float | None = None) -> BatchResult:
        """Match and store one request's messages (all its parts in the same batch). `cpu_at`:
        the process's CPU time when the request entered the matcher (before its decoding)."""
        if not len(self):  # a busy spell begins: the CPU time of the idle spell is no one's
            self._cpu_mark = time.process_time() if cpu_at is None else cpu_at
        now = time.monotonic()
        for p in parts:
            self._queued[p.dim] += p.n
            self.stats[p.dim].arrived(p.n, now)
        req = _Request(parts, sum(p.n for p in parts))
        self._pending.append(req)
        self._wake.set()
        return await req.done

    def _take(self) -> list[_Request]:
        taken: list[_Request] = []
        n = 0
        while self._pending and (not taken or n + self._pending[0].n <= self.batch_max):
            req = self._pending.popleft()
            taken.append(req)
            n += req.n
        self._taken.update(taken)
        return taken

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            await self._slots.acquire()  # released when the batch taken next is answered
            batch = self._take()
            parts = [p for r in batch for p in r.parts]
            try:
                match = self.index.run_small if sum(r.n for r in batch) <= INLINE_MOST else self.index.run
                found, busy, walk_cpu = await match(self._match, parts)
            except BaseException as exc:
                self._answer(batch, exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            self.totals.walked(walk_cpu)
            task = loop.create_task(self._finish(batch, parts, found, busy, walk_cpu))
            self._finishing.add(task)
            task.add_done_callback(self._finishing.discard)

    def _match(self, parts: list[Part]) -> tuple[list[Matches], dict[int, float], dict[int, float]]:
        """On the index thread: what each part's messages match (as arrays, bluedove/matcher/matches.py),
        one index call per dimension of the batch, and the index thread's CPU time in each
        dimension's walk and check (Totals.walk_cpu_s). A matcher that only counts
        (`deliver="count"`) counts each point's matches and queues, listing no subscription."""
        by_dim: dict[int, list[int]] = {}
        for i, p in enumerate(parts):
            by_dim.setdefault(p.dim, []).append(i)
        found: list[Matches] = [None] * len(parts)  # type: ignore[list-item]
        busy: dict[int, float] = {}
        cpu: dict[int, float] = {}
        fetch = self.deliver_mode != "count"
        for dim, idx in by_dim.items():
            points = parts[idx[0]].points if len(idx) == 1 else np.concatenate([parts[i].points for i in idx])
            s = self._get_set(dim)
            t0, c0 = time.perf_counter(), time.thread_time()
            # the walk, then the filters' check on the stored bodies
            if fetch:
                m = s.directory.matches(*s.match(points, reader([parts[i] for i in idx])))
            else:
                m = s.count(points, reader([parts[i] for i in idx]))
            cpu[dim] = time.thread_time() - c0
            busy[dim] = time.perf_counter() - t0
            if len(idx) == 1:
                found[idx[0]] = m
                continue
            pos = 0
            for i in idx:
                n = parts[i].n
                found[i] = m.part(pos, pos + n)
                pos += n
        return found, busy, cpu

    async def _finish(self, batch: list[_Request], parts: list[Part], found: list[Matches],
                      busy: dict[int, float], walk_cpu: dict[int, float]) -> None:
        """Store one matched batch (one atomic call), then answer each of its forwarders."""
        try:
            result = await self._store(parts, found)
        except BaseException as exc:  # the store failed: every forwarder of the batch hears it
            self._answer(batch, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        now = time.monotonic()
        done: dict[int, int] = {}
        matched = []
        for p, m in zip(parts, found):
            matched.append(int(m.counts.sum()))
            done[p.dim] = done.get(p.dim, 0) + p.n
            self.totals.matches[p.dim] += matched[-1]
            self.totals.deliveries[p.dim] += int(m.fanout.sum())
            self.samples[p.dim].add(p.points[:, p.dim], m.counts.astype(np.float64))
        cpu = time.process_time()
        cpu, self._cpu_mark = cpu - self._cpu_mark, cpu
        cores = self.cpu.capacity(most=1.0)
        work = apportion(cpu / cores, done, {d: s / cores for d, s in walk_cpu.items()})
        for dim, n in done.items():
            self.stats[dim].processed(n, busy.get(dim, 0.0), now)
            self.service[dim].processed(n, work[dim], now)
        self.totals.batch(sum(done.values()), result.delivered)
        pos = 0
        for r in batch:
            n = sum(matched[pos:pos + len(r.parts)])
            pos += len(r.parts)
            if not r.done.done():
                r.done.set_result(BatchResult(matched=n, delivered=result.delivered, fresh=result.fresh))
        self._answer(batch, None)

    def _answer(self, batch: list[_Request], exc: BaseException | None) -> None:
        """The batch leaves the queue: fail whoever still waits with `exc`, free its slot."""
        for r in batch:
            self._taken.discard(r)
            if exc is not None and not r.done.done():
                r.done.set_exception(exc if isinstance(exc, Exception) else _stopping())
            for p in r.parts:
                self._queued[p.dim] -= p.n
        self._slots.release()

    async def _store(self, parts: list[Part], found: list[Matches]) -> BatchResult:
        if self.deliver_mode == "count":
            return BatchResult()
        messages: list[tuple[str, bytes, int]] = []
        deliveries: list[tuple[str, int, str]] = []
        seam: list[SeamRow] = []
        replaying = self._replaying()
        marks: list[bool] = []
        for p, m in zip(parts, found):
            client = p.client.tolist()
            # a message is written when it has deliveries or its publisher chose its id (its
            # own mark); the others leave nothing to write or remember
            written = np.flatnonzero((m.fanout > 0) | p.client).tolist()
            index = dict(zip(written, range(len(messages), len(messages) + len(written))))
            for j in written:
                messages.append((p.id(j), p.body(j), self.client_ttl if client[j] else self.own_ttl))
                marks.append(client[j])
            at, queues, texts = m.delivery_rows()
            rows = zip(queues, map(index.__getitem__, at), texts)
            if replaying:
                _split(rows, replaying, deliveries, seam)
            else:
                deliveries.extend(rows)
        log = self.log
        call = None if log is None or not parts else self.store.log_call(
            log.space, log.shard, log.retention_s, chunk_fields(parts, self.k))
        if not messages and call is None:
            return BatchResult()
        try:
            fresh, written_n = await self.store.deliver(messages, deliveries, marks, seam, call)
        except AttributeError as exc:
            # redis-py's asyncio cluster client, connecting to a node that has just died, can
            # fail with an AttributeError (its socket writer gone) instead of a ConnectionError.
            # The store failed, not this matcher: the caller answers ABORTED, as for any RedisError.
            raise redis.exceptions.ConnectionError(f"the store connection was lost: {exc!r}") from exc
        return BatchResult(delivered=written_n, fresh=fresh)


def _split(rows: Iterable[tuple[str, int, str]], replaying: list[str], plain: list[tuple[str, int, str]],
           seam: list[SeamRow]) -> None:
    """Deliveries into those of no replaying subscription and those of some (with which)."""
    quoted = [(s, f'"{s}"') for s in replaying]
    for queue, i, text in rows:
        hit = [s for s, q in quoted if q in text]
        if hit:
            seam.append((queue, i, text, hit))
        else:
            plain.append((queue, i, text))
