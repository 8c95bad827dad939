"""The matcher's part in gossip: its node, the table it adopts, and takeover of dead members.

Which change to make, and when, is decided in `bluedove/matcher/decisions.py` (pure); this module
executes it. Every table change has the same hand-off (the BlueDove paper §III-C,
docs/design.md): the members whose range grows load the added subscriptions first
(`Prepare`), then the new epoch is stored (compare-and-set: one change per epoch wins,
whoever proposes it), every owner adopts it, and gossip spreads it to the rest and,
through matchers, to dispatchers. The changes:
- takeover: an owner declared dead is merged into adjacent live owners (`merge_out`), done
  by the lowest-id live owner;
- join: an alive member that owns nothing takes the busiest part of every dimension
  (`bluedove.core.partition.segments.plan_split`, `split`), done by the same coordinator (mPartition only:
  the baseline partitions of the BlueDove paper §IV-B keep their members);
- leave: a matcher told to go merges itself out the same way, done by itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Coroutine, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

import grpc

from bluedove.core.load import LoadReport
from bluedove.core.partition.seeds import Seed, parse_seed
from bluedove.core.partition.segments import SegmentTable, gained, grown, merge_out, plan_split, split
from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.gossip.agent import GossipAgent
from bluedove.gossip.config import GossipConfig
from bluedove.gossip.grpc_transport import GossipServicer, GrpcTransport
from bluedove.gossip.messages import ALIVE, DEAD, LEFT, STATUS_NAMES, Envelope
from bluedove.gossip.peers import DnsSeeds
from bluedove.gossip.state import Node
from bluedove.matcher.decisions import (
    Adopt,
    Join,
    Refuse,
    Stuck,
    Takeover,
    leave_change,
    next_change,
    note_left,
    proposal_refused,
)
from bluedove.matcher.space_state import SpaceState
from bluedove.runtime import tls
from bluedove.runtime.settings import MatcherSettings
from bluedove.store.store import MatcherStore
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

log = logging.getLogger("bluedove.matcher")


class Host(Protocol):
    """What membership needs of the matcher it is part of (`bluedove.matcher.matcher.Matcher`)."""

    s: MatcherSettings
    store: MatcherStore
    generation: int
    table: SegmentTable | None
    ready: bool

    def load_summary(self) -> tuple[tuple[int, ...], float, float]: ...

    def report(self, state: SpaceState | None = None) -> pb.ReportReply: ...

    async def state(self, space: str) -> SpaceState: ...

    async def apply_table(self, new: SegmentTable) -> None: ...

    async def prepare(self, new: SegmentTable, adopt: bool = False,
                      sources: Sequence[pb.Source] = ()) -> pb.PrepareReply: ...


class Membership:
    """The matcher's gossip member: its node, agent and seeds, and the table changes it executes."""

    def __init__(self, m: Host, config: GossipConfig, seeds: tuple[str, ...] = (), peers_dns: str = "",
                 dns_retry_s: float = 1.0) -> None:
        self.m = m
        self.config = config
        self.extra_seeds = seeds
        self.peers_dns = peers_dns  # NAME[:PORT] whose addresses are seeds too (bluedove/gossip/peers.py)
        self.dns_retry_s = dns_retry_s
        self.seeds: DnsSeeds | None = None
        self._dns_task: asyncio.Task[None] | None = None
        self.node: Node | None = None
        self.transport = GrpcTransport(timeout_s=config.probe_timeout_s, tls_files=m.s)
        self.agent: GossipAgent | None = None
        self._busy = False  # a table change or takeover is under way
        self.leaving = False
        self._left_seen: dict[str, float] = {}
        self._refused: set[str] = set()  # idle members not joined (baseline partition), logged once
        self._retry_at = 0.0
        self._peers: dict[str, tuple[grpc.aio.Channel, pb_grpc.MatcherStub]] = {}
        self.gossip_servicer = GossipServicer(self._receive)

    def servicer(self) -> GossipServicer:
        return self.gossip_servicer

    def _receive(self, env: Envelope) -> None:
        if self.agent is not None:  # envelopes before `start` are dropped
            self.agent.receive(env)

    def _node(self) -> Node:
        assert self.node is not None, "table changes and rounds come after `start` made the node"
        return self.node

    def _table(self) -> SegmentTable:
        assert self.m.table is not None, "table changes come after the matcher has its table"
        return self.m.table

    def start(self, addr: str, table: SegmentTable) -> None:
        # Seeds: the table's members (an owner without an address yet is expected by id
        # alone), --join's, and, while no peer is known, what --peers-dns resolves to.
        self.node = Node(self.m.s.id, addr, self.m.generation, self.config)
        self.seeds = DnsSeeds(self.node, self.peers_dns, [*table.members.values(), *self.extra_seeds],
                              self.dns_retry_s)
        self.node.expect({i: a for i, a in table.members.items() if i != self.m.s.id}, time.monotonic())
        self.node.offer_table(table.epoch, json.dumps(table.to_json()))
        self.agent = GossipAgent(self.node, self.transport)
        self.agent.on_round.append(self._after_round)
        self.agent.start()
        if self.peers_dns:
            self._dns_task = asyncio.get_running_loop().create_task(self.seeds.run())

    def epoch(self) -> int:
        """The newest table epoch gossip carries (0 before gossip starts)."""
        return self.node.epoch if self.node is not None else 0

    async def stop(self) -> None:
        if self._dns_task:
            self._dns_task.cancel()
        if self.agent:
            await self.agent.stop()
        await self.transport.close()
        for ch, _ in self._peers.values():
            await ch.close(grace=None)

    # -- views -----------------------------------------------------------------------------
    def members(self) -> list[pb.MemberInfo]:
        if self.node is None:
            return []
        return [pb.MemberInfo(id=e.id, address=e.addr, status=STATUS_NAMES[e.status], generation=e.generation,
                              subs=list(e.subs), role=e.role) for e in self.node.members.values()]

    def offer(self, table: SegmentTable) -> None:
        if self.node is not None:
            self.node.offer_table(table.epoch, json.dumps(table.to_json()))

    def offer_space(self, space: str, epoch: int) -> None:
        """A named space's table adopted at `epoch`: the next pushes carry it, if news."""
        if self.node is not None:
            self.node.spaces.offer(space, epoch, time.monotonic())

    # -- after every round -----------------------------------------------------------------
    def _after_round(self) -> None:
        m, node = self.m, self._node()
        node.set_load(*m.load_summary())
        if m.table is None or self.leaving:  # leave() makes a leaving member's changes
            return
        now = time.monotonic()
        self._left_seen = note_left(self._left_seen, m.table, node.members, now)
        change = next_change(m.table, node.members, m.s.id, now, ready=m.ready, busy=self._busy,
                             gossip_epoch=node.epoch, partition=m.s.partition, retry_at=self._retry_at,
                             left_since=self._left_seen, left_timeout_s=m.s.left_owner_timeout_s)
        if isinstance(change, Adopt):
            self._spawn(self.m.apply_table(SegmentTable.from_json(json.loads(node.table_json))))
        elif isinstance(change, Takeover):
            self._spawn(self._takeover(set(change.gone)))
        elif isinstance(change, Join):
            self._spawn(self._join(change.member))
        elif isinstance(change, Refuse) and change.member not in self._refused:
            self._refused.add(change.member)
            log.warning("%s is idle and stays so: no joins under partition %s", change.member, change.partition)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        self._busy = True
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._busy = False
        if not task.cancelled() and task.exception() is not None:
            log.error("table change failed: %r", task.exception())
            self._retry_at = time.monotonic() + self.m.s.change_retry_s

    # -- table changes: takeover, join (split), leave (merge) --------------------------------
    async def _takeover(self, gone: set[str]) -> None:
        old = self._table()
        new = merge_out(old, gone, self.weight)
        await self.publish(old, new, "takeover",
                            f"{', '.join(sorted(gone))} declared dead; segments merged into "
                            f"{', '.join(sorted(grown(old, new)))}")

    async def _join(self, member: str) -> None:
        old = self._table()
        loads = await self.loads(old)
        at, why = plan_split(old, loads, await self.stored_seed(old))
        new = split(old, member, self._node().members[member].addr, at)
        await self.publish(old, new, "split", f"{member} joined and takes part of the busiest segments: {why}")

    async def stored_seed(self, table: SegmentTable, space: str = DEFAULT_SPACE) -> Seed | None:
        """The seed `space`'s table was last laid out by, for where a split cuts; None if there
        is none or it does not fit the space (then the split does without)."""
        try:
            raw = await self.m.store.get_seed(space)
            return parse_seed(raw, table.space, None) if raw is not None else None
        except ValueError as exc:  # a SeedError, or a stored value that is not JSON
            log.warning("the stored seed is not used for the split: %s", exc)
            return None

    async def leave(self) -> pb.LeaveReply:
        """Hand every segment of ours to an adjacent owner, then stop taking part.

        Retries while another table change gets in first; gives up (and says so) when no
        other owner is alive or the time runs out."""
        m = self.m
        self.leaving = True
        # Status "left" first: nobody probes us, takes us over, or splits us back in as idle.
        self.announce_leave()
        timeout_s = m.s.leave_timeout_s
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            while self._busy:
                await asyncio.sleep(0.05)
            old = self._table()
            change = leave_change(old, self._node().members, m.s.id)
            if change is None:  # we own nothing any more
                break
            if isinstance(change, Stuck):
                return pb.LeaveReply(ok=False, reason=change.reason, epoch=old.epoch)
            new = merge_out(old, set(change.gone), self.weight)
            self._busy = True
            try:
                if await self.publish(old, new, "merge",
                                       f"{m.s.id} leaves; segments merged into {', '.join(sorted(grown(old, new)))}"):
                    break
                # Another change got in first. A leaving member's rounds adopt nothing, so take
                # the stored table now and plan the next merge on it, not on the one that lost.
                raw = await m.store.get_table()
                if raw:
                    await m.apply_table(SegmentTable.from_json(raw))
            except Exception as exc:  # noqa: BLE001 - a taker failed; try again with a fresh table
                log.warning("leave hand-off failed (%r); retrying", exc)
                await asyncio.sleep(m.s.leave_retry_s)
            finally:
                self._busy = False
        else:
            return pb.LeaveReply(ok=False, reason=f"hand-off not done in {timeout_s:.0f} s", epoch=self._table().epoch)
        return pb.LeaveReply(ok=True, epoch=self._table().epoch)

    async def propose(self, new: SegmentTable, reason: str) -> pb.ProposeReply:
        """A re-seed: publish `new` (the next epoch of our table, same members and addresses,
        another layout) with the hand-off of every change, unless something else is under way."""
        m, old = self.m, self.m.table

        def refuse(why: str) -> pb.ProposeReply:
            log.warning("proposed table (epoch %d) refused: %s", new.epoch, why)
            return pb.ProposeReply(ok=False, reason=why, epoch=old.epoch if old else 0)

        why = proposal_refused(old, new, m.ready, self._busy or self.leaving)
        if why is not None:
            return refuse(why)
        assert old is not None  # refused otherwise
        self._busy = True
        try:
            # From the catalogue: every owner may both gain and lose ranges, so none is a
            # steady source, and a taker keeps its old range (`prepare`) until the grace ends.
            if not await self.publish(old, new, "reseed", reason, from_owners=False):
                return refuse("another table change got in first; try again on the new table")
        finally:
            self._busy = False
        return pb.ProposeReply(ok=True, epoch=new.epoch)

    def announce_leave(self) -> None:
        """Tell gossip we are gone on purpose (status left), so nobody suspects or takes over."""
        node, agent = self.node, self.agent  # `start` makes both
        if node is not None and agent is not None and node.me.status != LEFT:
            node.leave(time.monotonic())
            agent.round()  # push it now

    def weight(self, member: str) -> float:
        e = self._node().members.get(member)
        return float(sum(e.subs)) if e else 0.0

    async def publish(self, old: SegmentTable, new: SegmentTable, action: str, reason: str,
                       from_owners: bool = True, space: str = DEFAULT_SPACE) -> bool:
        """The hand-off of docs/design.md, for `space`'s table: takers load first; then the epoch
        is stored (compare-and-set) and every owner adopts it; shrunk owners keep their old part
        for a grace period. Returns False when another change got in first (we adopt that one)."""
        takers = grown(old, new)
        named = space != DEFAULT_SPACE
        log.warning("%s%s: epoch %d -> %d (%s)", action, f" in space {space!r}" if named else "",
                    old.epoch, new.epoch, reason)
        t0 = time.monotonic()
        await asyncio.gather(*(self._prepare(t, new, adopt=False, space=space,
                                             sources=self._sources(old, new, t) if from_owners else ())
                               for t in takers))
        prepared_s = time.monotonic() - t0
        if not await self.m.store.put_table_if(old.epoch, new.to_json(), space=space):
            raw = await self.m.store.get_table(space)  # someone else changed it first: take theirs
            if raw and named:
                await (await self.m.state(space)).apply_table(SegmentTable.from_json(raw))
            elif raw:
                self.offer(SegmentTable.from_json(raw))
            return False
        # Every owner adopts before gossip spreads it, so a dispatcher that reaches a matcher
        # with the old table learns of the new one from its answer (SubscriptionAck.epoch).
        others = [o for o in new.members if o != self.m.s.id and new.members[o]]  # no address: it reads the store
        results = await asyncio.gather(*(self._prepare(o, new, adopt=True, space=space) for o in others),
                                       return_exceptions=True)
        for o, r in zip(others, results):
            if isinstance(r, BaseException):
                log.warning("%s did not adopt epoch %d directly (%r); it reads it from the store", o, new.epoch, r)
        if self.m.s.id in new.members or self.m.s.id in old.members:
            await (await self.m.state(space)).apply_table(new)
        if not named:
            self.offer(new)
        else:  # the next pushes carry its epoch (bluedove/gossip/space_epochs.py)
            self.offer_space(space, new.epoch)
        event = {"at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"), "action": action,
                 "reason": f"{reason} (epoch {new.epoch}; hand-off loaded in {prepared_s:.2f} s)",
                 "matchers": len(new.members)}
        await self.m.store.add_event({**event, "space": space} if named else event)
        return True

    async def loads(self, table: SegmentTable, space: str = DEFAULT_SPACE) -> dict[str, list[LoadReport]]:
        """Each reachable owner's load per dimension of `space`."""
        async def one(member: str) -> tuple[str, pb.ReportReply]:
            if member == self.m.s.id:
                return member, self.m.report(await self.m.state(space))
            return member, await self._stub(table.members[member]).Report(
                pb.ReportRequest(space="" if space == DEFAULT_SPACE else space), timeout=self.m.s.report_timeout_s)

        out: dict[str, list[LoadReport]] = {}
        reachable = [o for o, a in table.members.items() if a]  # an owner with no address yet has no report
        for r in await asyncio.gather(*(one(o) for o in reachable), return_exceptions=True):
            if not isinstance(r, BaseException):
                out[r[0]] = [LoadReport(lam=d.lam, mu=d.mu, q=d.q, subs=d.subs, split_at=d.split_at)
                              for d in r[1].dims]
        return out

    def _stub(self, addr: str) -> pb_grpc.MatcherStub:
        cached = self._peers.get(addr)
        if cached is None:
            ch = tls.aio_channel(addr, self.m.s)
            cached = self._peers[addr] = (ch, pb_grpc.MatcherStub(ch))
        return cached[1]

    def _sources(self, old: SegmentTable, new: SegmentTable, taker: str) -> list[pb.Source]:
        """Where `taker` fetches each range it gains: the single live old owner of that range
        (a split's or a leave's); none (the catalogue) when an owner is dead, there are
        several, or the owner takes ranges in this change too (a re-seed): its Prepare swaps
        its sets while we fetch, so its export could miss rows of the range."""
        out = []
        takers = grown(old, new)
        for i, owners, a, b in gained(old, taker, takers.get(taker, {})):
            src = next(iter(owners)) if len(owners) == 1 else None
            e = self._node().members.get(src) if src else None
            if not src or e is None or e.status == DEAD or (e.status != ALIVE and src != self.m.s.id) \
                    or not old.members[src] or src in takers:
                return []
            out.append(pb.Source(dimension=i, member=src, address=old.members[src], low=a, high=b))
        return out

    async def _prepare(self, member: str, table: SegmentTable, adopt: bool,
                       sources: Sequence[pb.Source] = (), space: str = DEFAULT_SPACE) -> None:
        if member == self.m.s.id:
            await (await self.m.state(space)).prepare(table, adopt=adopt, sources=list(sources))
            return
        await self._stub(table.members[member]).Prepare(
            pb.PrepareRequest(table_json=json.dumps(table.to_json()), adopt=adopt, sources=list(sources),
                              space="" if space == DEFAULT_SPACE else space),
            timeout=self.m.s.prepare_timeout_s)
