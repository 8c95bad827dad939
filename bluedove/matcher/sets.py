"""The matcher's subscription sets, one per dimension, kept in step with the catalogue.

Subscriptions arrive two ways: directly from dispatchers (fast path, so a subscription is
live when the API answers) and from the catalogue log the matcher tails (so nothing is
missed when a direct call fails). Both are idempotent. A removed id is remembered for a
while (a tombstone), so a late direct add cannot bring it back. A subscription with a filter
is a row per box (keyed `<id>#<i>`), its filter in the matcher's book
(bluedove/matcher/filter_book.py).

A subscription whose filter changed (PUT /v1/subscriptions/{id}) is replaced in one step:
its rows out, the new version's rows in (`replace_many`). Each version is its catalogue log
entry's id; the newest applied wins, whichever way it came (a dispatcher's call ahead of
the tail, or the tail), and a replaced id is remembered a while, like a tombstone, so that a
late add of its first version cannot come back.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from bluedove.core.filters import BOX_SEP, box_key, sub_of
from bluedove.core.model import Subscription, only_ranges
from bluedove.core.partition.modes import MPARTITION, held
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import Space
from bluedove.matcher.filter_book import FilterBook
from bluedove.matcher.index import SubscriptionSet
from bluedove.store.keys import newer
from bluedove.v1 import matcher_pb2 as pb

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
        self.book = FilterBook(table.space)  # shared with the sets that replace these (carry_removals)
        for s in self.sets:
            s.book = self.book
        self._boxes: dict[str, int] = {}  # a subscription held as several rows -> how many
        self._tombstones: dict[str, float] = {}
        self._tombstone_ttl_s = tombstone_ttl_s
        self._replaced: dict[str, float] = {}  # ids replaced, as tombstones are kept: their adds are old
        # Versions (log entry ids) a dispatcher's call applied before the catalogue tail read them.
        self._ahead: dict[str, str] = {}
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
        """Add one row: a plain subscription, or (`sub_id` a box key) one box of a filter."""
        if sub_of(sub_id) in self._tombstones:
            return 0
        self._count_boxes((sub_id,))
        return sum(self.sets[i].add(sub_id, queue, lows, highs) for i in self.dims_for(lows, highs))

    def add_subscription(self, sub: Subscription) -> int:
        return self.add_many([sub])

    def add_many(self, subs: list[Subscription]) -> int:
        """`add` for many at once (a catalogue load): each set takes its rows in one bulk call;
        a filter's rows are its boxes, its filter learnt by the book."""
        rows = [(key, s.queue, lows, highs) for s in subs for key, lows, highs in s.rows()]
        if not rows:
            return 0
        for s in subs:
            self.book.learn(s)
        return self.add_rows([r[0] for r in rows], [r[1] for r in rows],
                             np.array([r[2] for r in rows], dtype=np.float64),
                             np.array([r[3] for r in rows], dtype=np.float64))

    def add_catalogue(self, raws: Sequence[str | bytes]) -> int:
        """Add the catalogue's JSON texts (validated when stored): `rows_from_catalogue`."""
        return self.add_rows(*rows_from_catalogue(raws, self.table.space, self.book))

    def add_rows(self, ids: list[str], queues: list[str], lows: np.ndarray, highs: np.ndarray,
                 dims: set[int] | None = None) -> int:
        """`add_many` from arrays: row j is subscription ids[j] of queues[j]; only into the
        sets of `dims` if given."""
        self._count_boxes(ids)
        live = np.array([sub_of(i) not in self._tombstones for i in ids], dtype=bool) if self._tombstones else True
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
        with these rows): remembered, so the catalogue tail skips it without parsing. One row
        (a single subscribe's) is one live insert a set: a bulk insert's arrays cost more."""
        if len(ids) == 1:
            return self.add_direct_one(ids[0], queues[0], tuple(lows[0].tolist()), tuple(highs[0].tolist()))
        self._remember_direct(ids)
        return self.add_rows(ids, queues, lows, highs)

    def add_direct_one(self, sub_id: str, queue: str, lows: Sequence[float], highs: Sequence[float]) -> int:
        """`add_direct` of one subscription."""
        self._remember_direct((sub_id,))
        return self.add(sub_id, queue, lows, highs)

    def add_direct_batch(self, batch: list[pb.Subscription], columns: pb.Boxes | None = None) -> int:
        """A dispatcher's direct call: one box each, or a filter's predicates (its boxes added,
        its filter learnt), and more boxes in `columns`. A batch goes into each set in one bulk
        insert, as at a catalogue load, rather than one tree insert per subscription."""
        changed = self._add_columns(columns) if columns is not None and columns.ids else 0
        if not batch:
            return changed
        if self._replaced:  # a late call of a first version: the sets hold a newer one
            batch = [s for s in batch if s.id not in self._replaced]
        boxes = [s for s in batch if not s.predicates]
        filtered = [Subscription.from_json({"id": s.id, "queue": s.queue, "predicates": json.loads(s.predicates)},
                                           self.table.space) for s in batch if s.predicates]
        self._remember_direct(s.id for s in filtered)
        changed += self.add_many(filtered)
        if boxes:
            changed += self.add_direct([s.id for s in boxes], [s.queue for s in boxes],
                                       np.array([list(s.lows) for s in boxes], dtype=np.float64),
                                       np.array([list(s.highs) for s in boxes], dtype=np.float64))
        return changed

    def _add_columns(self, columns: pb.Boxes) -> int:
        """`add_direct` of the boxes of a batch's columns (ValueError when they do not hold a
        row of the space's dimensions per id)."""
        ids, queues, k = list(columns.ids), list(columns.queues), self.table.space.k
        if len(queues) != len(ids) or len(columns.lows) != len(columns.highs) or len(columns.lows) != 8 * k * len(ids):
            raise ValueError(f"a batch's boxes hold {len(ids)} ids, {len(queues)} queues, {len(columns.lows)} "
                             f"and {len(columns.highs)} bytes of bounds; {k} float64 a row each")
        lows = np.frombuffer(columns.lows, dtype="<f8").reshape(len(ids), k)
        highs = np.frombuffer(columns.highs, dtype="<f8").reshape(len(ids), k)
        if self._replaced:  # a late call of a first version: the sets hold a newer one
            keep = [j for j, i in enumerate(ids) if i not in self._replaced]
            ids, queues, lows, highs = [ids[j] for j in keep], [queues[j] for j in keep], lows[keep], highs[keep]
        return self.add_direct(ids, queues, lows, highs) if ids else 0

    def _count_boxes(self, keys: Sequence[str]) -> None:
        """Remember how many rows each filter's subscription has (the keys `<id>#<i>`)."""
        if any(BOX_SEP in k for k in keys):
            for k in keys:
                if BOX_SEP in k:
                    sub_id, i = k.rsplit(BOX_SEP, 1)
                    self._boxes[sub_id] = max(self._boxes.get(sub_id, 0), int(i) + 1)

    def _keys(self, sub_ids: Iterable[str]) -> list[str]:
        """The row keys of subscriptions `sub_ids`: the id, and a filter's box keys."""
        out = []
        for sub_id in sub_ids:
            out.append(sub_id)
            n = self._boxes.pop(sub_id, 0)
            out += [box_key(sub_id, i) for i in range(n)]
        return out

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
        return sub_id in self._tombstones or sub_id in self._replaced

    def carry_removals(self, old: "SubscriptionSets", book: bool = True) -> None:
        """Keep `old`'s record of removed and replaced ids: an id removed before a reload stays
        removed, even when the rows loaded after it are older than its removal. `book`: share
        `old`'s filters too (sets filled with rows of `old`'s; sets filled from the catalogue
        alone learn every filter they hold, and must not change those `old` checks meanwhile)."""
        self._tombstones = dict(old._tombstones)  # noqa: SLF001 (another instance of this class)
        self._replaced = dict(old._replaced)  # noqa: SLF001
        if book:
            self.book = old.book
            for s in self.sets:
                s.book = self.book

    def replace_many(self, subs: Sequence[tuple[Subscription, str]], direct: bool = False,
                     now: float | None = None) -> int:
        """New versions of subscriptions, each with its log entry id (its version): the rows of
        the version held are dropped and the new version's filed where its boxes overlap our
        segments, all in this one call, so that no batch of messages sees neither version or
        both; a filter's book entry changes with its rows. Skipped: a removed id, and a version
        no newer than one a dispatcher's call applied already. `direct`: such a call (the
        caller passes only versions the tail has not read yet): its version is remembered until
        the tail reads that entry, so that the tail's older changes of the id are skipped."""
        newest: dict[str, Subscription] = {}
        for sub, at in subs:
            if sub.id in self._tombstones:
                continue
            ahead = self._ahead.get(sub.id)
            if ahead is not None and not newer(at, ahead):
                if not direct and at == ahead:  # the tail has caught up with the call
                    del self._ahead[sub.id]
                continue
            if direct:
                self._ahead[sub.id] = at
            else:
                self._ahead.pop(sub.id, None)
            newest[sub.id] = sub
        if not newest:
            return 0
        _stamp(self._replaced, newest, time.monotonic() if now is None else now, self._tombstone_ttl_s)
        keys = self._keys(newest)
        self.book.forget(list(newest))
        dropped = sum(s.remove_many(keys) for s in self.sets)
        return dropped + self.add_many(list(newest.values()))

    def remove(self, sub_id: str, now: float | None = None) -> int:
        return self.remove_many((sub_id,), now)

    def remove_many(self, sub_ids: Sequence[str], now: float | None = None) -> int:
        """`remove` for a run of ids: each set drops them (a filter's every box) in one call,
        repacked at most once; the book forgets their filters."""
        self._bury(sub_ids, time.monotonic() if now is None else now)
        if self._ahead:
            for sub_id in sub_ids:
                self._ahead.pop(sub_id, None)
        keys = self._keys(sub_ids)
        self.book.forget(sub_ids)
        return sum(s.remove_many(keys) for s in self.sets)

    def _bury(self, sub_ids: Iterable[str], now: float) -> None:
        """Tombstones for `sub_ids` (`_stamp`)."""
        _stamp(self._tombstones, sub_ids, now, self._tombstone_ttl_s)

    def owns(self, dim: int, value: float) -> bool:
        seg = self.segments.get(dim)
        return seg is not None and seg[0] <= value < seg[1]

    def owns_all(self, dim: int, values: np.ndarray) -> bool:
        """`owns` for every value at once (NaN is owned by no one)."""
        seg = self.segments.get(dim)
        return seg is not None and bool(((values >= seg[0]) & (values < seg[1])).all())

    def counts(self) -> list[int]:
        return [len(s) for s in self.sets]


def _stamp(stones: dict[str, float], sub_ids: Iterable[str], now: float, ttl_s: float) -> None:
    """`sub_ids` stamped `now` in `stones`, kept in the order they were stamped (oldest first).
    Past TOMBSTONES_CHECKED, those older than `ttl_s` are forgotten from the front: each is
    looked at once, so a long run of removals costs no scan of them all per removal."""
    for sub_id in sub_ids:
        stones.pop(sub_id, None)  # to the back: the order stays the order of the times
        stones[sub_id] = now
    if len(stones) > TOMBSTONES_CHECKED:
        cutoff = now - ttl_s
        old = list(itertools.takewhile(lambda kv: kv[1] < cutoff, stones.items()))
        for sub_id, _ in old:
            del stones[sub_id]


def subscription_of(msg: pb.Subscription, space: Space) -> Subscription:
    """A dispatcher's message as a subscription: a filter's from its predicates, else its one box."""
    if msg.predicates:
        return Subscription.from_json({"id": msg.id, "queue": msg.queue, "predicates": json.loads(msg.predicates)},
                                      space)
    return Subscription(msg.id, msg.queue, {}, tuple(msg.lows), tuple(msg.highs))


def rows_from_catalogue(raws: Sequence[str | bytes], space: Space, book: FilterBook | None = None
                        ) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """Catalogue JSON texts (validated when stored) to row keys, queues and clipped bound arrays.

    One `json.loads` of the joined texts, and one scatter of every range into arrays that
    start as the whole space: about 4x faster than building subscriptions one by one. A
    filter in other terms is built as a subscription: one box, or a row per box with its
    filter learnt by `book`."""
    texts = [r.decode() if isinstance(r, bytes) else r for r in raws]  # (the log's tail reads bytes)
    data = json.loads("[" + ",".join(texts) + "]")
    boxed: list[Subscription] = []
    plain = []
    for d in data:
        if only_ranges(d["predicates"]):
            plain.append(d)
            continue
        sub = Subscription.from_json(d, space)
        if sub.filter is None or sub.void:
            d["predicates"] = sub.predicates_as_ranges(space)
            plain.append(d)
        else:
            boxed.append(sub)
    ids, queues, lows, highs = _scatter(plain, space)
    if not boxed:
        return ids, queues, lows, highs
    if book is not None:
        for sub in boxed:
            book.learn(sub)
    rows = [(key, sub.queue, lo, hi) for sub in boxed for key, lo, hi in sub.rows()]
    return (ids + [r[0] for r in rows], queues + [r[1] for r in rows],
            np.vstack([lows, np.array([r[2] for r in rows])]), np.vstack([highs, np.array([r[3] for r in rows])]))


def _scatter(data: list[dict[str, Any]], space: Space) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
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
