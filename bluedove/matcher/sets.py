"""The matcher's subscription sets, one per dimension, kept in step with the catalogue.

Subscriptions arrive two ways: directly from dispatchers (fast path, so a subscription is
live when the API answers) and from the catalogue log the matcher tails (so nothing is
missed when a direct call fails). Both are idempotent. A removed id is remembered for a
while (a tombstone), so a late direct add cannot bring it back.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable, Sequence

import numpy as np

from bluedove.core.model import Subscription
from bluedove.core.partition.modes import MPARTITION, held
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import Space
from bluedove.matcher.index import SubscriptionSet

# Most direct-call ids remembered for the tail (a tail far behind parses the rest instead).
DIRECT_MAX = 200_000
# Tombstones past which those older than the TTL are forgotten.
TOMBSTONES_CHECKED = 10_000


class SubscriptionSets:
    """One matcher's subscription sets, one per dimension, and the tombstones of removed ids."""

    def __init__(self, member_id: str, table: SegmentTable, tombstone_ttl_s: float = 600.0,
                 mode: str = MPARTITION) -> None:
        self.member_id = member_id
        self.table = table
        # The range each set stores, by the partition mode (p2p: dim 0 only; full: all of dim 0).
        self.segments = held(mode, table, member_id)
        self.sets = [SubscriptionSet(table.space.k) for _ in range(table.space.k)]
        self._tombstones: dict[str, float] = {}
        self._tombstone_ttl_s = tombstone_ttl_s
        # Ids a dispatcher's direct call gave these sets, not yet seen in the catalogue tail:
        # their log entries (which come first in the log, and hold the same rows) need no parse.
        self._direct: set[str] = set()

    def dims_for(self, lows: Sequence[float], highs: Sequence[float]) -> list[int]:
        """mPartition from this matcher's side: the dimensions whose segment overlaps the range."""
        out = []
        for i, (seg_lo, seg_hi) in self.segments.items():
            if lows[i] < highs[i] and lows[i] < seg_hi and seg_lo < highs[i]:
                out.append(i)
        return out

    def add(self, sub_id: str, queue: str, lows: Sequence[float], highs: Sequence[float]) -> int:
        if sub_id in self._tombstones:
            return 0
        return sum(self.sets[i].add(sub_id, queue, lows, highs) for i in self.dims_for(lows, highs))

    def add_subscription(self, sub: Subscription) -> int:
        return self.add(sub.id, sub.queue, sub.lows, sub.highs)

    def add_many(self, subs: list[Subscription]) -> int:
        """`add` for many at once (a catalogue load): each set takes its rows in one bulk call."""
        if not subs:
            return 0
        return self.add_rows([s.id for s in subs], [s.queue for s in subs],
                             np.array([s.lows for s in subs], dtype=np.float64),
                             np.array([s.highs for s in subs], dtype=np.float64))

    def add_rows(self, ids: list[str], queues: list[str], lows: np.ndarray, highs: np.ndarray,
                 dims: set[int] | None = None) -> int:
        """`add_many` from arrays: row j is subscription ids[j] of queues[j]; only into the
        sets of `dims` if given."""
        live = np.array([i not in self._tombstones for i in ids], dtype=bool) if self._tombstones else True
        ok = np.all(lows < highs, axis=1) & live
        added = 0
        for i, (seg_lo, seg_hi) in self.segments.items():
            if dims is not None and i not in dims:
                continue
            rows = np.nonzero(ok & (lows[:, i] < seg_hi) & (highs[:, i] > seg_lo))[0]
            if len(rows):
                added += self.sets[i].add_many([ids[r] for r in rows], [queues[r] for r in rows],
                                               lows[rows], highs[rows])
        return added

    def add_direct(self, ids: list[str], queues: list[str], lows: np.ndarray, highs: np.ndarray) -> int:
        """`add_rows` for a dispatcher's direct call (each id is in the catalogue log already,
        with these rows): remembered, so the catalogue tail skips it without parsing."""
        self._remember_direct(ids)
        return self.add_rows(ids, queues, lows, highs)

    def add_direct_one(self, sub_id: str, queue: str, lows: Sequence[float], highs: Sequence[float]) -> int:
        """`add_direct` of one subscription."""
        self._remember_direct((sub_id,))
        return self.add(sub_id, queue, lows, highs)

    def _remember_direct(self, ids: Iterable[str]) -> None:
        if len(self._direct) > DIRECT_MAX:  # the tail is far behind (or stopped): forget, it parses
            self._direct.clear()
        self._direct.update(ids)

    def filed(self, sub_id: str) -> bool:
        """Whether the tail can skip the catalogue's add of `sub_id` unparsed: a direct call
        gave it to these sets already (forgotten here, as each add is logged once), or it is
        removed. Adds are idempotent: skipping one of these changes nothing."""
        if sub_id in self._direct:
            self._direct.discard(sub_id)
            return True
        return sub_id in self._tombstones

    def carry_removals(self, old: "SubscriptionSets") -> None:
        """Keep `old`'s record of removed ids: an id removed before a reload stays removed, even
        when the rows loaded after it are older than its removal."""
        self._tombstones = dict(old._tombstones)  # noqa: SLF001 (another instance of this class)

    def remove(self, sub_id: str, now: float | None = None) -> int:
        self._bury((sub_id,), time.monotonic() if now is None else now)
        return sum(s.remove(sub_id) for s in self.sets)

    def remove_many(self, sub_ids: Sequence[str], now: float | None = None) -> int:
        """`remove` for a run of ids: each set drops them in one call, repacked at most once."""
        self._bury(sub_ids, time.monotonic() if now is None else now)
        return sum(s.remove_many(sub_ids) for s in self.sets)

    def _bury(self, sub_ids: Iterable[str], now: float) -> None:
        """Tombstones for `sub_ids`, kept in the order they were made (oldest first). Past
        TOMBSTONES_CHECKED, those older than the TTL are forgotten from the front: each is
        looked at once, so a long run of removals costs no scan of them all per removal."""
        stones = self._tombstones
        for sub_id in sub_ids:
            stones.pop(sub_id, None)  # to the back: the order stays the order of the times
            stones[sub_id] = now
        if len(stones) > TOMBSTONES_CHECKED:
            cutoff = now - self._tombstone_ttl_s
            old = list(itertools.takewhile(lambda kv: kv[1] < cutoff, stones.items()))
            for sub_id, _ in old:
                del stones[sub_id]

    def owns(self, dim: int, value: float) -> bool:
        seg = self.segments.get(dim)
        return seg is not None and seg[0] <= value < seg[1]

    def owns_all(self, dim: int, values: np.ndarray) -> bool:
        """`owns` for every value at once (NaN is owned by no one)."""
        seg = self.segments.get(dim)
        return seg is not None and bool(((values >= seg[0]) & (values < seg[1])).all())

    def counts(self) -> list[int]:
        return [len(s) for s in self.sets]


