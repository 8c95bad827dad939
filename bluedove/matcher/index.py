"""One subscription set: R-trees over all k dimensions, live insert/delete and bulk load, exact for [low, high)."""

# Ranges are half-open, `[low, high)`, while the trees' boxes are closed; a box is stored as
# `[low, nextafter(high, -inf)]`, which holds exactly the doubles v with `low <= v < high`,
# so the index answers exactly with no post-filter. Ids are opaque strings to the caller;
# internal ids are ints that are never reused, so an answer computed while a subscription is
# removed can be mapped without confusing it with a newer one.
#
# The boxes sit in static STR-packed trees queried in compiled code (bluedove/matcher/packed.py,
# ~9x faster per point than libspatialindex on the `sparse` workload): a bulk load packs them
# into one; boxes added later go to a buffer and from there into smaller trees, merged as they
# grow (bluedove/matcher/levels.py). A removed box is masked where it is. When the merges reach
# the biggest tree, the whole set is packed anew (~70 ms for 92,000 boxes) in a fresh dimension
# order; when a tree's masked boxes pass a quarter of it, it is compacted instead: its live
# boxes kept in their order, no sort (~1 ms for 12,000), so a deleted queue's thousands of
# removals never wait on a pack.

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from bluedove.matcher.filter_book import FilterBook
from bluedove.matcher.group_match import count_groups, match_groups
from bluedove.matcher.groups import Groups
from bluedove.matcher.levels import Levels
from bluedove.matcher.matches import Directory, Matches

# add_many packs the whole set anew when it brings at least this many new subscriptions and
# at least as many as the set holds (a bulk load: one tree, rather than buffers packed and
# merged on the way; 12,000 paper boxes in ~25 ms).
BULK_MIN = 256
# Boxes added one by one wait in a buffer, read whole by every query, until it holds more than
# DELTA_MIN; it is then packed into a tree of its own, and trees are merged while the next
# bigger one holds at most RATIO times as many (bluedove/matcher/levels.py). A tree is
# compacted once it holds more than max(DELTA_MIN, len(tree) // 4) masked (removed) boxes.
DELTA_MIN = 256
RATIO = 4
# Queries pack the set anew once they have looked at this many nodes and boxes outside its
# biggest tree per live box since the last pack: what a pack costs (~0.6 µs a box, ~16 ns a
# look, `paper`, 2026-11-28), so matching never pays much more for the levels than one pack.
REPACK_LOOKS = 40
# A pack of the whole set chooses its dimension order from this many of its boxes at most.
ORDER_SAMPLE = 4096


@dataclass(frozen=True)
class PackThresholds:
    """When a set packs its boxes again (the defaults above; tests pass small ones so that packs
    happen mid-sequence)."""

    bulk_min: int = BULK_MIN
    delta_min: int = DELTA_MIN
    ratio: int = RATIO
    repack_looks: float = REPACK_LOOKS


DEFAULT_THRESHOLDS = PackThresholds()
# What match_batch gives a point that matches nothing.
NO_MATCH: Mapping[str, list[str]] = MappingProxyType({})


