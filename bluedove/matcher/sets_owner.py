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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar, TypeVarTuple

import numpy as np

from bluedove.core.filters import BOX_SEP, sub_of
from bluedove.core.model import Subscription
from bluedove.core.partition.modes import held
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.matcher.errors import BadRequest
from bluedove.matcher.sets import SubscriptionSets, subscription_of
from bluedove.runtime.settings import MatcherSettings
from bluedove.store.catalogue_tail import change
from bluedove.store.keys import join_pos, parse_pos, pos_max, pos_min, read_past
from bluedove.store.store import MatcherStore
from bluedove.v1 import matcher_pb2 as pb

log = logging.getLogger("bluedove.matcher")

# Catalogue log changes applied in one index job at most (`apply_in_slices`): a few ms of
# removals (docs/benchmarks.md, "Deleting a queue of 10,000 subscriptions").
APPLY_SLICE = 500
# Fills new sets (on the index thread): given the new sets and the old ones (None at start).
Fill = Callable[[SubscriptionSets, "SubscriptionSets | None"], None]
R = TypeVar("R")
Ts = TypeVarTuple("Ts")


class RunIndex(Protocol):
    """Runs `fn(*args)` on the matcher's index thread (`Matcher.run_index`)."""

    def __call__(self, fn: Callable[[*Ts], R], *args: *Ts) -> Awaitable[R]: ...


class Rebuilt(NamedTuple):
    """How a rebuild of the sets went: seconds filling them, log changes replayed, seconds replaying."""

    build_s: float  # filling the new sets
    replayed: int  # catalogue log changes replayed onto them
    replay_s: float


class SetsOwner:
    """The matcher's subscription sets of one space and the position in that space's catalogue
    log they are current to."""

    def __init__(self, settings: MatcherSettings, store: MatcherStore, run_index: RunIndex,
                 space: str = DEFAULT_SPACE) -> None:
        self.s = settings
        self.store = store
        self.space = space
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
            new, build_s = await self._fill(table, fill, uses_old=True)
            return await self._replay_and_swap(new, table, [self.log_pos, *since], build_s)

    async def _fill(self, table: SegmentTable, fill: Fill, widen: dict[int, tuple[float, float]] | None = None,
                    uses_old: bool = False) -> tuple[SubscriptionSets, float]:
        t0 = time.monotonic()
        new = SubscriptionSets(self.s.id, table, self.s.tombstone_ttl_s, self.s.partition)
        if widen:  # hold these ranges instead of the table's (a superset of them)
            new.segments = dict(widen)
        old = self.sets
        if old is not None:
            # A fill from the catalogue alone learns its own filters: a replaced filter's older
            # version, met in the snapshot or the log, never reaches the sets still serving.
            new.carry_removals(old, book=uses_old)
        await self.run_index(fill, new, old)
        return new, time.monotonic() - t0

    async def _replay_and_swap(self, new: SubscriptionSets, table: SegmentTable, since: list[str],
                               build_s: float) -> Rebuilt:
        t0 = time.monotonic()
        pos = pos_min(since)
        replayed = 0
        while True:
            pos, changes = await self.store.catalogue_changes(pos, space=self.space)
            if not changes:
                break
            await apply_in_slices(self.run_index, new, changes, table)
            replayed += len(changes)
        self.sets, self.log_pos = new, pos_max([pos, self.log_pos])
        return Rebuilt(build_s, replayed, time.monotonic() - t0)

    async def load_catalogue(self, table: SegmentTable, widen: dict[int, tuple[float, float]] | None = None) -> Rebuilt:
        """Rebuild for `table`'s segments (or the wider `widen`) from a catalogue snapshot plus
        the log since."""
        raws: list[str] = []
        if not held(self.s.partition, table, self.s.id):
            # We own nothing: no need to read the catalogue, only to follow it.
            pos = await self.store.catalogue_position(self.space)
        else:
            pos, raws = await self.store.catalogue_snapshot_raw(self.space)

        def fill(sets: SubscriptionSets, _old: SubscriptionSets | None) -> None:
            if raws:
                sets.add_catalogue(raws)

        return await self.rebuild(table, fill, [pos], widen=widen)

    async def trim(self, table: SegmentTable) -> Rebuilt:
        """Narrow the sets to `table`'s segments (a trim after the hand-off grace) from the rows
        they hold: a set whose range is unchanged is kept as it is, a narrower one is rebuilt
        from its own rows overlapping the new range, the others emptied; no catalogue read. A
        reload from the catalogue parses every subscription on the index thread, seconds under
        a pod's CPU limit that every Forward waits through (docs/benchmarks.md, "Capped
        matchers"). A range the sets do not hold whole (never, after a shrink) is a reload."""
        mine = held(self.s.partition, table, self.s.id)
        segments = self._current().segments
        if any(i not in segments or lo < segments[i][0] or hi > segments[i][1] for i, (lo, hi) in mine.items()):
            return await self.load_catalogue(table)

        def fill(new: SubscriptionSets, old: SubscriptionSets | None) -> None:
            assert old is not None, "a trim narrows the sets of a started matcher"
            for i, (lo, hi) in mine.items():
                if segments.get(i) == (lo, hi):
                    new.sets[i] = old.sets[i]
                    continue
                ids, queues, lows, highs = old.sets[i].export(i, lo, hi)
                new.add_rows(list(ids), list(queues), lows, highs, dims={i})

        return await self.rebuild(table, fill, [], uses_old=True)

    async def replace_direct(self, batch: Sequence[pb.Subscription]) -> int:
        """A dispatcher's replaces (each carries its catalogue log entry, `log_id`), applied in
        one index job under the log lock: neither the tail nor a reload's replay and swap
        interleaves. Those whose entry the sets have read already are in them (or a newer
        version is): skipped. BadRequest for a replace without its entry."""
        if any(not s.log_id for s in batch):
            raise BadRequest("a replaced subscription needs its catalogue log_id")
        async with self.log_lock:
            sets = self._current()
            subs = [(subscription_of(s, sets.table.space), s.log_id) for s in batch
                    if not read_past(self.log_pos, s.queue, s.log_id)]
            return await self.run_index(sets.replace_many, subs, True) if subs else 0

    def _current(self) -> SubscriptionSets:
        assert self.sets is not None, "the sets are read only after `begin` made them"
        return self.sets

    async def export(self, dim: int, low: float, high: float
                     ) -> tuple[str, list[str], list[str], np.ndarray, np.ndarray, dict[str, Any]]:
        """The log position and the rows of dimension `dim`'s set overlapping [low, high), and
        {id: predicates} of the filters among them (rows that are boxes)."""
        async with self.log_lock:  # the rows and the position must agree
            pos = self.log_pos
            sets = self._current()
            ids, queues, lows, highs = await self.run_index(sets.sets[dim].export, dim, low, high)
            filters = sets.book.predicates(list({sub_of(i) for i in ids if BOX_SEP in i}))
        return pos, ids, queues, lows, highs, filters

    async def follow(self) -> None:
        """Tail the catalogue log into the current sets, forever: one task per group of shards
        the store reads in one blocking call (all of them on one server, one each on a
        cluster)."""
        await asyncio.gather(*(self._follow_group(g) for g in self.store.catalogue_read_groups()))

    async def _follow_group(self, shards: list[int]) -> None:
        linger_s = self.s.catalog_linger_ms / 1000
        while True:
            try:
                ids = parse_pos(self.log_pos)
                after = {shard: ids[shard] for shard in shards}
                got = await self.store.catalogue_tail_many(after, self.s.catalog_block_ms, space=self.space)
                if not got:
                    continue
                # Apply them a little later: their direct calls, sent once the catalogue had
                # them, are in by then, and `filed` skips them unparsed. What is written
                # meanwhile waits for the next read, which returns at once, and so on: at most
                # one index job per linger, each a batch.
                await asyncio.sleep(linger_s)
                await self.apply_tail(after, got)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("catalogue tail of shards %s failed; retrying", shards)
                await asyncio.sleep(self.s.catalog_retry_s)

    async def apply_tail(self, after: Mapping[int, str], got: Mapping[int, Sequence[tuple[str, dict[str, str]]]]
                         ) -> None:
        """Apply log entries read after the positions `after` ({shard: entry id}) and advance
        the position; nothing if a reload moved the position meanwhile (its replay has them)."""
        async with self.log_lock:
            ids = parse_pos(self.log_pos)
            if any(ids[shard] != pos for shard, pos in after.items()):
                return
            changes = [change(e, f) for shard in after for e, f in got.get(shard, ())]
            sets = self._current()
            await apply_in_slices(self.run_index, sets, changes, sets.table)
            for shard, entries in got.items():
                if entries:
                    ids[shard] = entries[-1][0]
            self.log_pos = join_pos(ids)


