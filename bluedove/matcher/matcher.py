"""One matcher's state and operations: the table, a subscription set per dimension, the input
queue, and the catalogue tail. Its operations return replies or raise MatcherError
(bluedove/matcher/errors.py); bluedove/matcher/servicer.py serves them over gRPC and
bluedove/matcher/server.py runs the process.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, TypeVarTuple

import numpy as np
import redis.exceptions

from bluedove.core.partition.bootstrap import ensure_table, parse_members, register_address
from bluedove.core.partition.modes import held
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import Space
from bluedove.core.wire import Part, WireError
from bluedove.gossip.config import GossipConfig
from bluedove.matcher.decisions import serving_ready
from bluedove.matcher.errors import BadRequest, Busy, NotOwner, NotReady, StoreDown
from bluedove.matcher.handoff import export, load_from_owners
from bluedove.matcher.load import WindowStats
from bluedove.matcher.membership import Membership
from bluedove.matcher.packed import warm_up
from bluedove.matcher.queues import MatcherQueue
from bluedove.matcher.series import run_series
from bluedove.matcher.sets import SubscriptionSets
from bluedove.matcher.sets_owner import SetsOwner
from bluedove.runtime.cpu_limit import NONE_KNOWN
from bluedove.runtime.settings import MatcherSettings
from bluedove.store.spaces import SpaceStore
from bluedove.store.store import MatcherStore, wait_ready
from bluedove.v1 import matcher_pb2 as pb

log = logging.getLogger("bluedove.matcher")
R = TypeVar("R")
Ts = TypeVarTuple("Ts")


class Matcher:
    """State of one matcher: the table, the sets, the queues, and the catalogue tail."""

    def __init__(self, settings: MatcherSettings, store: MatcherStore, deliver: str = "store",
                 gossip: GossipConfig | None = None, seeds: tuple[str, ...] = (), space: Space | None = None,
                 seed: dict[str, Any] | None = None) -> None:
        self.s = settings
        self.store = store
        self.space = space  # given: propose the first table on an empty store, refuse another space
        self.seed = seed  # with the space: the first table's layout (bluedove/core/partition/seeds.py)
        self.advertise = settings.advertise or f"{settings.host}:{settings.port}"
        self.newest_epoch = 0  # the newest table epoch seen, in the store or through gossip
        self.generation = time.time_ns()
        # Every index operation (add, remove, match) runs on this one thread: the R-tree is
        # not thread-safe, and the event loop stays free for gRPC and Redis.
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="index")
        self.table: SegmentTable | None = None
        # The sets, the catalogue log position they are current to, and every reload of them.
        self.owner = SetsOwner(settings, store, self.run_index)
        self.queue: MatcherQueue | None = None
        self.stats: list[WindowStats] = []
        self.ready = False
        self.refused = 0  # Forward calls refused for backpressure (the metrics)
        self.deliver_mode = deliver
        self._tasks: list[asyncio.Task[None]] = []
        # Table changes (gossip, store, hand-off) one at a time.
        self._table_lock = asyncio.Lock()
        self.membership = Membership(self, gossip or GossipConfig(), seeds, settings.peers_dns,
                                     settings.peers_dns_retry_s)
        self._trim_at: float | None = None
        self.stopping = asyncio.Event()  # set when the process should exit

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        await wait_ready(self.store)
        self.table = await self._boot_table()
        self.newest_epoch = self.table.epoch
        k = self.table.space.k
        self.stats = [WindowStats(self.s.stats_window_s) for _ in range(k)]
        self.owner.begin(self.table)
        self.queue = queue = MatcherQueue(k, lambda i: self._started().sets[i], self.store, self.executor,
                                          self.stats, self.s.batch_max, self.deliver_mode,
                                          ttls=(self.s.dedup_window_s, self.s.retry_dedup_s))
        queue.start()
        # The index walk compiled before we join: a compile holds the GIL long enough for the
        # other members to suspect a process that has just joined.
        await self.run_index(warm_up)
        # Gossip next: liveness does not wait for a long catalogue load (Forward answers
        # UNAVAILABLE meanwhile, and dispatchers try another candidate).
        self.membership.start(self.advertise, self.table)
        async with self._table_lock:
            await self.owner.load_catalogue(self.table)
        self.ready = True
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.owner.follow()), loop.create_task(self._watch_stored_table()),
                       loop.create_task(self._trim()), loop.create_task(run_series(self, queue.totals))]
        log.info("matcher %s ready: %s subscriptions per dimension", self.s.id, self._started().counts())
        # What start-up left (the imports, the compiled kernels, the first sets) is never
        # garbage: out of the collector's reach, a full collection no longer walks it (~70 ms
        # each, a pause a Forward waits through, e.g. under a queue deletion's allocations).
        gc.collect()
        gc.freeze()

    async def _boot_table(self) -> SegmentTable:
        """The stored table: with a space, proposed first if the store has none (as `bluedove init` does;
        raises SpaceMismatch for a table over another space), else waited for; `default` registered (every
        way of starting a cluster boots a matcher). Our address is stored first if we own segments without it."""
        if self.space is not None:
            members = (parse_members(self.s.boot_members, "--boot-members") if self.s.boot_members
                       else {self.s.id: self.advertise})
            table, created = await ensure_table(self.store, self.space, members, self.seed,
                                                given_from=f"--space {self.s.space_file}")
            if created:
                log.warning("matcher %s wrote the first segment table: owners %s", self.s.id, ", ".join(members))
        else:
            raw = None
            while raw is None:
                raw = await self.store.get_table()
                if raw is None:
                    await asyncio.sleep(self.s.table_wait_s)
            table = SegmentTable.from_json(raw)
        await SpaceStore(self.store.r).ensure_default(table.space)
        was = table.members.get(self.s.id)
        table = await register_address(self.store, self.s.id, self.advertise, table)
        if was is not None and was != self.advertise:
            log.warning("matcher %s registered its address %s (was %s) at epoch %d", self.s.id, self.advertise,
                        was or "none", table.epoch)
        return table

    def serving_ready(self) -> bool:
        """gRPC health "bluedove.ready" (the readiness probe): see `decisions.serving_ready`."""
        return serving_ready(self.ready, self.s.id, self.table, max(self.newest_epoch, self.membership.epoch()))

    async def stop(self) -> None:
        await self.membership.stop()
        for t in self._tasks:
            t.cancel()
        if self.queue is not None:
            await self.queue.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def run_index(self, fn: Callable[[*Ts], R], *args: *Ts) -> R:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    @property
    def sets(self) -> SubscriptionSets | None:
        return self.owner.sets

    # -- the segment table -----------------------------------------------------------------
    async def apply_table(self, new: SegmentTable) -> None:
        """Adopt a newer table. A range that grew is loaded first (its values are refused
        until then, so dispatchers try another candidate). A range that shrank is kept for
        `handoff_grace_s` (dispatchers still on the old table may send us its messages, and
        the catalogue tail keeps the kept part complete), then dropped."""
        async with self._table_lock:
            if self.table is not None and new.epoch <= self.table.epoch:
                return
            mine = held(self.s.partition, new, self.s.id)
            segments = self._started().segments
            if not _within(mine, segments):
                await self.owner.load_catalogue(new)
            elif mine != segments:
                self._trim_at = time.monotonic() + self.s.handoff_grace_s
            self.table = new
            self.newest_epoch = max(self.newest_epoch, new.epoch)
            self.membership.offer(new)
            log.info("matcher %s at epoch %d: segments %s", self.s.id, new.epoch, mine or "none (idle)")

    async def prepare(self, new: SegmentTable, adopt: bool = False,
                      sources: Sequence[pb.Source] = ()) -> pb.PrepareReply:
        """Hand-off: load what `new` assigns to us before it is published (from the old owners
        given as `sources`, else from the catalogue); with `adopt`, also take it as our table
        (after it is published)."""
        async with self._table_lock:
            mine = held(self.s.partition, new, self.s.id)
            if not _within(mine, self._started().segments):
                loaded = False
                if sources:
                    try:
                        await load_from_owners(self.owner, new, sources, self.s.export_timeout_s, self.s)
                        loaded = True
                    except Exception as exc:  # noqa: BLE001 - an old owner failed: the catalogue has it all
                        log.warning("hand-off from the old owners failed (%r); loading from the catalogue", exc)
                if not loaded:
                    # Keep what we hold too until the table is adopted and the grace is over: a
                    # re-seed may move our range away while messages of the old one are queued.
                    await self.owner.load_catalogue(new, _hull(self._started().segments, mine))
        if adopt:
            await self.apply_table(new)
        return pb.PrepareReply(epoch=new.epoch, subs=self._started().counts())

    async def _trim(self) -> None:
        """After the hand-off grace, drop the parts of the sets the table no longer gives us."""
        while True:
            await asyncio.sleep(self.s.trim_check_s)
            if self._trim_at is None or time.monotonic() < self._trim_at:
                continue
            try:
                async with self._table_lock:
                    self._trim_at = None
                    table = self._table_now()
                    if self._started().segments != held(self.s.partition, table, self.s.id):
                        await self.owner.load_catalogue(table)
                        log.info("matcher %s dropped what it handed off: %s per dimension", self.s.id,
                                 self._started().counts())
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("trimming the sets failed; retrying")
                self._trim_at = time.monotonic() + self.s.trim_retry_s

    async def _watch_stored_table(self) -> None:
        """The store holds the latest table too (compare-and-set on each change): a matcher
        cut off from gossip but not from the store still learns it."""
        while True:
            await asyncio.sleep(self.s.table_refresh_s)
            try:
                raw = await self.store.get_table()
                if raw:
                    self.newest_epoch = max(self.newest_epoch, int(raw["epoch"]))
                if raw and int(raw["epoch"]) > self._table_now().epoch:
                    await self.apply_table(SegmentTable.from_json(raw))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reading the stored table failed")

    def load_summary(self) -> tuple[tuple[int, ...], float, float]:
        """Subscriptions per dimension and summed λ, μ: what gossip carries about us."""
        now = time.monotonic()
        rates = [st.rates(now) for st in self.stats]
        return tuple(self._started().counts()), sum(r[0] for r in rates), sum(r[1] for r in rates)

    # -- operations ------------------------------------------------------------------------
    async def forward(self, req: pb.ForwardRequest) -> pb.ForwardReply:
        """Match and store a Forward call's messages: NotReady while loading, BadRequest for a
        malformed part, NotOwner for a value outside our segments, Busy when an input queue is
        at its bound (nothing queued), StoreDown when the store failed the write."""
        cpu_at = time.process_time()  # μ's work begins here when the queue is empty (its decoding)
        if not self.ready:
            raise NotReady("matcher is loading its subscriptions")
        table, sets, queue = self._running()
        k = table.space.k
        try:
            parts = [Part.from_packed(p, k) for p in req.packed if p.count]
            parts += [Part.from_messages(dim, msgs, k) for dim, msgs in (
                (req.dimension, req.messages), *((p.dimension, p.messages) for p in req.parts)) if msgs]
        except WireError as exc:
            raise BadRequest(str(exc)) from None
        for p in parts:
            if not 0 <= p.dim < k:
                raise BadRequest(f"no dimension {p.dim}")
            if not sets.owns_all(p.dim, p.points[:, p.dim]):
                # Only the owner of the segment holding a value has every subscription that may match.
                raise NotOwner(f"not the owner of these values on dimension {p.dim} at epoch {table.epoch}")
        if not parts:
            return pb.ForwardReply()
        full = [p.dim for p in parts if queue.queued(p.dim) >= self.s.max_queued]
        if full:
            # Backpressure: refused whole, before anything is queued; the dispatcher tries the
            # message's next candidate and answers 503 when every one refuses.
            self.refused += 1
            raise Busy(f"input queue of dimension {full[0]} holds {queue.queued(full[0])} messages "
                       f"(bound {self.s.max_queued}); try another candidate")
        try:
            res = await queue.submit(parts, cpu_at)
        except redis.exceptions.RedisError as exc:
            raise StoreDown(f"store unavailable: {exc}") from None
        return pb.ForwardReply(matched=res.matched, delivered=res.delivered, fresh=res.fresh)

    async def match(self, req: pb.ForwardRequest) -> pb.MatchReply:
        """The subscription ids each message matches, without delivering (tests and tools)."""
        if not self.ready:
            raise NotReady("matcher is loading its subscriptions")
        dim = req.dimension
        table, sets, _ = self._running()
        points = np.array([list(m.point) for m in req.messages], dtype=np.float64).reshape(len(req.messages), -1)
        if not 0 <= dim < len(sets.sets) or points.shape[1] != len(sets.sets):
            raise BadRequest(f"no dimension {dim} or wrong point length")
        if not all(sets.owns(dim, v) for v in points[:, dim].tolist()):
            raise NotOwner(f"not the owner of these values on dimension {dim} at epoch {table.epoch}")
        groups = await self.run_index(sets.sets[dim].match_batch, points)
        return pb.MatchReply(messages=[
            pb.MatchReply.Matches(subscription_ids=sorted(i for ids in g.values() for i in ids)) for g in groups])

    async def add_subscriptions(self, req: pb.SubscriptionBatch) -> pb.SubscriptionAck:
        """File subscriptions a dispatcher sent directly (NotReady before the sets exist)."""
        sets = self._started()
        changed = await self.run_index(sets.add_direct_batch, list(req.subscriptions))
        return pb.SubscriptionAck(changed=changed, epoch=self._table_now().epoch)

    async def replace_subscriptions(self, req: pb.SubscriptionBatch) -> pb.SubscriptionAck:
        """Swap subscriptions for the new versions a dispatcher sent (`SetsOwner.replace_direct`;
        NotReady before the sets exist)."""
        self._started()
        changed = await self.owner.replace_direct(req.subscriptions)
        return pb.SubscriptionAck(changed=changed, epoch=self._table_now().epoch)

    async def remove_subscriptions(self, req: pb.RemoveRequest) -> pb.SubscriptionAck:
        """Drop subscriptions by id from every set (NotReady before the sets exist)."""
        sets = self._started()
        ids = list(req.ids)
        return pb.SubscriptionAck(changed=await self.run_index(lambda: sets.remove_many(ids)))

    def _started(self) -> SubscriptionSets:
        if self.sets is None:
            raise NotReady("matcher is starting")
        return self.sets

    def _table_now(self) -> SegmentTable:
        if self.table is None:
            raise NotReady("matcher has no table yet")
        return self.table

    def _running(self) -> tuple[SegmentTable, SubscriptionSets, MatcherQueue]:
        """The table, the sets and the queue, all three made by `start` before the matcher is ready."""
        if self.queue is None:
            raise NotReady("matcher is starting")
        return self._table_now(), self._started(), self.queue

    async def table_reply(self) -> pb.TableReply:
        """The table as this matcher holds it, with the members gossip knows."""
        return pb.TableReply(table_json=json.dumps(self._table_now().to_json()), members=self.membership.members())

    async def prepare_json(self, table_json: str, adopt: bool, sources: Sequence[pb.Source]) -> pb.PrepareReply:
        """`prepare` for a table sent as JSON by a coordinator."""
        self._started()
        return await self.prepare(SegmentTable.from_json(json.loads(table_json)), adopt=adopt, sources=sources)

    async def export(self, req: pb.ExportRequest) -> pb.ExportReply:
        """Our rows of one dimension that overlap a range, for a taker (NotOwner before we are ready)."""
        if not self.ready or not 0 <= req.dimension < self._table_now().space.k:
            raise NotOwner("not ready, or no such dimension")
        return await export(self.owner, req)

    async def propose_json(self, table_json: str, reason: str) -> pb.ProposeReply:
        """A table proposed by an operator (`bluedove seed --apply`), as JSON: BadRequest if it
        does not parse; otherwise membership decides."""
        try:
            table = SegmentTable.from_json(json.loads(table_json))
        except (ValueError, KeyError, TypeError) as exc:
            raise BadRequest(f"table_json: {exc}") from None
        return await self.membership.propose(table, reason or "a table proposed")

    async def leave_now(self) -> pb.LeaveReply:
        """`leave`, asked over gRPC: NotReady while starting."""
        if not self.ready:
            raise NotReady("matcher is starting")
        return await self.leave()

    async def leave(self) -> pb.LeaveReply:
        """Hand our segments off, serve through the grace period, then stop the process."""
        reply = await self.membership.leave()
        if reply.ok:
            loop = asyncio.get_running_loop()
            loop.call_later(self.s.handoff_grace_s, self.stopping.set)
            log.warning("matcher %s left at epoch %d; exiting in %.0f s", self.s.id, reply.epoch,
                        self.s.handoff_grace_s)
        return reply

    def report(self) -> pb.ReportReply:
        now = time.monotonic()
        dims = []
        counts = self.sets.counts() if self.sets else []
        queue = self.queue
        for i, st in enumerate(self.stats):
            assert queue is not None, "`start` makes the stats and the queue together"
            lam, mu = st.rates(now)
            seg = self.table.segments_of(self.s.id).get(i) if self.table else None
            split_at = queue.samples[i].load_median(*seg) if seg else float("nan")
            dims.append(pb.DimensionLoad(lam=lam, mu=mu, q=queue.queued(i), subs=counts[i],
                                         matched_total=st.total_processed, split_at=split_at,
                                         walk_cpu_s=queue.totals.walk_cpu_s[i],
                                         service_mu=queue.service[i].rates(now)[1]))
        # the process's CPU against its cgroup's limit (a pod's), zeros where none is known
        cpu = queue.cpu.read(now) if queue is not None else NONE_KNOWN
        return pb.ReportReply(id=self.s.id, generation=self.generation, ready=self.ready,
                              epoch=self.table.epoch if self.table else 0, dims=dims,
                              window_s=self.s.stats_window_s, cpu_limit_cores=cpu.cores, cpu_limit_used=cpu.used,
                              cpu_throttled=cpu.throttled, gossip_bytes_sent=self.membership.transport.bytes_sent,
                              gossip_messages_sent=self.membership.transport.sent)


def _hull(a: dict[int, tuple[float, float]], b: dict[int, tuple[float, float]]) -> dict[int, tuple[float, float]]:
    """Per dimension, the smallest range holding both `a`'s and `b`'s."""
    return {i: (min(r[0] for r in rs), max(r[1] for r in rs))
            for i in set(a) | set(b) for rs in [[x[i] for x in (a, b) if i in x]]}


def _within(inner: dict[int, tuple[float, float]], outer: dict[int, tuple[float, float]]) -> bool:
    """Every range of `inner` lies inside `outer`'s range of the same dimension."""
    return all(i in outer and outer[i][0] <= lo and hi <= outer[i][1] for i, (lo, hi) in inner.items())