class SubscriptionSet:
    """Subscriptions as boxes. The trees' dimension order is internal: each pack puts the
    dimensions that separate boxes best first, where the STR packer cuts them most finely.
    Not thread-safe: a matcher makes every call from its one index thread."""

    def __init__(self, k: int, thresholds: PackThresholds = DEFAULT_THRESHOLDS) -> None:
        if k < 1:
            raise ValueError(f"a subscription set needs k >= 1 dimensions, got {k}")
        self.k = k
        self.thresholds = thresholds
        self._tk = max(k, 2)  # a 1-d set pads its boxes and points with a second dimension of zeros
        self._order = np.arange(k, dtype=np.intp)  # tree dimension t -> caller's dimension order[t]
        self._levels = Levels(self._tk, thresholds.delta_min, thresholds.ratio, thresholds.repack_looks)
        self._next = 0
        self._by_id: dict[str, int] = {}  # subscription id -> internal int id
        self.sub_ids: dict[int, str] = {}  # internal id -> subscription id
        self.queues: dict[int, str] = {}  # internal id -> delivery queue
        self.directory = Directory()  # the same two as arrays, for turning matches into deliveries
        self.groups = Groups()  # equal boxes, held once in the trees (bluedove/matcher/groups.py)
        # The matcher's filters, for the entries that are a filter's boxes (set by its SubscriptionSets).
        self.book: FilterBook | None = None
        self._writes = 0  # adds and removes so far: `coverage` keeps its sorted bounds until it moves
        self._sorted_bounds: tuple[tuple[int, int], np.ndarray, np.ndarray] = ((-1, -1), np.empty(0), np.empty(0))
        self._all: tuple[int, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None  # `_live_boxes`, by `_writes`

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, sub_id: str) -> bool:
        return sub_id in self._by_id

    def ids(self) -> list[str]:
        return list(self._by_id)

    # -- writes ----------------------------------------------------------------------------
    def add(self, sub_id: str, queue: str, lows: Sequence[float], highs: Sequence[float]) -> bool:
        """Insert a subscription; False (and no change) if it is there already or is empty."""
        if len(lows) != self.k or len(highs) != self.k:
            raise ValueError(f"add: expected {self.k} lows and highs, got {len(lows)} and {len(highs)}")
        if sub_id in self._by_id or not all(lo < hi for lo, hi in zip(lows, highs)):  # also refuses NaN bounds
            return False
        lo, hi = np.asarray(lows, dtype=np.float64)[None, :], np.asarray(highs, dtype=np.float64)[None, :]
        iid = self._next
        self._next += 1
        self._remember(iid, sub_id, queue)
        checked = bool(self.directory.checked[iid])
        g, new = self.groups.join(iid, lo.tobytes() + hi.tobytes() + self._tag(iid, checked), checked)
        if new and self._levels.append(np.array([g], dtype=np.int64), _tree_boxes(lo, hi, self._order, self._tk)):
            self._pack()
        return True

    def add_many(self, sub_ids: Sequence[str], queues: Sequence[str], lows: np.ndarray, highs: np.ndarray) -> int:
        """Insert many subscriptions (rows of lows/highs); skips ones already here, repeated
        ids (the first wins) and empty boxes, as `add` does. Returns how many were added."""
        lows = np.asarray(lows, dtype=np.float64).reshape(-1, self.k)
        highs = np.asarray(highs, dtype=np.float64).reshape(-1, self.k)
        if not len(sub_ids) == len(queues) == len(lows) == len(highs):
            raise ValueError("add_many: sub_ids, queues, lows and highs need one entry per subscription")
        ok = np.all(lows < highs, axis=1)
        keep = self._new_rows(sub_ids, ok)
        if not keep:
            return 0
        rows = np.array(keep, dtype=np.intp)
        n = len(rows)
        iids = range(self._next, self._next + n)
        self._next += n
        sids = [sub_ids[r] for r in keep]
        self._by_id.update(zip(sids, iids))
        self.sub_ids.update(zip(iids, sids))
        qs = [queues[r] for r in keep]
        self._writes += 1
        self.queues.update(zip(iids, qs))
        self.directory.put(iids.start, sids, qs)
        gids, new = self._file(iids.start, lows[rows], highs[rows])
        bulk = n >= self.thresholds.bulk_min and n >= len(self) - n
        if len(new):
            grew = self._levels.append(gids[new], _tree_boxes(lows[rows[new]], highs[rows[new]], self._order, self._tk),
                                       pack=not bulk)
            if grew or bulk:
                self._pack()  # a fresh STR-packed tree over everything, old and new
        return n

    def _file(self, first: int, lows: np.ndarray, highs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Entries first, … (in the directory already) into the groups of their boxes: `Groups.file`.
        A filter's box is grouped with the boxes of the same filter (its code in the book now),
        or alone when the book does not know it yet."""
        n = len(lows)
        checked = self.directory.checked[first:first + n].copy()
        raw = np.ascontiguousarray(np.hstack([lows, highs]), dtype=np.float64).view(f"V{16 * self.k}").ravel().tolist()
        if not checked.any():
            return self.groups.file(first, [r + b"p" for r in raw], checked)
        tags = [self._tag(first + j, c) for j, c in enumerate(checked.tolist())]
        return self.groups.file(first, [r + t for r, t in zip(raw, tags)], checked)

    def _tag(self, iid: int, checked: bool) -> bytes:
        """What the entries of a group are, after the box in its key: plain; boxes of the filter
        of this code in the book; or (the book does not know the filter) this entry alone."""
        if not checked:
            return b"p"
        book = self.book
        serial = book.serial_of(self.directory.sid[iid]) if book is not None else -1
        code = int(book.codes[serial]) if book is not None and serial >= 0 else -1
        return b"c%d" % code if code >= 0 else b"s%d" % iid

    def _new_rows(self, sub_ids: Sequence[str], ok: np.ndarray) -> list[int]:
        """The rows of `add_many` to add: boxes `ok`, ids not here yet, the first of a repeated id."""
        seen = self._by_id
        if ok.all() and seen.keys().isdisjoint(sub_ids) and len(set(sub_ids)) == len(sub_ids):
            return list(range(len(sub_ids)))  # (the usual batch, checked without a loop here)
        fresh: set[str] = set()
        keep = []
        for row, (sid, good) in enumerate(zip(sub_ids, ok.tolist())):
            if good and sid not in seen and sid not in fresh:
                fresh.add(sid)
                keep.append(row)
        return keep

    def remove(self, sub_id: str) -> bool:
        iid = self._by_id.pop(sub_id, None)
        if iid is None:
            return False
        g = self.groups.leave(iid)
        if g >= 0:
            found = self._levels.kill(g)
            assert found, f"entry {iid} of {sub_id!r} has no box"
        self._drop(iid)
        self._writes += 1
        self._compact_if_due()
        return True

    def _drop(self, iid: int) -> None:
        """Forget entry `iid` (its box is masked already)."""
        del self.sub_ids[iid], self.queues[iid]
        self.directory.drop(iid)

    def remove_many(self, sub_ids: Iterable[str]) -> int:
        """`remove` for many at once (a run of a deleted queue's removals): the trees mask them
        in one vectorised step and are compacted at most once, at the end, rather than each
        time a removal crosses the threshold. Returns how many were here."""
        iids = [iid for sid in sub_ids if (iid := self._by_id.pop(sid, None)) is not None]
        if not iids:
            return 0
        gone = self.groups.leave_many(np.array(iids, dtype=np.int64))
        if len(gone):
            found = self._levels.kill_many(gone)
            assert found == len(gone), f"{len(gone) - found} groups have no box"
        for iid in iids:
            self._drop(iid)
        self._writes += 1
        self._compact_if_due()
        return len(iids)

    # -- reads -----------------------------------------------------------------------------
    def match_ids(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Internal ids whose box holds each point, in one vectorised call: (ids, counts per
        point); a filter's boxes unchecked (`match` checks them)."""
        return self.groups.expand(*self._walk(points), self.directory.code)

    def match(self, points: np.ndarray, attributes: Callable[[int], dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        """The entries matched by each point, filters checked with `attributes(point)` (its
        message's attributes; bluedove/matcher/group_match.py): (ids, counts per point), a
        subscription once a point."""
        return match_groups(self.directory, self.groups, self.book, *self._walk(points), attributes)

    def count(self, points: np.ndarray, attributes: Callable[[int], dict[str, Any]]) -> Matches:
        """`match` counted alone: each point's matches and distinct queues (its deliveries)."""
        return count_groups(self.directory, self.groups, self.book, *self._walk(points), attributes)

    def _walk(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The groups whose box holds each point: (group ids, counts per point)."""
        points = np.asarray(points, dtype=np.float64).reshape(-1, self.k)
        if len(self._by_id) == 0 or len(points) == 0:
            return np.empty(0, dtype=np.int64), np.zeros(len(points), dtype=np.int64)
        m = len(points)
        if self.k == 1:
            pts = np.zeros((m, 2))
            pts[:, 0] = points[:, 0]
        else:
            pts = points[:, self._order]  # fancy indexing: a fresh C-contiguous copy in tree order
        at, ids = self._levels.query(pts)
        if self._levels.repack_due():
            self._pack()
        return ids, np.bincount(at, minlength=m).astype(np.int64, copy=False)

    def match_batch(self, points: np.ndarray) -> list[Mapping[str, list[str]]]:
        """For each point, {delivery queue: [subscription ids]} of every subscription it matches
        (NO_MATCH, shared and read-only, when there is none)."""
        return self.matches(points).as_dicts(NO_MATCH)

    def matches(self, points: np.ndarray, deliveries: bool = True) -> Matches:
        """What each point matches, as arrays (bluedove/matcher/matches.py): counts, deliveries, and
        (unless `deliveries` is False) each delivery's subscription ids. A filter is checked
        with the point as its message's attributes (a space of numbers: the Match call, tools)."""
        pts = np.asarray(points, dtype=np.float64).reshape(-1, self.k)
        names = self.book.space.names if self.book is not None else ()
        attributes = lambda p: dict(zip(names, pts[p].tolist()))  # noqa: E731
        if not deliveries:
            return self.count(pts, attributes)
        return self.directory.matches(*self.match(pts, attributes))

    def coverage(self, dim: int, values: Sequence[float]) -> list[int]:
        """For each value, how many subscriptions' ranges on `dim` hold it (low <= v < high).
        The sorted bounds are kept until the set changes (a matcher asks every 2 s)."""
        if not len(self) or not len(values):
            return [0] * len(values)
        key = (self._writes, dim)
        if self._sorted_bounds[0] != key:
            _, lo, hi = self._live_boxes()
            col = int(np.flatnonzero(self._order == dim)[0]) if self.k >= 2 else 0
            # nextafter(high, -inf) is stored: v <= it means v < high
            self._sorted_bounds = (key, np.sort(lo[:, col]), np.sort(hi[:, col]))
        _, lows, highs = self._sorted_bounds
        v = np.asarray(values, dtype=np.float64)
        # lows <= v, minus highs < v (ranges that ended before v; lows <= highs)
        counts: list[int] = (np.searchsorted(lows, v, side="right") - np.searchsorted(highs, v, side="left")).tolist()
        return counts

    def export(self, dim: int, low: float, high: float) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
        """The subscriptions whose range on `dim` overlaps [low, high): (ids, queues, lows,
        highs) in the caller's dimension order, as `add_many` takes them (a hand-off)."""
        if not len(self):
            return [], [], np.empty((0, self.k)), np.empty((0, self.k))
        iids, lo, hi = self._live_boxes()
        mins, maxs = self._caller_order(lo, hi)
        highs = np.nextafter(maxs, np.inf)  # undo the half-open encoding
        mask = (mins[:, dim] < high) & (highs[:, dim] > low)
        sel = iids[mask].tolist()
        return [self.sub_ids[i] for i in sel], [self.queues[i] for i in sel], mins[mask], highs[mask]

    # -- internals -------------------------------------------------------------------------
    def _live_boxes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every live entry's box (ids, lo, hi in tree order), kept until the set changes."""
        if self._all is None or self._all[0] != self._writes:
            gids, lo, hi = self._levels.boxes()
            iids, row = self.groups.members(gids)
            self._all = (self._writes, (iids, lo[row], hi[row]))
        return self._all[1]

    def _caller_order(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tree-order bounds back in the caller's dimension order: (mins, maxs)."""
        n, k = len(lo), self.k
        mins, maxs = np.empty((n, k)), np.empty((n, k))
        if k == 1:
            mins[:, 0], maxs[:, 0] = lo[:, 0], hi[:, 0]
        else:
            mins[:, self._order], maxs[:, self._order] = lo, hi
        return mins, maxs

    def _compact_if_due(self) -> None:
        if self._levels.compaction_due():
            self._compact()

    def _compact(self) -> None:
        """The trees past their share of masked boxes without them, in the order they had (no
        sort, no new dimension order): a run of removals (a deleted queue's) repacks in ~1 ms
        instead of ~8 ms each time a quarter of a tree is masked."""
        self._levels.compact()

    def _pack(self) -> None:
        """Every live box into one fresh STR-packed tree, in a fresh dimension order."""
        ids, lo, hi = self._levels.boxes()
        self._all = None
        if self.k >= 2 and len(ids):  # back to the caller's order, then into the new one
            mins, maxs = self._caller_order(lo, hi)
            self._order = dimension_order(mins, maxs)
            lo, hi = mins[:, self._order], maxs[:, self._order]
        self._levels.reset(ids, lo, hi)

    def _remember(self, iid: int, sub_id: str, queue: str) -> None:
        self._by_id[sub_id] = iid
        self.sub_ids[iid] = sub_id
        self.queues[iid] = queue
        self.directory.put(iid, [sub_id], [queue])
        self._writes += 1


def _tree_boxes(lows: np.ndarray, highs: np.ndarray, order: np.ndarray, tk: int) -> np.ndarray:
    """Rows `[mins..., maxs...]` in tree order; a max is nextafter(high, -inf) (half-open)."""
    if lows.shape[1] == 1:
        out = np.zeros((len(lows), 2 * tk))
        out[:, 0], out[:, tk] = lows[:, 0], np.nextafter(highs[:, 0], -np.inf)
        return out
    return np.hstack([lows[:, order], np.nextafter(highs[:, order], -np.inf)])


def dimension_order(mins: np.ndarray, maxs: np.ndarray) -> np.ndarray:
    """Dimensions by how well they separate the boxes, best first: spread of the centres over
    the median width. STR (Leutenegger et al. 1997, as libspatialindex implements it) cuts its
    first dimension into the most slices, so it should be the most selective one. In a set of
    mPartition (the paper's §III-A) every box overlaps the set's own segment along its dimension,
    which therefore comes last; a wildcard dimension too. Unbounded sides are clipped to the
    finite range of the data first. Scored on `ORDER_SAMPLE` of the boxes at most."""
    if len(mins) > ORDER_SAMPLE:  # evenly spaced rows: a set's pack costs ~0.2 µs a box less
        rows = np.linspace(0, len(mins) - 1, ORDER_SAMPLE).astype(np.intp)
        mins, maxs = mins[rows], maxs[rows]
    finite = np.abs(np.concatenate([mins.ravel(), maxs.ravel()])) < 1e300  # nextafter(inf) is finite
    vals = np.concatenate([mins.ravel(), maxs.ravel()])[finite]
    lo, hi = (vals.min(), vals.max()) if len(vals) else (0.0, 0.0)
    a, b = np.clip(mins, lo, hi), np.clip(maxs, lo, hi)
    spread = ((a + b) / 2).std(axis=0)
    width = np.median(b - a, axis=0)
    score = spread / np.maximum(width, 1e-12 * max(hi - lo, 1.0))
    return np.argsort(-score, kind="stable").astype(np.intp)
