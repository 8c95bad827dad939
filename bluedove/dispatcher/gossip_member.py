"""The dispatcher as a gossip member: a node of role "dispatcher" that owns no segments.

It runs its own small gRPC server (the `Gossip` service only) on `gossip_port`: several
dispatchers share the public HTTP and gRPC ports with SO_REUSEPORT, but a gossip envelope is
for one member, so each has a port of its own (SO_REUSEPORT off: a port taken is an error).
Through it the dispatcher learns the segment table and the membership within a round of a
change, instead of asking a matcher for them; matchers see it in their view and detect its
death like any member's, but never take it for a matcher (`bluedove/matcher/decisions.py`).

Seeds: the table's members, `--join` addresses, and the addresses `--peers-dns` resolves to,
resolved again while the node knows no live peer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Callable

import grpc

from bluedove.core.partition.segments import SegmentTable
from bluedove.gossip.agent import GossipAgent
from bluedove.gossip.config import GossipConfig
from bluedove.gossip.grpc_transport import GossipServicer, GrpcTransport
from bluedove.gossip.messages import DISPATCHER, Envelope
from bluedove.gossip.peers import DnsSeeds
from bluedove.gossip.state import Node
from bluedove.runtime import tls
from bluedove.runtime.settings import DispatcherSettings, from_env
from bluedove.v1 import gossip_pb2_grpc as gossip_grpc

log = logging.getLogger("bluedove.dispatcher")

# While no peer is known, the DNS name is resolved again at most this often.
DNS_RETRY_S = 1.0


def advertised(settings: DispatcherSettings, port: int) -> str:
    """`--advertise`, else the bind host (this machine's name when it binds every address)."""
    if settings.advertise:
        return settings.advertise
    host = settings.host
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostbyname(socket.gethostname())
    return f"{host}:{port}"


class GossipMember:
    """Owns the node, its agent and its server. `on_change` is called after an envelope or a
    round, so the owner picks up a newer table at once and the membership every round."""

    def __init__(self, settings: DispatcherSettings, seeds: tuple[str, ...] = (),
                 config: GossipConfig | None = None) -> None:
        self.s = settings
        self.joins = tuple(seeds)
        self.config = config or from_env(GossipConfig)
        self.node: Node | None = None
        self.agent: GossipAgent | None = None
        self.transport = GrpcTransport(timeout_s=self.config.probe_timeout_s, tls_files=settings)
        self.server: grpc.aio.Server | None = None
        self.servicer = GossipServicer(self._receive)
        self.port = 0
        self.on_change: list[Callable[[], None]] = []
        self.seeds: DnsSeeds | None = None
        self._resolving: asyncio.Task[None] | None = None

    async def start(self, table: SegmentTable | None) -> None:
        self.server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        gossip_grpc.add_GossipServicer_to_server(self.servicer, self.server)
        self.port = tls.add_port(self.server, f"{self.s.host}:{self.s.gossip_port}", self.s, internal=True)
        await self.server.start()
        addr = advertised(self.s, self.port)
        self.node = Node(self.s.id, addr, time.time_ns(), self.config, role=DISPATCHER)
        self.seeds = DnsSeeds(self.node, self.s.peers_dns, self.joins, DNS_RETRY_S)
        self.reseed(table)
        self._resolving = asyncio.get_running_loop().create_task(self.seeds.run())
        if table is not None:
            self.offer(table)
        self.agent = GossipAgent(self.node, self.transport)
        self.agent.on_round.append(self._after_round)
        self.agent.start()
        log.info("gossip as %s on %s (advertised %s)", self.s.id, self.port, addr)

    async def stop(self) -> None:
        """Say we leave (peers mark us left, not dead), then stop."""
        if self.agent is not None:
            self.agent.node.leave(time.monotonic())
            self.agent.round()
            await asyncio.sleep(0.05)  # let the pushes go out
            await self.agent.stop()
        if self._resolving is not None:
            self._resolving.cancel()
        await self.transport.close()
        if self.server is not None:
            self.servicer.close()  # peers' gossip streams never end by themselves
            await self.server.stop(0.5)

    def offer(self, table: SegmentTable) -> None:
        """A table learned another way (the store, a matcher's answer): gossip spreads it if newer."""
        if self.node is not None and table.epoch > self.node.epoch:
            self.node.offer_table(table.epoch, json.dumps(table.to_json()))

    def space_rises(self) -> dict[str, int]:
        """Named spaces' epochs that rose since the last call (bluedove/gossip/space_epochs.py)."""
        return self.node.spaces.take_rises() if self.node is not None else {}

    def reseed(self, table: SegmentTable | None = None) -> None:
        """Seeds from `table`'s members (else the last table's), the joins and the DNS name."""
        assert self.seeds is not None  # asked only once started
        self.seeds.reseed(None if table is None else [*table.members.values(), *self.joins])

    # -- driven by the agent ------------------------------------------------------------------
    def _receive(self, env: Envelope) -> None:
        if self.agent is not None:
            self.agent.receive(env)
            self._changed()

    def _after_round(self) -> None:
        self._changed()

    def _changed(self) -> None:
        for fn in self.on_change:
            try:
                fn()
            except Exception:
                log.exception("gossip update failed")
