"""The dispatcher's view of the cluster: the segment table, matcher stubs, load reports, health.

Nothing here is durable: all of it is learnt again after a restart. The dispatcher is a gossip member of its
own (role "dispatcher", `bluedove/dispatcher/gossip_member.py`): the table and the membership come
from its node, a newer table adopted as soon as the node learns it (within a round of the
change), the membership every round. Load reports are pulled from each matcher every
`load_interval_s`. The store is read for the table at boot, and every `store_fallback_s`
while no matcher is usable (all down, or none known yet). A matcher's answer showing a newer
epoch (a subscription's ack) makes it ask that matcher for its table at once. Only a newer
epoch replaces the table. A matcher that gossip calls suspect or dead, or whose call failed
(for `down_backoff_s`, doubling while it keeps failing, until a call to it succeeds), is
passed over as first choice. Under `adaptive`, the work this dispatcher sent each matcher
since its last report is a `Charges` (bluedove/dispatcher/charges.py): ranking charges it,
a report resets it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import dataclass

import grpc
import numpy as np
import numpy.typing as npt

from bluedove.core.errors import unavailable
from bluedove.core.forwarding import BATCH_POLICIES, Ranking, matcher_loads, rank, rank_batch
from bluedove.core.load import LoadReport, cost
from bluedove.core.partition import modes
from bluedove.core.partition.segments import SegmentTable
from bluedove.dispatcher.charges import Charges
from bluedove.dispatcher.gossip_member import GossipMember
from bluedove.dispatcher.placing import Placing
from bluedove.gossip.messages import DISPATCHER, MATCHER, STATUS_NAMES
from bluedove.runtime import tls
from bluedove.runtime.settings import DispatcherSettings
from bluedove.store.store import DispatcherStore
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

log = logging.getLogger("bluedove.dispatcher")


@dataclass
class MemberHealth:
    """What this dispatcher learned of one matcher from its calls to it and its load reports."""

    down_until: float = 0.0
    failures: int = 0
    ready: bool = False
    reachable: bool = False
    generation: int = 0
    report_at: float = 0.0


@dataclass(frozen=True)
class MemberEntry:
    """A member as this dispatcher's gossip node sees it."""

    id: str
    address: str
    status: str  # alive, suspect, dead, left
    generation: int
    subs: tuple[int, ...]
    role: str = MATCHER


