"""The matcher process: a grpc.aio server holding one subscription set and queue per dimension."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import redis.exceptions
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from bluedove.model import Subscription
from bluedove.segments import SegmentTable
from bluedove.settings import MatcherSettings
from bluedove.store import Store
from bluedove.store.store import StoreLimits, wait_ready
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc
from matcher.catalog import SubscriptionSets
from matcher.queues import DimensionQueue
from matcher.stats import WindowStats

log = logging.getLogger("bluedove.matcher")


class Matcher:
    """State of one matcher: the table, the sets, the queues, and the catalogue tail."""

    def __init__(self, settings: MatcherSettings, store: Store, deliver: str = "store") -> None:
        self.s = settings
        self.store = store
        self.generation = time.time_ns()
        # Every index operation (add, remove, match) runs on this one thread: the R-tree is
        # not thread-safe, and the event loop stays free for gRPC and Redis.
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="index")
        self.table: SegmentTable | None = None
        self.sets: SubscriptionSets | None = None
        self.queues: list[DimensionQueue] = []
        self.stats: list[WindowStats] = []
        self.ready = False
        self.log_pos = "0-0"
        self.deliver_mode = deliver
        self._tasks: list[asyncio.Task] = []

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        await wait_ready(self.store)
        raw = None
        while raw is None:
            raw = await self.store.get_table()
            if raw is None:
                await asyncio.sleep(0.2)
        self.table = SegmentTable.from_json(raw)
        k = self.table.space.k
        self.stats = [WindowStats(self.s.stats_window_s) for _ in range(k)]
        self.sets = SubscriptionSets(self.s.id, self.table, self.s.tombstone_ttl_s)
        self.queues = [
            DimensionQueue(i, (lambda i=i: self.sets.sets[i]), self.store, self.executor, self.stats[i],
                           self.s.batch_max, self.deliver_mode)
            for i in range(k)
        ]
        for q in self.queues:
            q.start()
        await self._load_catalogue()
        self.ready = True
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._tail_catalogue()), loop.create_task(self._refresh_table())]
        log.info("matcher %s ready: %s subscriptions per dimension", self.s.id, self.sets.counts())

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for q in self.queues:
            await q.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def _run_index(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def _load_catalogue(self) -> None:
        """Fill fresh sets from a catalogue snapshot, then replay the log written since."""
        pos, subs = await self.store.catalogue_snapshot()
        table = self.table
        sets = SubscriptionSets(self.s.id, table, self.s.tombstone_ttl_s)
        if self.sets is not None:
            sets._tombstones = dict(self.sets._tombstones)

        def fill() -> None:
            sets.add_many([Subscription.from_json(raw, table.space) for raw in subs])

        await self._run_index(fill)
        self.sets, self.log_pos = sets, pos
        await self._apply_changes(block_ms=None)

    async def _apply_changes(self, block_ms: int | None) -> int:
        changes = await self.store.catalogue_changes(self.log_pos, block_ms=block_ms)
        if not changes:
            return 0
        space = self.table.space
        sets = self.sets

        def apply() -> None:
            for _, f in changes:
                if f["op"] == "add":
                    sets.add_subscription(Subscription.from_json(json.loads(f["sub"]), space))
                else:
                    sets.remove(f["id"])

        await self._run_index(apply)
        self.log_pos = changes[-1][0]
        return len(changes)

    async def _tail_catalogue(self) -> None:
        while True:
            try:
                await self._apply_changes(block_ms=self.s.catalog_block_ms)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("catalogue tail failed; retrying")
                await asyncio.sleep(1.0)

    async def _refresh_table(self) -> None:
        """Until gossip carries the table, re-read it from the store; reload on a new epoch."""
        while True:
            await asyncio.sleep(self.s.table_refresh_s)
            try:
                raw = await self.store.get_table()
                if raw and int(raw["epoch"]) > self.table.epoch:
                    new = SegmentTable.from_json(raw)
                    moved = new.segments_of(self.s.id) != self.table.segments_of(self.s.id)
                    self.table = new
                    if moved:
                        self.ready = False
                        await self._load_catalogue()
                        self.ready = True
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("table refresh failed")

    # -- operations ------------------------------------------------------------------------
    async def forward(self, req: pb.ForwardRequest, context) -> pb.ForwardReply:
        if not self.ready:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "matcher is loading its subscriptions")
        dim = req.dimension
        if not 0 <= dim < len(self.queues):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"no dimension {dim}")
        points = np.array([list(m.point) for m in req.messages], dtype=np.float64).reshape(len(req.messages), -1)
        sets = self.sets
        if points.shape[1] != len(self.queues) or not all(sets.owns(dim, v) for v in points[:, dim].tolist()):
            # Only the owner of the segment holding a value has every subscription that may match.
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"not the owner of these values on dimension {dim} at epoch {self.table.epoch}")
        try:
            ttls = [self.s.dedup_window_s if m.client_id else self.s.retry_dedup_s for m in req.messages]
            res = await self.queues[dim].submit([m.id for m in req.messages], [m.body for m in req.messages],
                                                points, ttls)
        except redis.exceptions.RedisError as exc:
            # The store, not this matcher, failed: ABORTED tells the dispatcher not to blame us.
            await context.abort(grpc.StatusCode.ABORTED, f"store unavailable: {exc}")
        return pb.ForwardReply(matched=res.matched, delivered=res.delivered, fresh=res.fresh)

    async def add_subscriptions(self, req: pb.SubscriptionBatch) -> int:
        sets = self.sets
        subs = [(s.id, s.queue, tuple(s.lows), tuple(s.highs)) for s in req.subscriptions]
        return await self._run_index(lambda: sum(sets.add(*s) for s in subs))

    async def remove_subscriptions(self, req: pb.RemoveRequest) -> int:
        sets = self.sets
        ids = list(req.ids)
        return await self._run_index(lambda: sum(sets.remove(i) for i in ids))

    def report(self) -> pb.ReportReply:
        now = time.monotonic()
        dims = []
        counts = self.sets.counts() if self.sets else []
        for i, st in enumerate(self.stats):
            lam, mu = st.rates(now)
            dims.append(pb.DimensionLoad(lam=lam, mu=mu, q=len(self.queues[i]), subs=counts[i],
                                         matched_total=st.total_processed))
        return pb.ReportReply(id=self.s.id, generation=self.generation, ready=self.ready,
                              epoch=self.table.epoch if self.table else 0, dims=dims,
                              window_s=self.s.stats_window_s)


class MatcherServicer(pb_grpc.MatcherServicer):
    """Thin decode-and-dispatch: each handler calls one Matcher method."""

    def __init__(self, m: Matcher) -> None:
        self.m = m

    async def Forward(self, request, context):
        return await self.m.forward(request, context)

    async def AddSubscriptions(self, request, context):
        if self.m.sets is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "matcher is starting")
        return pb.SubscriptionAck(changed=await self.m.add_subscriptions(request))

    async def RemoveSubscriptions(self, request, context):
        if self.m.sets is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "matcher is starting")
        return pb.SubscriptionAck(changed=await self.m.remove_subscriptions(request))

    async def GetTable(self, request, context):
        if self.m.table is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "matcher has no table yet")
        return pb.TableReply(table_json=json.dumps(self.m.table.to_json()))

    async def Report(self, request, context):
        return self.m.report()


async def serve(settings: MatcherSettings, deliver: str = "store") -> None:
    store = Store(settings.store_url, StoreLimits(dedup_window_s=settings.dedup_window_s))
    m = Matcher(settings, store, deliver)
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 * 1024 * 1024),
                                      ("grpc.so_reuseport", 0)])
    pb_grpc.add_MatcherServicer_to_server(MatcherServicer(m), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    server.add_insecure_port(f"{settings.host}:{settings.port}")
    await server.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await m.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    await stop.wait()
    await health_servicer.enter_graceful_shutdown()
    await server.stop(grace=2.0)
    await m.stop()
    await store.close()