def rows_from_catalogue(raws: list[str], space: Space) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """Catalogue JSON texts (validated when stored) to ids, queues and clipped bound arrays.

    One `json.loads` of the joined texts, and one scatter of every range into arrays that
    start as the whole space: about 4x faster than building subscriptions one by one. A
    filter in other terms (bounds, equals) is built as a subscription, its one box taken."""
    data = json.loads("[" + ",".join(raws) + "]")
    for d in data:
        if not all(isinstance(v, list) for v in d["predicates"].values()):
            d["predicates"] = Subscription.from_json(d, space).predicates_as_ranges(space)
    index = {name: i for i, name in enumerate(space.names)}
    mins = np.array([d.min for d in space.dimensions], dtype=np.float64)
    maxs = np.array([d.max for d in space.dimensions], dtype=np.float64)
    rows, cols, los, his = [], [], [], []
    for r, d in enumerate(data):
        for name, (a, b) in d["predicates"].items():
            rows.append(r)
            cols.append(index[name])
            los.append(a)
            his.append(b)
    n = len(data)
    lows, highs = np.tile(mins, (n, 1)), np.tile(maxs, (n, 1))
    lows[rows, cols], highs[rows, cols] = los, his
    return [d["id"] for d in data], [d["queue"] for d in data], np.maximum(lows, mins), np.minimum(highs, maxs)
