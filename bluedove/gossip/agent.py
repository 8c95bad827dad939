"""Runs a gossip `Node` on real time: a round every interval, every envelope as it arrives."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from bluedove.gossip.messages import ALIVE, STATUS_NAMES, Envelope
from bluedove.gossip.state import Node
from bluedove.gossip.transport import Transport

log = logging.getLogger("bluedove.gossip")


class GossipAgent:
    """A gossip Node on real time: a round every interval on a task, envelopes sent as they come."""

    def __init__(self, node: Node, transport: Transport, clock: Callable[[], float] = time.monotonic) -> None:
        self.node = node
        self.transport = transport
        self.clock = clock
        # Called after every round, so the owner can publish its load and act on changes.
        self.on_round: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._seen: dict[str, tuple[int, int]] = {}  # member -> (generation, status) last logged

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()

    def receive(self, env: Envelope) -> None:
        for out in self.node.receive(env, self.clock()):
            self.transport.send(out.addr, out.envelope)

    def round(self) -> None:
        for out in self.node.tick(self.clock()):
            self.transport.send(out.addr, out.envelope)
        self._log_changes()
        for fn in self.on_round:
            fn()

    def _log_changes(self) -> None:
        """One line per member whose status changed in our view since the last round: how a
        suspicion or a death came about is the first thing an operator asks."""
        for m in self.node.members.values():
            now = (m.generation, m.status)
            before = self._seen.get(m.id)
            if before == now or m.id == self.node.id:
                continue
            self._seen[m.id] = now
            if before is not None or m.status != ALIVE:
                log.warning("gossip %s: %s %s is %s (generation %d, incarnation %d)", self.node.id, m.role, m.id,
                            STATUS_NAMES[m.status], m.generation, m.incarnation)

    async def _run(self) -> None:
        interval = self.node.config.interval_s
        next_at = self.clock()
        while True:
            try:
                self.round()
            except Exception:
                log.exception("gossip round failed")
            next_at += interval
            delay = next_at - self.clock()
            if delay < 0:  # the loop was busy for more than a round: do not burst to catch up
                next_at, delay = self.clock(), 0
            await asyncio.sleep(delay)