class ClusterView(Placing):
    """The dispatcher's view of the cluster: segment table, gossip members, load reports, health."""

    def __init__(self, settings: DispatcherSettings, store: DispatcherStore, seeds: tuple[str, ...] = ()) -> None:
        self.s = settings
        self.store = store
        self.table: SegmentTable | None = None
        self.reports: dict[tuple[str, int], LoadReport] = {}
        # member -> its CPU limit from its last report: (cores, share used, share of periods throttled)
        self.cpu_limits: dict[str, tuple[float, float, float]] = {}
        # work (matcher seconds) this dispatcher sent each matcher since its last report (adaptive)
        self.charges = Charges(settings.policy == "adaptive")
        self.health: dict[str, MemberHealth] = {}
        self.gossip: dict[str, MemberEntry] = {}  # matchers
        self.dispatchers: dict[str, MemberEntry] = {}  # dispatchers, this one included
        self.member = GossipMember(settings, seeds)
        self.member.on_change.append(self._from_gossip)
        # The table before the last change, until its hand-off grace ends.
        self.previous: tuple[SegmentTable, float] | None = None
        self.adopted_at: float | None = None  # Unix time the current table was adopted
        self.gossip_sent: dict[str, tuple[int, int]] = {}  # member -> (bytes, envelopes) since its start
        self._channels: dict[str, tuple[str, grpc.aio.Channel, pb_grpc.MatcherStub]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.rng = random.Random()
        self.np_rng = np.random.default_rng()

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        raw = await self.store.get_table()
        if raw:
            self._set_table(SegmentTable.from_json(raw))
        await self.member.start(self.table)
        if self.table is not None:
            await self.refresh_loads()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._store_fallback_loop()), loop.create_task(self._load_loop())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await self.member.stop()
        for _, ch, _ in self._channels.values():
            await ch.close(None)  # no grace (grpc-stubs has no default for it)

    def address(self, member: str) -> str | None:
        if self.table is not None and member in self.table.members:
            return self.table.members[member]
        g = self.gossip.get(member)
        return g.address if g else None

    def known(self) -> list[str]:
        """Table owners, then members only gossip knows of (idle, joining, or gone)."""
        owners = list(self.table.members) if self.table else []
        return owners + sorted(m for m in self.gossip if m not in owners)

    def stub(self, member: str) -> pb_grpc.MatcherStub:
        address = self.address(member)
        if address is None:
            raise LookupError(f"no address known for matcher {member!r}")
        cached = self._channels.get(member)
        if cached is None or cached[0] != address:
            ch = tls.aio_channel(address, self.s, options=[
                ("grpc.max_send_message_length", 64 * 1024 * 1024),
                ("grpc.max_receive_message_length", 64 * 1024 * 1024),
                # Reconnect quickly after a matcher restarts.
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
            ])
            cached = (address, ch, pb_grpc.MatcherStub(ch))
            self._channels[member] = cached
        return cached[2]

    def _set_table(self, table: SegmentTable) -> None:
        if self.table is None or table.epoch > self.table.epoch:
            if self.table is not None:
                self.previous = (self.table, time.monotonic() + self.s.handoff_grace_s)
            self.table = table
            self.adopted_at = time.time()
            for m in table.members:
                self.health.setdefault(m, MemberHealth())
            if self.member.node is not None:
                self.member.offer(table)
                self.member.reseed(table)

    def _from_gossip(self) -> None:
        """After an envelope or a round of our gossip node: a newer table it carries replaces
        ours; the members are taken as it sees them (matchers and dispatchers apart)."""
        node = self.member.node
        assert node is not None  # called by the node's agent, so after the node started
        if node.table_json and (self.table is None or node.epoch > self.table.epoch):
            self._set_table(SegmentTable.from_json(json.loads(node.table_json)))
        matchers, dispatchers = {}, {}
        for e in node.members.values():
            g = MemberEntry(e.id, e.addr, STATUS_NAMES[e.status], e.generation, e.subs, e.role)
            if e.role == DISPATCHER:
                dispatchers[e.id] = g
            else:
                matchers[e.id] = g
                self.health.setdefault(e.id, MemberHealth())
        self.gossip, self.dispatchers = matchers, dispatchers

    # -- health ----------------------------------------------------------------------------
    def mark_down(self, member: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        h = self.health.setdefault(member, MemberHealth())
        h.failures += 1
        h.down_until = now + self.s.down_backoff_s * min(2 ** (h.failures - 1), 8)

    def mark_up(self, member: str) -> None:
        h = self.health.get(member)
        if h and h.failures:
            h.failures = 0
            h.down_until = 0.0

    def gone(self, member: str) -> bool:
        """Gossip holds the member dead or left: nothing is forwarded to it any more (a process
        of it started again is a new generation, which loads the catalogue)."""
        g = self.gossip.get(member)
        return g is not None and g.status in ("dead", "left")

    def usable(self, member: str, now: float) -> bool:
        h = self.health.get(member)
        g = self.gossip.get(member)
        # An owner with no address yet (`bluedove init --matchers N`) is not usable until it registers one.
        return h is not None and h.ready and now >= h.down_until and (g is None or g.status == "alive") \
            and bool(self.address(member))

    def status(self, member: str, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        g = self.gossip.get(member)
        if g is not None and g.status != "alive":
            return {"left": "leaving"}.get(g.status, g.status)
        h = self.health.get(member)
        if h is None or not h.reachable:
            return "dead" if h and h.report_at else "joining"
        if not h.ready:
            return "joining"
        return "suspect" if now < h.down_until else "alive"

    def current(self) -> SegmentTable:
        """The table, for placement and ranking: their callers answer 503 themselves before the first."""
        if self.table is None:
            raise unavailable("no segment table yet: the cluster is starting")
        return self.table

    def kept(self, member: str) -> bool:
        """A member of the previous table gets subscriptions while its address is known."""
        return self.address(member) is not None

    def busy(self) -> dict[str, float]:
        """Each reporting matcher's busy share: its CPU against its limit where it has one (all
        its spaces' work), else Σλ/μ of the default space's dimensions."""
        out: dict[str, float] = {}
        for (m, _), r in self.reports.items():
            out[m] = out.get(m, 0.0) + r.lam * cost(r)
        for m, (cores, used, _) in self.cpu_limits.items():
            if cores > 0:
                out[m] = used
        return out

    # -- forwarding decisions --------------------------------------------------------------
    def ranked_candidates(self, point: tuple[float, ...] | list[float], now: float) -> list[tuple[int, str]]:
        """Candidates best first: usable ones by the policy, then the rest as a last resort.
        (Full replication: every member, each along its one set, dimension 0.)"""
        table = self.current()
        cands = modes.candidates(self.s.partition, table, point)
        good = [c for c in cands if self.usable(c[1], now)]
        # candidates are (dimension, member); reports are kept by (member, dimension)
        report = lambda c: self.reports.get((c[1], c[0]), LoadReport())  # noqa: E731
        dims = range(table.space.k)
        # every dimension's report of a matcher: its one index thread serves them all
        siblings = lambda m: [self.reports[(m, i)] for i in dims if (m, i) in self.reports]  # noqa: E731
        order = rank(self.s.policy, good, report, now, self.rng, siblings, self.charges.by_member())
        seen = {m for _, m in order}
        rest = rank(self.s.policy, [c for c in cands if c[1] not in seen], report, now, self.rng, siblings)
        if order:
            self.charge(order[0])
        return order + rest

    def rank_batch(self, points: npt.NDArray[np.float64], now: float) -> Ranking:
        """`ranked_candidates` of every row of `points`, ranked in one compiled loop
        (bluedove/core/forwarding.py `rank_batch`) and charged as they are ranked; `random` message by
        message."""
        if self.s.policy not in BATCH_POLICIES:
            return Ranking.from_lists([self.ranked_candidates(p, now) for p in points.tolist()])
        table = self.current()
        members, cand_m, cand_d = modes.candidates_batch(self.s.partition, table, points)
        usable = np.array([self.usable(m, now) for m in members], dtype=np.bool_)
        sent = self.charges.array(members)
        draws = self.np_rng.random((len(points), 2 * cand_m.shape[1]))
        loads = matcher_loads(members, table.space.k, self.reports)
        order, count = rank_batch(self.s.policy, cand_m, cand_d, usable, loads, sent, now, draws)
        self.charges.take_back(members, sent)
        return Ranking(members, cand_m, cand_d, order, count)

    def charge(self, candidate: tuple[int, str]) -> None:
        """Count a message sent to `candidate` (dimension, member) in the adaptive estimate, so
        that the next message sees it in the matcher's backlog (`bluedove.core.load.backlog`)."""
        dim, member = candidate
        self.charges.charge(member, cost(self.reports.get((member, dim), LoadReport())))

    # -- table from elsewhere than gossip ---------------------------------------------------
    async def pull_table(self, member: str) -> None:
        """Ask `member` (whose answer showed a newer epoch than ours) for its table."""
        try:
            reply = await self.stub(member).GetTable(pb.TableRequest(), timeout=2.0)
        except grpc.aio.AioRpcError:
            return  # keep the last good table; gossip brings the new one within a round
        self._set_table(SegmentTable.from_json(json.loads(reply.table_json)))

    async def read_store_if_cut_off(self) -> None:
        """The stored table, when no matcher is usable: at boot before the first load report,
        when every matcher is down, or when we are cut off from all of them."""
        now = time.monotonic()
        if any(self.usable(m, now) for m in self.known()):
            return
        raw = await self.store.get_table()
        if raw:
            self._set_table(SegmentTable.from_json(raw))

    async def refresh_loads(self) -> None:
        if self.table is None:
            return
        members = [m for m in self.known() if (m in self.table.members or self.gossip[m].status != "dead")
                   and self.address(m)]  # no address yet: nothing to ask
        replies = await asyncio.gather(
            *(self.stub(m).Report(pb.ReportRequest(), timeout=max(self.s.load_interval_s, 0.5)) for m in members),
            return_exceptions=True,
        )
        now = time.monotonic()
        for m, r in zip(members, replies):
            h = self.health.setdefault(m, MemberHealth())
            if isinstance(r, BaseException):
                h.reachable, h.ready = False, False
                for key in [k for k in self.reports if k[0] == m]:
                    del self.reports[key]  # no stale load for a member we cannot reach
                self.cpu_limits.pop(m, None)
                self.charges.reset(m)
                continue
            h.reachable, h.ready, h.report_at = True, r.ready, now
            if r.generation != h.generation:  # restarted: forget its failures
                h.generation, h.failures, h.down_until = r.generation, 0, 0.0
            for i, d in enumerate(r.dims):
                self.reports[(m, i)] = LoadReport(d.lam, d.mu, d.q, d.subs, now, d.matched_total)
            self.charges.reset(m)  # what was sent before the report is in its queues or done
            self.gossip_sent[m] = (r.gossip_bytes_sent, r.gossip_messages_sent)
            self.cpu_limits[m] = (r.cpu_limit_cores, r.cpu_limit_used, r.cpu_throttled)

    async def _store_fallback_loop(self) -> None:
        while True:
            await asyncio.sleep(self.s.store_fallback_s)
            try:
                await self.read_store_if_cut_off()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("store table read failed")

    async def _load_loop(self) -> None:
        while True:
            await asyncio.sleep(self.s.load_interval_s)
            try:
                await self.refresh_loads()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("load refresh failed")
