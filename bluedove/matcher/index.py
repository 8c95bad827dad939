"""One subscription set: an R-tree over all k dimensions, live insert/delete and bulk load, exact for [low, high)."""

# Ranges are half-open, `[low, high)`, while the R-tree's boxes are closed; a box is stored as
# `[low, nextafter(high, -inf)]`, which holds exactly the doubles v with `low <= v < high`,
# so the index answers exactly with no post-filter. Ids are opaque strings to the caller;
# internal ids are ints that are never reused, so an answer computed while a subscription is
# removed can be mapped without confusing it with a newer one.
#
# Two trees: most boxes sit in a static STR-packed tree queried in compiled code
# (bluedove/matcher/packed.py, ~9x faster per point than libspatialindex on the `sparse` workload);
# boxes added since it was packed go to a libspatialindex R*-tree, which takes live inserts
# and deletes. A box removed from the packed tree is masked there. When the R*-tree grows
# past a share of the set, everything is packed again (~70 ms for 92,000 boxes): subscriptions
# added one at a time cost ~38 µs each on average, packs included. When the masked boxes do,
# the packed tree is compacted instead: the live boxes kept in their order, no sort (~1 ms for
# 12,000), so a deleted queue's thousands of removals never wait on a pack.

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping, Sequence

import numpy as np
from rtree import index as rtree_index

from bluedove.matcher.filter_book import FilterBook, refine
from bluedove.matcher.matches import Directory, Matches
from bluedove.matcher.packed import PackedTree

# add_many packs the whole set anew when it brings at least this many new subscriptions and
# at least as many as the set holds: loading 12,000 paper boxes takes ~25 ms instead of
# ~0.25 s of one-by-one R*-tree inserts (docs/benchmarks.md, "Kernel").
BULK_MIN = 256
# The set packs again once the R*-tree of boxes added since the last pack holds more than
# max(DELTA_MIN, len(set) // DELTA_SHARE), and compacts its packed tree once that holds more
# than max(DELTA_MIN, len(packed) // 4) masked (removed) boxes. A bigger share makes packs
# rarer and queries slower: every point is also looked up in the R*-tree.
DELTA_MIN = 256
DELTA_SHARE = 32


@dataclass(frozen=True)
class PackThresholds:
    """When a set packs its boxes again (the defaults above; tests pass small ones so that packs
    happen mid-sequence)."""

    bulk_min: int = BULK_MIN
    delta_min: int = DELTA_MIN
    delta_share: int = DELTA_SHARE


