"""A named space's table as a dispatcher routes by it: the candidates of a message and the
placement of a subscription under that space's own segment table, over the cluster's matchers
as the dispatcher's `ClusterView` (bluedove/dispatcher/view.py) knows them.

The matchers are the cluster's: their addresses, channels, health and the work this
dispatcher sent each (the adaptive estimate's charges) are the cluster view's, shared by
every space, since a matcher's one index thread serves all its spaces. What is the space's
own is its table, read from the store (a named space's table changes there, by epoch), read
again when a matcher answers that it no longer owns a value (FAILED_PRECONDITION), and in the
background when a request finds it read over the store fallback period ago. The load
reports the ranking extrapolates from are the default space's dimensions, so a named space's
candidates are ranked by the messages this dispatcher sent each matcher (and by which is
usable), each counted at the cold cost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from bluedove.core.forwarding import BATCH_POLICIES, Ranking, matcher_loads, rank, rank_batch
from bluedove.core.load import LoadReport, cost
from bluedove.core.partition import modes
from bluedove.core.partition.segments import SegmentTable
from bluedove.dispatcher.placing import Placing
from bluedove.dispatcher.view import ClusterView
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

log = logging.getLogger("bluedove.dispatcher")


class TableSource(Protocol):
    """Where a named space's table is read (the store, bluedove/store/cluster_state.py)."""

    async def get_table(self, space: str = ...) -> dict[str, Any] | None: ...


class SpaceView(Placing):
    """One named space's table over the cluster's matchers: ranking and placement."""

    def __init__(self, name: str, cluster: ClusterView, source: TableSource, table: SegmentTable) -> None:
        self.name = name
        self.cluster = cluster
        self.s = cluster.s
        self.source = source
        self.table: SegmentTable | None = table
        self.previous: tuple[SegmentTable, float] | None = None
        self.read_at = time.monotonic()  # when the table was last read from the store
        self._reading: asyncio.Task[None] | None = None

    def current(self) -> SegmentTable:
        assert self.table is not None, "a space's view is made with its table"
        return self.table

    def set_table(self, table: SegmentTable) -> None:
        """Adopt `table` if it is newer; the one it replaces counts too for the hand-off grace."""
        if self.table is None or table.epoch > self.table.epoch:
            if self.table is not None:
                self.previous = (self.table, time.monotonic() + self.s.handoff_grace_s)
            self.table = table

    async def pull_table(self, _member: str) -> None:
        """A matcher showed a newer table than ours: read the space's from the store."""
        self.read_at = time.monotonic()
        raw = await self.source.get_table(self.name)
        if raw:
            self.set_table(SegmentTable.from_json(raw))

    def refresh_soon(self, every_s: float) -> None:
        """Read the table again in the background if it was last read over `every_s` ago (a
        change in the store reaches a dispatcher that no matcher has refused yet)."""
        if time.monotonic() - self.read_at < every_s or (self._reading is not None and not self._reading.done()):
            return
        self._reading = asyncio.get_running_loop().create_task(self._refresh())

    async def _refresh(self) -> None:
        try:
            await self.pull_table("")
        except Exception as exc:  # noqa: BLE001 - the store away: the next request tries again
            log.warning("reading space %r's table failed: %r", self.name, exc)

    # -- the matchers, as the cluster view knows them -----------------------------------------
    def stub(self, member: str) -> pb_grpc.MatcherStub:
        return self.cluster.stub(member)

    def mark_up(self, member: str) -> None:
        self.cluster.mark_up(member)

    def mark_down(self, member: str) -> None:
        self.cluster.mark_down(member)

    def gone(self, member: str) -> bool:
        return self.cluster.gone(member)

    def charge(self, candidate: tuple[int, str]) -> None:
        self.cluster.charges.charge(candidate[1], cost(LoadReport()))

    # -- routing -----------------------------------------------------------------------------
    def rank_batch(self, points: npt.NDArray[np.float64], now: float) -> Ranking:
        """Every row's candidates, usable ones first, by the work sent each matcher."""
        table = self.current()
        usable_of = self.cluster.usable
        if self.s.policy not in BATCH_POLICIES:
            lists = []
            for p in points.tolist():
                cands = modes.candidates(self.s.partition, table, p)
                good = [c for c in cands if usable_of(c[1], now)]
                ranked = rank(self.s.policy, good, lambda c: LoadReport(), now, self.cluster.rng,
                              lambda m: [], self.cluster.charges.by_member())
                seen = {m for _, m in ranked}
                lists.append(ranked + [c for c in cands if c[1] not in seen])
            return Ranking.from_lists(lists)
        members, cand_m, cand_d = modes.candidates_batch(self.s.partition, table, points)
        usable = np.array([usable_of(m, now) for m in members], dtype=np.bool_)
        sent = self.cluster.charges.array(members)
        draws = self.cluster.np_rng.random((len(points), 2 * cand_m.shape[1]))
        loads = matcher_loads(members, table.space.k, {})
        order, count = rank_batch(self.s.policy, cand_m, cand_d, usable, loads, sent, now, draws)
        self.cluster.charges.take_back(members, sent)
        return Ranking(members, cand_m, cand_d, order, count)
