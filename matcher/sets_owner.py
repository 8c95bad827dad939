"""The one owner of a matcher's subscription sets, the catalogue log position they are
current to, the lock that keeps the two together, and the tombstones carried across reloads.

Every reload — a catalogue load, a hand-off from the old owners, a trim after the grace —
is the same `rebuild`: build new sets, replay the catalogue log since the positions their
rows are current to, and swap them in. The old sets serve meanwhile: every change is in the
log before a dispatcher sends it directly, so the replay misses nothing the old sets had.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Awaitable, Callable, NamedTuple

import numpy as np

from bluedove.model import Subscription
from bluedove.partitioning import held
from bluedove.segments import SegmentTable
from bluedove.settings import MatcherSettings
from bluedove.store import Store
from bluedove.store.keys import CATALOG_SHARDS, pos_max, pos_min, pos_of, pos_with
from matcher.catalog import SubscriptionSets, rows_from_catalogue

log = logging.getLogger("bluedove.matcher")

# Fills new sets (on the index thread): given the new sets and the old ones (None at start).
Fill = Callable[[SubscriptionSets, "SubscriptionSets | None"], None]
RunIndex = Callable[..., Awaitable]


class Rebuilt(NamedTuple):
    build_s: float  # filling the new sets
    replayed: int  # catalogue log changes replayed onto them
    replay_s: float


class SetsOwner:
    def __init__(self, settings: MatcherSettings, store: Store, run_index: RunIndex) -> None:
        self.s = settings
        self.store = store
        self.run_index = run_index
        self.sets: SubscriptionSets | None = None
        self.log_pos = "0-0"  # one stream id per catalogue shard (bluedove/store/keys.py)
        # The catalogue tail and a reload must not interleave: one swaps the sets and the
        # log position together, the other applies changes after that position.
        self.log_lock = asyncio.Lock()

    def begin(self, table: SegmentTable) -> None:
        """Empty sets for `table` until the first load: the queue and the RPCs find sets at once."""
        self.sets = SubscriptionSets(self.s.id, table, self.s.tombstone_ttl_s, self.s.partition)

    async def rebuild(self, table: SegmentTable, fill: Fill, since: list[str], uses_old: bool = False,
                      widen: dict[int, tuple[float, float]] | None = None) -> Rebuilt:
        """Build sets for `table` with `fill`, replay the log from the oldest of `since` (the
        positions the filled rows are current to), and swap them in. When `fill` copies rows of
        the old sets (`uses_old`), the log lock is held throughout, so those stay at our log
        position, which counts among `since`. Adds and removes are idempotent: replaying what
        a set already has changes nothing."""
        if not uses_old:
            new, build_s = await self._fill(table, fill, widen)
            async with self.log_lock:
                return await self._replay_and_swap(new, table, since, build_s)
        async with self.log_lock:
            new, build_s = await self._fill(table, fill)
            return await self._replay_and_swap(new, table, [self.log_pos, *since], build_s)

    async def _fill(self, table: SegmentTable, fill: Fill,
                    widen: dict[int, tuple[float, float]] | None = None) -> tuple[SubscriptionSets, float]:
        t0 = time.monotonic()
        new = SubscriptionSets(self.s.id, table, self.s.tombstone_ttl_s, self.s.partition)
        if widen:  # hold these ranges instead of the table's (a superset of them)
            new.segments = dict(widen)
        old = self.sets
        if old is not None:
            new.carry_removals(old)
        await self.run_index(fill, new, old)
        return new, time.monotonic() - t0

    async def _replay_and_swap(self, new: SubscriptionSets, table: SegmentTable, since: list[str],
                               build_s: float) -> Rebuilt:
        t0 = time.monotonic()
        pos = pos_min(since)
        replayed = 0
        while True:
            pos, changes = await self.store.catalogue_changes(pos)
            if not changes:
                break
            await self.run_index(applier(new, changes, table))
            replayed += len(changes)
        self.sets, self.log_pos = new, pos_max([pos, self.log_pos])
        return Rebuilt(build_s, replayed, time.monotonic() - t0)

    async def load_catalogue(self, table: SegmentTable, widen: dict[int, tuple[float, float]] | None = None) -> Rebuilt:
        """Rebuild for `table`'s segments (or the wider `widen`) from a catalogue snapshot plus
        the log since."""
        if not held(self.s.partition, table, self.s.id):
            # We own nothing: no need to read the catalogue, only to follow it.
            pos, raws = await self.store.catalogue_position(), []
        else:
            pos, raws = await self.store.catalogue_snapshot_raw()

        def fill(sets: SubscriptionSets, _old) -> None:
            if raws:
                sets.add_rows(*rows_from_catalogue(raws, table.space))

        return await self.rebuild(table, fill, [pos], widen=widen)

    async def export(self, dim: int, low: float, high: float) -> tuple[str, list, list, np.ndarray, np.ndarray]:
        """The log position and the rows of dimension `dim`'s set overlapping [low, high)."""
        async with self.log_lock:  # the rows and the position must agree
            pos = self.log_pos
            ids, queues, lows, highs = await self.run_index(self.sets.sets[dim].export, dim, low, high)
        return pos, ids, queues, lows, highs

    async def follow(self) -> None:
        """Tail every shard of the catalogue log into the current sets, forever: one task per
        shard, each waiting on its own log."""
        await asyncio.gather(*(self._follow_shard(shard) for shard in range(CATALOG_SHARDS)))

    async def _follow_shard(self, shard: int) -> None:
        while True:
            try:
                after = pos_of(self.log_pos, shard)
                entries = await self.store.catalogue_tail(shard, after, self.s.catalog_block_ms)
                if not entries:
                    continue
                async with self.log_lock:
                    if pos_of(self.log_pos, shard) != after:  # a reload swapped the sets meanwhile: read again
                        continue
                    await self.run_index(applier(self.sets, [f for _, f in entries], self.sets.table))
                    self.log_pos = pos_with(self.log_pos, shard, entries[-1][0])
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("catalogue tail of shard %d failed; retrying", shard)
                await asyncio.sleep(self.s.catalog_retry_s)


def applier(sets: SubscriptionSets, changes: list[dict], table: SegmentTable) -> Callable[[], None]:
    """Catalogue log changes as one job for the index thread."""
    def apply() -> None:
        for f in changes:
            if f["op"] == "add":
                sets.add_subscription(Subscription.from_json(json.loads(f["sub"]), table.space))
            else:
                sets.remove(f["id"])
    return apply