DEFAULT_THRESHOLDS = PackThresholds()
# Node capacities of the R*-tree of recent boxes, measured on the paper workload
# (docs/benchmarks.md, "Kernel").
LEAF_CAPACITY = 32
INDEX_CAPACITY = 32
FILL_FACTOR = 0.95
# libspatialindex wants near_minimum_overlap_factor < both capacities (R*-tree inserts).
NEAR_MINIMUM_OVERLAP = 16
# libspatialindex stores a box whose every side spans at most DBL_EPSILON (absolute) as the
# point at its low corner (its C API's point test), so a point inside such a box but off that
# corner would miss it: a subscription of [0, 1e-20) on each dimension. Those boxes go straight
# into the packed tree, which compares exactly (a pack at each such add: they are rare).
_POINT_LIKE = float(np.finfo(np.float64).eps)
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
        self._tk = max(k, 2)  # libspatialindex needs >= 2 dimensions; a 1-d set pads with zeros
        self._order = np.arange(k, dtype=np.intp)  # tree dimension t -> caller's dimension order[t]
        self._packed: PackedTree | None = None  # the boxes at the last pack
        self._dead = 0  # removed boxes masked in the packed tree
        self._recent_index: rtree_index.Index | None = None  # `_recent`, made at its first box
        self._n_recent = 0
        self._next = 0
        self._by_id: dict[str, int] = {}  # subscription id -> internal int id
        self._boxes: dict[int, bytes] = {}  # internal id -> stored box (tree order, float64 bytes)
        self.sub_ids: dict[int, str] = {}  # internal id -> subscription id
        self.queues: dict[int, str] = {}  # internal id -> delivery queue
        self.directory = Directory()  # the same two as arrays, for turning matches into deliveries
        # The matcher's filters, for the entries that are a filter's boxes (set by its SubscriptionSets).
        self.book: FilterBook | None = None
        self._writes = 0  # adds and removes so far: `coverage` keeps its sorted bounds until it moves
        self._sorted_bounds: tuple[tuple[int, int], np.ndarray, np.ndarray] = ((-1, -1), np.empty(0), np.empty(0))

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
        box = _tree_boxes(np.asarray(lows, dtype=np.float64)[None, :], np.asarray(highs, dtype=np.float64)[None, :],
                          self._order, self._tk)[0]
        iid = self._next
        self._next += 1
        self._remember(iid, sub_id, queue, box.tobytes())
        if _point_like(box[None, :], self._tk)[0]:
            self._pack()
            return True
        self._recent.insert(iid, box.tolist())
        self._n_recent += 1
        self._pack_if_due()
        return True

    def add_many(self, sub_ids: Sequence[str], queues: Sequence[str], lows: np.ndarray, highs: np.ndarray) -> int:
        """Insert many subscriptions (rows of lows/highs); skips ones already here, repeated
        ids (the first wins) and empty boxes, as `add` does. Returns how many were added."""
        lows = np.asarray(lows, dtype=np.float64).reshape(-1, self.k)
        highs = np.asarray(highs, dtype=np.float64).reshape(-1, self.k)
        if not len(sub_ids) == len(queues) == len(lows) == len(highs):
            raise ValueError("add_many: sub_ids, queues, lows and highs need one entry per subscription")
        ok = np.all(lows < highs, axis=1)
        seen, fresh = self._by_id, set()
        keep = []
        for row, (sid, good) in enumerate(zip(sub_ids, ok.tolist())):
            if good and sid not in seen and sid not in fresh:
                fresh.add(sid)
                keep.append(row)
        if not keep:
            return 0
        rows = np.array(keep, dtype=np.intp)
        boxes = _tree_boxes(lows[rows], highs[rows], self._order, self._tk)
        n = len(rows)
        iids = range(self._next, self._next + n)
        self._next += n
        sids = [sub_ids[r] for r in keep]
        blob, width = boxes.tobytes(), boxes.shape[1] * 8
        self._by_id.update(zip(sids, iids))
        self.sub_ids.update(zip(iids, sids))
        qs = [queues[r] for r in keep]
        self._writes += 1
        self.queues.update(zip(iids, qs))
        self.directory.put(iids.start, sids, qs)
        self._boxes.update(zip(iids, (blob[j:j + width] for j in range(0, n * width, width))))
        if (n >= self.thresholds.bulk_min and n >= len(self) - n) or _point_like(boxes, self._tk).any():
            self._pack()  # a fresh STR-packed tree over everything, old and new
        else:
            insert = self._recent.insert
            for iid, box in zip(iids, boxes.tolist()):
                insert(iid, box)
            self._n_recent += n
            self._pack_if_due()
        return n

    def remove(self, sub_id: str) -> bool:
        iid = self._by_id.pop(sub_id, None)
        if iid is None:
            return False
        self._drop(iid, self._packed is not None and self._packed.kill(iid))
        self._writes += 1
        self._pack_if_due()
        return True

    def _drop(self, iid: int, masked: bool) -> None:
        """Forget entry `iid`, `masked` in the packed tree already or else in the recent one."""
        box = self._boxes.pop(iid)
        if masked:
            self._dead += 1
        else:
            self._recent.delete(iid, np.frombuffer(box, dtype=np.float64).tolist())
            self._n_recent -= 1
        del self.sub_ids[iid], self.queues[iid]
        self.directory.drop(iid)

    def remove_many(self, sub_ids: Iterable[str]) -> int:
        """`remove` for many at once (a run of a deleted queue's removals): the packed tree masks
        them in one vectorised step and the set is repacked at most once, at the end, rather
        than each time a removal crosses the threshold. Returns how many were here."""
        iids = [iid for sid in sub_ids if (iid := self._by_id.pop(sid, None)) is not None]
        if not iids:
            return 0
        packed = (self._packed.kill_many(np.array(iids, dtype=np.int64)).tolist() if self._packed is not None
                  else [False] * len(iids))
        for iid, masked in zip(iids, packed):
            self._drop(iid, masked)
        self._writes += 1
        self._pack_if_due()
        return len(iids)

    # -- reads -----------------------------------------------------------------------------
    def match_ids(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Internal ids matching each point, in one vectorised call: (ids, counts per point)."""
        points = np.asarray(points, dtype=np.float64).reshape(-1, self.k)
        if len(self._by_id) == 0 or len(points) == 0:
            return np.empty(0, dtype=np.int64), np.zeros(len(points), dtype=np.int64)
        m = len(points)
        if self.k == 1:
            pts = np.zeros((m, 2))
            pts[:, 0] = points[:, 0]
        else:
            pts = points[:, self._order]  # fancy indexing: a fresh C-contiguous copy in tree order
        if self._packed is not None:
            at, ids = self._packed.query(pts)
        else:
            at, ids = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        if self._n_recent:
            more, per = self._recent.intersection_v(pts, pts)  # type: ignore[no-untyped-call]  # rtree: unannotated
            if len(more):
                at = np.concatenate([at, np.repeat(np.arange(m, dtype=np.int64), per.astype(np.int64))])
                ids = np.concatenate([ids, more.astype(np.int64, copy=False)])
                by_point = np.argsort(at, kind="stable")
                at, ids = at[by_point], ids[by_point]
        return ids, np.bincount(at, minlength=m).astype(np.int64, copy=False)

    def match_batch(self, points: np.ndarray) -> list[Mapping[str, list[str]]]:
        """For each point, {delivery queue: [subscription ids]} of every subscription it matches
        (NO_MATCH, shared and read-only, when there is none)."""
        return self.matches(points).as_dicts(NO_MATCH)

    def matches(self, points: np.ndarray, deliveries: bool = True) -> Matches:
        """What each point matches, as arrays (bluedove/matcher/matches.py): counts, deliveries, and
        (unless `deliveries` is False) each delivery's subscription ids. A filter is checked
        with the point as its message's attributes (a space of numbers: the Match call, tools)."""
        ids, counts = self.match_ids(points)
        book = self.book
        if book is not None and self.directory.n_checked:
            pts = np.asarray(points, dtype=np.float64).reshape(-1, self.k)
            names = book.space.names
            ids, counts = refine(self.directory, book, ids, counts, lambda p: dict(zip(names, pts[p].tolist())))
        return self.directory.matches(ids, counts, deliveries=deliveries)

    def coverage(self, dim: int, values: Sequence[float]) -> list[int]:
        """For each value, how many subscriptions' ranges on `dim` hold it (low <= v < high).
        The sorted bounds are kept until the set changes (a matcher asks every 2 s)."""
        n = len(self._boxes)
        if not n or not len(values):
            return [0] * len(values)
        key = (self._writes, dim)
        if self._sorted_bounds[0] != key:
            boxes = np.frombuffer(b"".join(self._boxes.values()), dtype=np.float64).reshape(n, 2 * self._tk)
            col = int(np.flatnonzero(self._order == dim)[0]) if self.k >= 2 else 0
            # nextafter(high, -inf) is stored: v <= it means v < high
            self._sorted_bounds = (key, np.sort(boxes[:, col]), np.sort(boxes[:, self._tk + col]))
        _, lows, highs = self._sorted_bounds
        v = np.asarray(values, dtype=np.float64)
        # lows <= v, minus highs < v (ranges that ended before v; lows <= highs)
        counts: list[int] = (np.searchsorted(lows, v, side="right") - np.searchsorted(highs, v, side="left")).tolist()
        return counts

    def export(self, dim: int, low: float, high: float) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
        """The subscriptions whose range on `dim` overlaps [low, high): (ids, queues, lows,
        highs) in the caller's dimension order, as `add_many` takes them (a hand-off)."""
        n = len(self._boxes)
        if n == 0:
            return [], [], np.empty((0, self.k)), np.empty((0, self.k))
        iids = np.fromiter(self._boxes.keys(), dtype=np.int64, count=n)
        boxes = np.frombuffer(b"".join(self._boxes.values()), dtype=np.float64).reshape(n, 2 * self._tk)
        order = self._order
        mins, maxs = np.empty((n, self.k)), np.empty((n, self.k))
        if self.k == 1:
            mins[:, 0], maxs[:, 0] = boxes[:, 0], boxes[:, self._tk]
        else:
            mins[:, order], maxs[:, order] = boxes[:, :self.k], boxes[:, self._tk:self._tk + self.k]
        highs = np.nextafter(maxs, np.inf)  # undo the half-open encoding
        mask = (mins[:, dim] < high) & (highs[:, dim] > low)
        sel = iids[mask].tolist()
        return [self.sub_ids[i] for i in sel], [self.queues[i] for i in sel], mins[mask], highs[mask]

    # -- internals -------------------------------------------------------------------------
    def _props(self) -> rtree_index.Property:
        prop = rtree_index.Property(dimension=self._tk)
        prop.leaf_capacity = LEAF_CAPACITY
        prop.index_capacity = INDEX_CAPACITY
        prop.near_minimum_overlap_factor = NEAR_MINIMUM_OVERLAP
        prop.fill_factor = FILL_FACTOR
        return prop

    @property
    def _recent(self) -> rtree_index.Index:
        """The R*-tree of the boxes added since the last pack, made at its first box: an empty
        one costs ~15 KiB in libspatialindex, and a matcher holds a set per dimension of every
        space it serves, idle ones too."""
        if self._recent_index is None:
            self._recent_index = self._new_index()
        return self._recent_index

    def _new_index(self) -> rtree_index.Index:
        return rtree_index.Index(properties=self._props())

    def _pack_if_due(self) -> None:
        packed = len(self._packed) if self._packed is not None else 0
        t = self.thresholds
        if self._n_recent > max(t.delta_min, len(self) // t.delta_share):
            self._pack()
        elif self._dead > max(t.delta_min, packed // 4):
            self._compact()

    def _compact(self) -> None:
        """The packed tree without its masked boxes, in the order it had (no sort, no new
        dimension order): a run of removals (a deleted queue's) repacks in ~1 ms instead of
        ~8 ms each time a quarter of the tree is masked."""
        assert self._packed is not None, "boxes are masked only in a packed tree"
        self._packed = self._packed.compacted() if len(self._packed) > self._dead else None
        self._dead = 0

    def _pack(self) -> None:
        """Every live box into a fresh STR-packed tree, in a fresh dimension order; the R*-tree
        of recent boxes starts empty."""
        n, tk, k = len(self._boxes), self._tk, self.k
        ids = np.fromiter(self._boxes.keys(), dtype=np.int64, count=n)
        boxes = np.frombuffer(b"".join(self._boxes.values()), dtype=np.float64).reshape(n, 2 * tk)
        order = self._order
        if k >= 2 and n:  # back to the caller's order, then into the new one
            mins, maxs = np.empty((n, k)), np.empty((n, k))
            mins[:, order], maxs[:, order] = boxes[:, :k], boxes[:, k:]
            order = dimension_order(mins, maxs)
            boxes = np.hstack([mins[:, order], maxs[:, order]])
            blob, width = boxes.tobytes(), 2 * tk * 8
            self._boxes = dict(zip(ids.tolist(), (blob[j:j + width] for j in range(0, n * width, width))))
        self._order = order
        self._packed = PackedTree(ids, boxes[:, :tk], boxes[:, tk:]) if n else None
        self._dead = 0
        self._recent_index = None
        self._n_recent = 0

    def _remember(self, iid: int, sub_id: str, queue: str, box: bytes) -> None:
        self._by_id[sub_id] = iid
        self._boxes[iid] = box
        self.sub_ids[iid] = sub_id
        self.queues[iid] = queue
        self.directory.put(iid, [sub_id], [queue])
        self._writes += 1


def _point_like(boxes: np.ndarray, tk: int) -> np.ndarray:
    """Rows of tree boxes libspatialindex would keep as a point (every side within DBL_EPSILON)."""
    flags: np.ndarray = np.all(np.abs(boxes[:, tk:] - boxes[:, :tk]) <= _POINT_LIKE, axis=1)
    return flags


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
    finite range of the data first."""
    finite = np.abs(np.concatenate([mins.ravel(), maxs.ravel()])) < 1e300  # nextafter(inf) is finite
    vals = np.concatenate([mins.ravel(), maxs.ravel()])[finite]
    lo, hi = (vals.min(), vals.max()) if len(vals) else (0.0, 0.0)
    a, b = np.clip(mins, lo, hi), np.clip(maxs, lo, hi)
    spread = ((a + b) / 2).std(axis=0)
    width = np.median(b - a, axis=0)
    score = spread / np.maximum(width, 1e-12 * max(hi - lo, 1.0))
    return np.argsort(-score, kind="stable").astype(np.intp)
