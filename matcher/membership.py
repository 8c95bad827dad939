"""The matcher's part in gossip: its node, the table it adopts, and takeover of dead members.

Takeover (seed 001 §III-C): when a table owner is declared dead, the lowest-id live owner
computes the next table (`merge_out`: each dead segment joins an adjacent live owner), asks
every member whose range grew to load the added subscriptions (`Prepare`), and only then
publishes the new epoch: compare-and-set in the store (one change per epoch wins, whoever
proposes it), and into gossip, which spreads it to matchers and, through them, dispatchers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import grpc

from bluedove.segments import SegmentTable, grown, merge_out
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc
from gossip.agent import GossipAgent
from gossip.config import GossipConfig
from gossip.grpc_transport import GossipServicer, GrpcTransport
from gossip.state import ALIVE, STATUS_NAMES, Node

if TYPE_CHECKING:
    from matcher.server import Matcher

log = logging.getLogger("bluedove.matcher")


class Membership:
    def __init__(self, m: "Matcher", config: GossipConfig, seeds: tuple[str, ...] = ()) -> None:
        self.m = m
        self.config = config
        self.extra_seeds = seeds
        self.node: Node | None = None
        self.transport = GrpcTransport(timeout_s=config.probe_timeout_s)
        self.agent: GossipAgent | None = None
        self._busy = False  # a table change or takeover is under way
        self._retry_at = 0.0
        self._peers: dict[str, tuple[grpc.aio.Channel, pb_grpc.MatcherStub]] = {}

    def servicer(self) -> GossipServicer:
        return GossipServicer(lambda env: self.agent and self.agent.receive(env))

    def start(self, addr: str, table: SegmentTable) -> None:
        seeds = tuple(a for a in [*table.members.values(), *self.extra_seeds] if a != addr)
        self.node = Node(self.m.s.id, addr, self.m.generation, self.config, seeds)
        self.node.expect({i: a for i, a in table.members.items() if i != self.m.s.id}, time.monotonic())
        self.node.offer_table(table.epoch, json.dumps(table.to_json()))
        self.agent = GossipAgent(self.node, self.transport)
        self.agent.on_round.append(self._after_round)
        self.agent.start()

    async def stop(self) -> None:
        if self.agent:
            await self.agent.stop()
        await self.transport.close()
        for ch, _ in self._peers.values():
            await ch.close()

    # -- views -----------------------------------------------------------------------------
    def members(self) -> list[pb.MemberInfo]:
        if self.node is None:
            return []
        return [pb.MemberInfo(id=e.id, address=e.addr, status=STATUS_NAMES[e.status], generation=e.generation,
                              subs=list(e.subs)) for e in self.node.members.values()]

    def offer(self, table: SegmentTable) -> None:
        if self.node is not None:
            self.node.offer_table(table.epoch, json.dumps(table.to_json()))

    # -- after every round -----------------------------------------------------------------
    def _after_round(self) -> None:
        m, node = self.m, self.node
        node.set_load(*m.load_summary())
        if self._busy or m.table is None:
            return
        if node.epoch > m.table.epoch:
            self._spawn(self._adopt(SegmentTable.from_json(json.loads(node.table_json))))
            return
        # Only a death gossip agreed on counts (never a member merely not heard of yet).
        gone = {o for o in m.table.members if o != m.s.id and o in node.members and node.members[o].gone}
        if gone and m.ready and time.monotonic() >= self._retry_at and self._coordinator() == m.s.id:
            self._spawn(self._takeover(gone))

    def _spawn(self, coro) -> None:
        self._busy = True
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._busy = False
        if not task.cancelled() and task.exception() is not None:
            log.error("table change failed: %r", task.exception())
            self._retry_at = time.monotonic() + 1.0

    def _coordinator(self) -> str | None:
        """The lowest-id live owner of segments acts; every member agrees once gossip has settled."""
        node, table = self.node, self.m.table
        live = [i for i in table.members if node.members.get(i) is not None and node.members[i].status == ALIVE]
        return min(live) if live else None

    async def _adopt(self, table: SegmentTable) -> None:
        await self.m.apply_table(table)

    async def _takeover(self, gone: set[str]) -> None:
        old = self.m.table
        node = self.node
        weight = lambda i: sum(node.members[i].subs) if i in node.members else 0  # noqa: E731
        new = merge_out(old, gone, weight)
        takers = grown(old, new)
        log.warning("taking over %s: epoch %d -> %d, ranges to %s", sorted(gone), old.epoch, new.epoch,
                    sorted(takers))
        await asyncio.gather(*(self._prepare(t, new) for t in takers))
        if not await self.m.store.put_table_if(old.epoch, new.to_json()):
            raw = await self.m.store.get_table()  # someone else changed it first: take theirs
            if raw:
                self.offer(SegmentTable.from_json(raw))
            return
        self.offer(new)
        await self.m.apply_table(new)
        await self.m.store.add_event({
            "at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "action": "takeover",
            "reason": f"{', '.join(sorted(gone))} declared dead; segments merged into "
                      f"{', '.join(sorted(takers))} (epoch {new.epoch})",
            "matchers": len(new.members),
        })

    async def _prepare(self, member: str, table: SegmentTable) -> None:
        if member == self.m.s.id:
            await self.m.prepare(table)
            return
        addr = table.members[member]
        cached = self._peers.get(addr)
        if cached is None:
            ch = grpc.aio.insecure_channel(addr)
            cached = self._peers[addr] = (ch, pb_grpc.MatcherStub(ch))
        await cached[1].Prepare(pb.PrepareRequest(table_json=json.dumps(table.to_json())), timeout=30.0)