async def apply_in_slices(run_index: RunIndex, sets: SubscriptionSets, changes: Sequence[Mapping[str, str]],
                          table: SegmentTable) -> None:
    """Catalogue log changes onto `sets`, in order, as index jobs of at most APPLY_SLICE
    changes each, the event loop given a turn between two: a long run (a deleted queue's
    removals) never holds the index thread for more than one slice, so a Forward's match
    queued meanwhile waits for one slice at most."""
    for start in range(0, len(changes), APPLY_SLICE):
        if start:
            await asyncio.sleep(0)
        await run_index(applier(sets, changes[start:start + APPLY_SLICE], table))


def applier(sets: SubscriptionSets, changes: Sequence[Mapping[str, str]], table: SegmentTable) -> Callable[[], None]:
    """Catalogue log changes as one job for the index thread, each run of one kind together,
    in their place (changes of one id keep their order). An add the sets have `filed` (a
    direct call brought it) is skipped before any parse; the other adds of a run are parsed
    together and added in one bulk call; the removes of a run are applied together
    (`remove_many`: one pack at most); replaces swap versions (`replace_many`: one skipped
    when a direct call applied it, or a newer one, already)."""
    def apply() -> None:
        run: list[Mapping[str, str]] = []
        for f in changes:
            if run and _kind(run[0]) != _kind(f):
                _apply_run(sets, run, table)
                run = []
            run.append(f)
        if run:
            _apply_run(sets, run, table)
    return apply


def _kind(f: Mapping[str, str]) -> str:
    """add, replace, or remove (what the log holds besides an add or a replace)."""
    return f["op"] if f["op"] in ("add", "replace") else "remove"


def _apply_run(sets: SubscriptionSets, run: Sequence[Mapping[str, str]], table: SegmentTable) -> None:
    kind = _kind(run[0])
    if kind == "add":
        raws = [f["sub"] for f in run if not sets.filed(f["id"])]
        if raws:
            sets.add_catalogue(raws)
    elif kind == "replace":
        sets.replace_many([(Subscription.from_json(json.loads(f["sub"]), table.space), f["at"]) for f in run])
    else:
        sets.remove_many([f["id"] for f in run])
