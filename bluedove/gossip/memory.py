"""A simulated network for gossip nodes: delay, loss, broken links and crashes on a simulated clock.

Discrete events in time order: each node's rounds (every `interval_s`, at a random phase) and
each envelope's arrival. Deterministic for a given seed, so a failing case can be replayed.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Callable

from bluedove.gossip import wire
from bluedove.gossip.config import GossipConfig
from bluedove.gossip.messages import Envelope, Out
from bluedove.gossip.state import Node

# An event: a node's round (its address), or an envelope's arrival (its destination, the envelope).
Event = str | tuple[str, Envelope]


class MemoryTransport:
    """The `Transport` of one node on a `SimNetwork`."""

    def __init__(self, net: "SimNetwork", addr: str) -> None:
        self.net, self.addr = net, addr

    def send(self, addr: str, envelope: Envelope) -> None:
        self.net.send(self.addr, addr, envelope)


class SimNetwork:
    """Gossip nodes on a simulated clock and network: delays, loss, blocked links and crashes."""

    def __init__(self, seed: int = 0, delay_s: tuple[float, float] = (0.001, 0.010), loss: float = 0.0,
                 count_bytes: bool = False) -> None:
        self.rng = random.Random(seed)
        self.delay_s = delay_s
        self.loss = loss
        self.count_bytes = count_bytes
        self.now = 0.0
        self.nodes: dict[str, Node] = {}
        self.crashed: set[str] = set()
        self.blocked: set[frozenset[str]] = set()
        self.bytes_sent: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()
        self._events: list[tuple[float, int, Event]] = []
        self._n = 0
        # Called after every event with the network, for tests that watch a condition.
        self.observers: list[Callable[["SimNetwork"], None]] = []

    # -- building ----------------------------------------------------------------------------
    def add(self, node: Node) -> Node:
        self.nodes[node.addr] = node
        self._schedule(self.now + self.rng.uniform(0, node.config.interval_s), node.addr)
        return node

    def spawn(self, n: int, config: GossipConfig | None = None, prefix: str = "m") -> list[Node]:
        """n nodes that all know the first one's address as their seed."""
        config = config or GossipConfig()
        nodes = []
        for i in range(n):
            addr = f"{prefix}{i}:1"
            node = Node(f"{prefix}{i}", addr, generation=1, config=config, seeds=(f"{prefix}0:1",),
                        rng=random.Random(self.rng.random()))
            nodes.append(self.add(node))
        return nodes

    def transport(self, addr: str) -> MemoryTransport:
        return MemoryTransport(self, addr)

    # -- faults ------------------------------------------------------------------------------
    def crash(self, addr: str) -> None:
        self.crashed.add(addr)

    def break_link(self, a: str, b: str) -> None:
        self.blocked.add(frozenset((a, b)))

    def heal_link(self, a: str, b: str) -> None:
        self.blocked.discard(frozenset((a, b)))

    # -- the event loop ----------------------------------------------------------------------
    def send(self, src: str, dst: str, env: Envelope) -> None:
        self.sent[src] += 1
        if self.count_bytes:
            self.bytes_sent[src] += len(wire.encode(env))
        if src in self.crashed or frozenset((src, dst)) in self.blocked:
            return
        if self.loss and self.rng.random() < self.loss:
            return
        self._schedule(self.now + self.rng.uniform(*self.delay_s), (dst, env))

    def run_until(self, t: float) -> None:
        while self._events and self._events[0][0] <= t:
            when, _, event = heapq.heappop(self._events)
            self.now = when
            if isinstance(event, str):
                addr = event
                if addr in self.crashed:
                    continue
                node = self.nodes[addr]
                self._send_all(addr, node.tick(when))
                self._schedule(when + node.config.interval_s, addr)
            else:
                dst, env = event
                to = self.nodes.get(dst)
                if to is None or dst in self.crashed:
                    continue
                self._send_all(dst, to.receive(env, when))
            for obs in self.observers:
                obs(self)
        self.now = max(self.now, t)

    def _send_all(self, src: str, outs: list[Out]) -> None:
        for o in outs:
            self.send(src, o.addr, o.envelope)

    def _schedule(self, when: float, event: Event) -> None:
        self._n += 1
        heapq.heappush(self._events, (when, self._n, event))
