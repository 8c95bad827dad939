"""What a matcher holds for one space: its segment table, a subscription set per dimension (and
the catalogue tail they follow), the input queue and the load windows; the table's changes
(adopt, hand-off, trim, the stored table's watch) and the operations on the sets (forward,
match, add, replace, remove, export). The process around it (gRPC, gossip, the index thread,
the start-up) is bluedove/matcher/matcher.py's `Matcher`, which holds one per space it serves
(docs/design.md, "Spaces (in progress)")."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import numpy as np
import redis.exceptions

from bluedove.core.load import LoadReport
from bluedove.core.partition.modes import held
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.wire import Part, WireError
from bluedove.matcher.errors import BadRequest, Busy, NotOwner, NotReady, StoreDown
from bluedove.matcher.handoff import export, load_from_owners
from bluedove.matcher.index_thread import IndexThread
from bluedove.matcher.load import WindowStats
from bluedove.matcher.queues import MatcherQueue
from bluedove.matcher.sets import SubscriptionSets
from bluedove.matcher.sets_owner import RunIndex, SetsOwner
from bluedove.runtime.settings import MatcherSettings
from bluedove.store.store import MatcherStore
from bluedove.v1 import matcher_pb2 as pb

log = logging.getLogger("bluedove.matcher")


class SpaceState:
    """One space's table, sets, queue and load windows in one matcher."""

    def __init__(self, name: str, settings: MatcherSettings, store: MatcherStore, index: IndexThread,
                 deliver: str, offer: Callable[[SegmentTable], None]) -> None:
        self.name = name
        self.s = settings
        self.store = store
        self.index = index
        self.run_index: RunIndex = index.run  # every index job: the sets' owner's, and this space's calls
        self.offer = offer  # a newer table adopted: tell the gossip
        self.table: SegmentTable | None = None
        self.newest_epoch = 0  # the newest table epoch seen, in the store or through gossip
        # The sets, the catalogue log position they are current to, and every reload of them.
        self.owner = SetsOwner(settings, store, self.run_index, name)
        self.queue: MatcherQueue | None = None
        self.stats: list[WindowStats] = []
        self.ready = False
        self.refused = 0  # Forward calls refused for backpressure (the metrics)
        self.deliver_mode = deliver
        # Table changes (gossip, store, hand-off) one at a time.
        self._table_lock = asyncio.Lock()
        self._trim_at: float | None = None
        self._trim_due = asyncio.Event()  # set with `_trim_at`: the trim task sleeps until then

    @property
    def sets(self) -> SubscriptionSets | None:
        return self.owner.sets

    def begin(self, table: SegmentTable) -> MatcherQueue:
        """Take the boot table: empty load windows and sets, and the input queue started."""
        self.table = table
        self.newest_epoch = table.epoch
        k = table.space.k
        self.stats = [WindowStats(self.s.stats_window_s) for _ in range(k)]
        self.owner.begin(table)
        self.queue = queue = MatcherQueue(k, lambda i: self.started().sets[i], self.store, self.index,
                                          self.stats, self.s.batch_max, self.deliver_mode,
                                          ttls=(self.s.dedup_window_s, self.s.retry_dedup_s))
        queue.start()
        return queue

    async def load(self) -> None:
        """Load the sets from the catalogue (the start-up's long step), then serve."""
        async with self._table_lock:
            await self.owner.load_catalogue(self.table_now())
        self.ready = True

    def tasks(self, shared: bool = False) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        """What runs beside the serving: the catalogue tail and the stored table's watch (unless
        `shared`: a named space's are the ones bluedove/matcher/spaces_served.py runs for all
        of them), and the trim."""
        return [self._trim] if shared else [self.owner.follow, self._watch_stored_table, self._trim]

    def close(self) -> None:
        """Let go of the sets, queue and load windows (a dropped space's state, its tasks and
        queue stopped), breaking the reference cycles among them: the matcher keeps long-lived
        objects frozen out of the collector's reach (`gc.freeze`), so a state left in a cycle
        would never be freed. A call still holding the state finds it not ready."""
        queue, owner = self.queue, self.owner
        self.ready, self.table, self.queue, self.stats = False, None, None, []
        self.owner = SetsOwner(self.s, self.store, self.run_index, self.name)
        for o in (queue, owner):
            if o is not None:
                vars(o).clear()

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
            segments = self.started().segments
            if not _within(mine, segments):
                await self.owner.load_catalogue(new)
            elif mine != segments:
                self._trim_later(self.s.handoff_grace_s)
            self.table = new
            self.newest_epoch = max(self.newest_epoch, new.epoch)
            self.offer(new)
            log.info("matcher %s at epoch %d: segments %s", self.s.id, new.epoch, mine or "none (idle)")

    async def prepare(self, new: SegmentTable, adopt: bool = False,
                      sources: Sequence[pb.Source] = ()) -> pb.PrepareReply:
        """Hand-off: load what `new` assigns to us before it is published (from the old owners
        given as `sources`, else from the catalogue); with `adopt`, also take it as our table
        (after it is published)."""
        async with self._table_lock:
            mine = held(self.s.partition, new, self.s.id)
            if not _within(mine, self.started().segments):
                loaded = False
                if sources:
                    try:
                        await load_from_owners(self.owner, new, sources, self.s.export_timeout_s, self.s,
                                               self.name)
                        loaded = True
                    except Exception as exc:  # noqa: BLE001 - an old owner failed: the catalogue has it all
                        log.warning("hand-off from the old owners failed (%r); loading from the catalogue", exc)
                if not loaded:
                    # Keep what we hold too until the table is adopted and the grace is over: a
                    # re-seed may move our range away while messages of the old one are queued.
                    await self.owner.load_catalogue(new, _hull(self.started().segments, mine))
        if adopt:
            await self.apply_table(new)
        return pb.PrepareReply(epoch=new.epoch, subs=self.started().counts())

    def _trim_later(self, after_s: float) -> None:
        self._trim_at = time.monotonic() + after_s
        self._trim_due.set()

    async def _trim(self) -> None:
        """After the hand-off grace, drop the parts of the sets the table no longer gives us
        (asleep until a table change asks for it: a matcher runs one per space it serves)."""
        while True:
            await self._trim_due.wait()
            self._trim_due.clear()
            while self._trim_at is not None and time.monotonic() < self._trim_at:
                await asyncio.sleep(max(self._trim_at - time.monotonic(), self.s.trim_check_s))
            if self._trim_at is None:
                continue
            try:
                async with self._table_lock:
                    self._trim_at = None
                    table = self.table_now()
                    if self.started().segments != held(self.s.partition, table, self.s.id):
                        await self.owner.trim(table)
                        log.info("matcher %s dropped what it handed off: %s per dimension", self.s.id,
                                 self.started().counts())
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("trimming the sets failed; retrying")
                self._trim_later(self.s.trim_retry_s)

    async def _watch_stored_table(self) -> None:
        """The store holds the latest table too (compare-and-set on each change): a matcher
        cut off from gossip but not from the store still learns it."""
        while True:
            await asyncio.sleep(self.s.table_refresh_s)
            try:
                await self.stored_table(await self.store.get_table(self.name))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reading the stored table failed")

    async def stored_table(self, raw: dict[str, Any] | None) -> None:
        """The table the store holds (as read): adopted if newer than ours."""
        if raw:
            self.newest_epoch = max(self.newest_epoch, int(raw["epoch"]))
        if raw and int(raw["epoch"]) > self.table_now().epoch:
            await self.apply_table(SegmentTable.from_json(raw))

    def load_summary(self) -> tuple[tuple[int, ...], float, float]:
        """Subscriptions per dimension and summed λ, μ: what gossip carries about us."""
        now = time.monotonic()
        rates = [st.rates(now) for st in self.stats]
        return tuple(self.started().counts()), sum(r[0] for r in rates), sum(r[1] for r in rates)

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
        """File subscriptions a dispatcher sent directly (NotReady before the sets exist). Those
        that replay the space's log get their live deliveries written with replay marks for a
        while, and the answer waits until every batch matched before they were filed is stored
        (and so in the log): the replay's end, read after this answer, then covers every message
        they were not matched against live (bluedove/dispatcher/replay.py)."""
        sets = self.started()
        replaying = [s.id for s in req.subscriptions if s.replay_from_ms]
        queue = self.queue
        if replaying and queue is not None:  # before filing: no delivery to them goes unmarked
            queue.open_seam(replaying, time.monotonic())
        changed = await self.run_index(sets.add_direct_batch, list(req.subscriptions),
                                       req.boxes if req.HasField("boxes") else None)
        if replaying and queue is not None:
            await queue.barrier()
        return pb.SubscriptionAck(changed=changed, epoch=self.table_now().epoch, columns=True)

    async def replace_subscriptions(self, req: pb.SubscriptionBatch) -> pb.SubscriptionAck:
        """Swap subscriptions for the new versions a dispatcher sent (`SetsOwner.replace_direct`;
        NotReady before the sets exist)."""
        self.started()
        changed = await self.owner.replace_direct(req.subscriptions)
        return pb.SubscriptionAck(changed=changed, epoch=self.table_now().epoch)

    async def remove_subscriptions(self, req: pb.RemoveRequest) -> pb.SubscriptionAck:
        """Drop subscriptions by id from every set (NotReady before the sets exist)."""
        sets = self.started()
        ids = list(req.ids)
        return pb.SubscriptionAck(changed=await self.run_index(lambda: sets.remove_many(ids)))

    async def export(self, req: pb.ExportRequest) -> pb.ExportReply:
        """Our rows of one dimension that overlap a range, for a taker (NotOwner before we are ready)."""
        if not self.ready or not 0 <= req.dimension < self.table_now().space.k:
            raise NotOwner("not ready, or no such dimension")
        return await export(self.owner, req)

    def dims_report(self, now: float) -> list[pb.DimensionLoad]:
        """Each dimension's load, as `Report` answers it."""
        dims = []
        counts = self.sets.counts() if self.sets else []
        queue = self.queue
        for i, st in enumerate(self.stats):
            assert queue is not None, "`begin` makes the stats and the queue together"
            lam, mu = st.rates(now)
            seg = self.table.segments_of(self.s.id).get(i) if self.table else None
            split_at = queue.samples[i].load_median(*seg) if seg else float("nan")
            dims.append(pb.DimensionLoad(lam=lam, mu=mu, q=queue.queued(i), subs=counts[i],
                                         matched_total=st.total_processed, split_at=split_at,
                                         walk_cpu_s=queue.totals.walk_cpu_s[i],
                                         service_mu=queue.service[i].rates(now)[1]))
        return dims

    def busy(self, now: float) -> tuple[float, int]:
        """(Σ λ/μ over the space's dimensions, μ of the whole work on them; its messages queued)."""
        queue = self.queue
        if queue is None:
            return 0.0, 0
        busy, queued = 0.0, 0
        for i, st in enumerate(self.stats):
            lam, mu = st.rates(now)
            load = LoadReport(lam=lam, mu=queue.service[i].rates(now)[1] or mu, q=queue.queued(i))
            busy += load.busy
            queued += load.q
        return busy, queued

    def started(self) -> SubscriptionSets:
        if self.sets is None:
            raise NotReady("matcher is starting")
        return self.sets

    def table_now(self) -> SegmentTable:
        if self.table is None:
            raise NotReady("matcher has no table yet")
        return self.table

    def _running(self) -> tuple[SegmentTable, SubscriptionSets, MatcherQueue]:
        """The table, the sets and the queue, all three made by `begin` before the space is ready."""
        if self.queue is None:
            raise NotReady("matcher is starting")
        return self.table_now(), self.started(), self.queue


def _hull(a: dict[int, tuple[float, float]], b: dict[int, tuple[float, float]]) -> dict[int, tuple[float, float]]:
    """Per dimension, the smallest range holding both `a`'s and `b`'s."""
    return {i: (min(r[0] for r in rs), max(r[1] for r in rs))
            for i in set(a) | set(b) for rs in [[x[i] for x in (a, b) if i in x]]}


def _within(inner: dict[int, tuple[float, float]], outer: dict[int, tuple[float, float]]) -> bool:
    """Every range of `inner` lies inside `outer`'s range of the same dimension."""
    return all(i in outer and outer[i][0] <= lo and hi <= outer[i][1] for i, (lo, hi) in inner.items())
