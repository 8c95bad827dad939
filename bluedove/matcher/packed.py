"""A static R-tree packed by Sort-Tile-Recursive and queried for whole batches of points in
compiled code.

libspatialindex answers a point of the `sparse` workload in ~15 µs on a matcher's ~92,000
boxes: each node it visits is copied out of its storage manager and unpacked into freshly
allocated regions. The same STR-packed tree as flat arrays, walked by a numba-compiled loop,
answers in ~1.7 µs with the same answers (docs/benchmarks.md, "Kernel"). A tree is static: a
set's boxes are a few of them of growing size and a buffer of the latest boxes, which `scan`
reads whole (bluedove/matcher/levels.py).

Boxes are closed, `[lo, hi]` per dimension, as the caller stores them (a half-open `[low,
high)` arrives as `[low, nextafter(high, -inf)]`). A point with a NaN coordinate is inside
nothing.

Layout: the leaves are the boxes in STR order, `C` per leaf; above them, levels of nodes,
the root level first, each node's bounding box over its `C` children, which are contiguous
in the level below (node j's are j*C .. j*C+C-1), as STR builds them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from bluedove.core.jit import compiled

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]

# Children per node. 4, 8, 16 and 32 answer the `sparse` points within ~25 % of each other
# (1.7, 1.8, 2.2, 2.1 µs); 8 keeps the tree shallow and the stack small.
CAPACITY = 8
MIN_PER_POINT = 4.0  # room for answers a point a query starts with
_INDEX = (1 << 40) - 1  # a walk's stack entry: (level << 40) | index in the level
# Slabs of at most this many boxes are tiled in compiled code (see str_order).
_COMPILED_TILE = 2048
# |bound| above this counts as unbounded when the boxes are sorted (centres stay finite).
_BIG = np.finfo(np.float64).max / 4


class PackedTree:
    """The boxes `lo[i], hi[i]` (rows, one column per tree dimension), row i known as `ids[i]`.
    `kill(id)` masks a removed box without rebuilding."""

    def __init__(self, ids: np.ndarray, lo: np.ndarray, hi: np.ndarray, capacity: int = CAPACITY,
                 ordered: bool = False) -> None:
        """`ordered`: the boxes come in the order to keep (`compacted`'s), not to be sorted."""
        if capacity < 2:
            raise ValueError(f"a packed tree needs a capacity of at least 2, got {capacity}")
        lo = np.asarray(lo, dtype=np.float64)
        hi = np.asarray(hi, dtype=np.float64)
        perm = np.arange(len(lo), dtype=np.intp) if ordered else str_order(lo, hi, capacity)
        self.capacity = capacity
        self.per_point = MIN_PER_POINT  # room for answers a point in the next query (see `query`)
        self.ids = np.ascontiguousarray(np.asarray(ids, dtype=np.int64)[perm])
        self.lo = np.ascontiguousarray(lo[perm])
        self.hi = np.ascontiguousarray(hi[perm])
        self.alive = np.ones(len(perm), dtype=np.uint8)
        self.dead = 0  # boxes masked
        # the range of the ids: a set of several trees asks only those that may hold an id
        self.id_low, self.id_high = (int(self.ids.min()), int(self.ids.max())) if len(self.ids) else (0, -1)
        self._id_order: np.ndarray | None = None  # rows in id order, for kill
        levels_lo, levels_hi = [], []
        mn, mx = self.lo, self.hi
        while len(mn) > 1:
            starts = np.arange(0, len(mn), capacity)
            mn, mx = np.minimum.reduceat(mn, starts, axis=0), np.maximum.reduceat(mx, starts, axis=0)
            levels_lo.append(mn)
            levels_hi.append(mx)
        if not levels_lo and len(mn):  # one box: a root over it
            levels_lo, levels_hi = [mn], [mx]
        levels_lo.reverse()
        levels_hi.reverse()
        sizes = np.array([len(a) for a in levels_lo], dtype=np.int64)
        self.level_size = sizes
        self.level_start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        width = lo.shape[1] if lo.ndim == 2 else 0
        self.nodes_lo = np.ascontiguousarray(np.concatenate(levels_lo)) if levels_lo else np.empty((0, width))
        self.nodes_hi = np.ascontiguousarray(np.concatenate(levels_hi)) if levels_hi else np.empty((0, width))

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def live(self) -> int:
        return len(self.ids) - self.dead

    def kill(self, box_id: int) -> bool:
        """Mask the box known as `box_id`; False if the tree has no live box of that id."""
        if self._id_order is None:  # built on the first removal: most trees never see one
            self._id_order = np.argsort(self.ids, kind="stable")
        at = int(np.searchsorted(self.ids, box_id, sorter=self._id_order))
        if at == len(self.ids):
            return False
        row = int(self._id_order[at])
        if self.ids[row] != box_id or not self.alive[row]:
            return False
        self.alive[row] = 0
        self.dead += 1
        return True

    def compacted(self) -> PackedTree:
        """This tree without its masked boxes, the others kept in their STR order (no sort): what
        a run of removals packs again to. Consecutive boxes in that order stay close, so the
        leaves stay tight; ~1 ms for 12,000 boxes where a fresh pack sorts them in ~8 ms."""
        live = self.alive.astype(bool)
        return PackedTree(self.ids[live], self.lo[live], self.hi[live], self.capacity, ordered=True)

    def kill_many(self, box_ids: np.ndarray) -> np.ndarray:
        """`kill` for many distinct ids in one vectorised step: a mask of those that were live
        boxes here (now masked)."""
        box_ids = np.asarray(box_ids, dtype=np.int64)
        if len(self.ids) == 0:
            return np.zeros(len(box_ids), dtype=bool)
        if self._id_order is None:
            self._id_order = np.argsort(self.ids, kind="stable")
        at = np.minimum(np.searchsorted(self.ids, box_ids, sorter=self._id_order), len(self.ids) - 1)
        rows = self._id_order[at]
        hit: np.ndarray = (self.ids[rows] == box_ids) & (self.alive[rows] == 1)
        self.alive[rows[hit]] = 0
        self.dead += int(np.count_nonzero(hit))
        return hit

    def query(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The live boxes containing each point: (point index, id) pairs, grouped by point in
        ascending order."""
        points = np.ascontiguousarray(points, dtype=np.float64)
        m = len(points)
        if m == 0 or len(self.ids) == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        stack = np.empty(self.capacity * (len(self.level_size) + 1) + 1, dtype=np.int64)  # per call: nogil
        at, rows = answers(m, lambda out_pt, out_row: _query(
            points, self.nodes_lo, self.nodes_hi, self.level_start, self.level_size, self.lo, self.hi, self.alive,
            self.capacity, stack, out_pt, out_row), self.per_point)
        # The next call's room: a quarter more than this one's answers a point (a walk whose
        # answers do not fit is walked again: at 4 a point, most of a `paper` set's were).
        self.per_point = max(len(at) / m * 1.25, MIN_PER_POINT)
        return at, self.ids[rows]


def scan(points: np.ndarray, lo: np.ndarray, hi: np.ndarray, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The live boxes (rows of lo, hi) containing each point, every box looked at: (point index,
    row) pairs grouped by point in ascending order. For a few hundred boxes, cheaper than a tree."""
    points = np.ascontiguousarray(points, dtype=np.float64)
    m = len(points)
    if m == 0 or len(lo) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return answers(m, lambda out_pt, out_row: _scan(points, lo, hi, alive, out_pt, out_row))


def answers(m: int, run: Callable[[Ints, Ints], int], per_point: float = MIN_PER_POINT
             ) -> tuple[np.ndarray, np.ndarray]:
    """(point index, row) pairs from `run(out_pt, out_row)`, a compiled walk that writes what fits
    and returns how many there are, with room for `per_point` answers a point at first: again
    with room for all when that was short."""
    size = int(per_point * m) + 64
    while True:
        out_pt = np.empty(size, dtype=np.int64)
        out_row = np.empty(size, dtype=np.int64)
        n = run(out_pt, out_row)
        if n <= size:
            return out_pt[:n], out_row[:n]
        size = n


def str_order(lo: np.ndarray, hi: np.ndarray, capacity: int) -> np.ndarray:
    """Sort-Tile-Recursive (Leutenegger et al. 1997): the order of the boxes in which each run
    of `capacity` is a leaf. Sort by the centre along the first dimension, cut into slabs of
    whole leaves, recurse on the next dimension within each slab; the last sorts.

    Every sort is stable, ties (unbounded sides) kept in the previous dimension's order. Slabs
    of more than `_COMPILED_TILE` boxes are sorted here (`_stable_argsort`); the smaller ones,
    most of the sorts, in one compiled call, with no interpreter round each. 2-5x faster than
    numpy's stable sort slab by slab, in the same order."""
    n = len(lo)
    if n == 0:
        return np.empty(0, dtype=np.intp)
    centre = np.ascontiguousarray((np.clip(lo, -_BIG, _BIG) + np.clip(hi, -_BIG, _BIG)) / 2)
    dims = centre.shape[1]
    perm = np.arange(n, dtype=np.intp)
    small: list[tuple[int, int, int]] = []  # (start, end, dimension) of the slabs left to tile

    def tile(start: int, end: int, d: int) -> None:
        if end - start <= _COMPILED_TILE:
            small.append((start, end, d))
            return
        rows = perm[start:end]
        perm[start:end] = rows[_stable_argsort(centre[rows, d])]
        if d < dims - 1:
            per = _per_slab(end - start, capacity, dims - d)
            for j in range(start, end, per):
                tile(j, min(j + per, end), d + 1)

    tile(0, n, 0)
    _tile(centre, perm, np.array(small, dtype=np.int64).reshape(-1, 3), capacity)
    return perm


def _stable_argsort(key: np.ndarray) -> np.ndarray:
    """np.argsort(key, kind="stable"), from numpy's vectorised quicksort (~5x its stable sort
    on tens of thousands of floats) with the runs of equal keys put back in their first order."""
    order = np.argsort(key)
    ordered = key[order]
    same = ordered[1:] == ordered[:-1]
    same |= np.isnan(ordered[1:]) & np.isnan(ordered[:-1])  # (sorted last, as equals)
    if not same.any():
        return order
    tied = np.zeros(len(key), dtype=bool)
    tied[1:] = same
    tied[:-1] |= same
    run = np.cumsum(np.concatenate(([True], ~same)))  # the run of equal keys at each position
    at = np.flatnonzero(tied)
    order[at] = order[at][np.argsort(run[at] * len(key) + order[at])]
    return order


@compiled
def contains(lo: Floats, hi: Floats, row: int, points: Floats, i: int) -> bool:
    """Whether box `row` of (lo, hi) holds point i: closed bounds, and NaN is inside nothing.
    (Stops at the first dimension that is out: comparing all without branches was ~20 %
    slower on `paper`.)"""
    for d in range(points.shape[1]):  # noqa: SIM110 (numba compiles a loop, not all() over a generator)
        if not lo[row, d] <= points[i, d] <= hi[row, d]:
            return False
    return True


@compiled
def _query(points: Floats, nodes_lo: Floats, nodes_hi: Floats, level_start: Ints, level_size: Ints, lo: Floats,
           hi: Floats, alive: npt.NDArray[np.uint8], capacity: int, stack: Ints, out_pt: Ints, out_row: Ints) -> int:
    """Depth-first walk per point (`walk`). Returns the number of answers, writing those that fit."""
    found = 0
    rows = np.empty(0, dtype=np.int64)  # (no ids: rows are written)
    for i in range(points.shape[0]):
        found = walk(points, i, nodes_lo, nodes_hi, level_start, level_size, lo, hi, alive, capacity, stack, rows,
                     out_pt, out_row, found)[0]
    return found


@compiled
def walk(points: Floats, i: int, nodes_lo: Floats, nodes_hi: Floats, level_start: Ints, level_size: Ints,
         lo: Floats, hi: Floats, alive: npt.NDArray[np.uint8], capacity: int, stack: Ints, ids: Ints,
         out_pt: Ints, out_row: Ints, found: int) -> tuple[int, int]:
    """The live boxes of one tree holding point i, written from `found` on as (i, row), or (i,
    ids[row]) when `ids` is not empty, while they fit: (the count after them, the nodes and
    boxes looked at). Depth first; a stack entry is a node, (level << 40) | index in its level.
    A node above the leaves that holds the point has its boxes read in a loop, not pushed."""
    levels = len(level_size)
    n_box = lo.shape[0]
    cap = out_pt.shape[0]
    named = ids.shape[0] > 0
    stack[0] = 0  # level 0, node 0: the root
    sp = 1
    looked = 0
    while sp > 0:
        sp -= 1
        looked += 1
        level = stack[sp] >> 40
        j = stack[sp] & _INDEX
        if not contains(nodes_lo, nodes_hi, level_start[level] + j, points, i):
            continue
        first = j * capacity
        if level + 1 < levels:
            last = min(first + capacity, level_size[level + 1])
            for c in range(last - 1, first - 1, -1):  # pushed backwards: visited in order
                stack[sp] = ((level + 1) << 40) | c
                sp += 1
            continue
        last = min(first + capacity, n_box)
        looked += last - first
        for r in range(first, last):
            if alive[r] and contains(lo, hi, r, points, i):
                if found < cap:  # (written out here and in _scan: a compiled helper for it cost paper 25 %)
                    out_pt[found] = i
                    out_row[found] = ids[r] if named else r
                found += 1
    return found, looked


@compiled
def _scan(points: Floats, lo: Floats, hi: Floats, alive: npt.NDArray[np.uint8], out_pt: Ints, out_row: Ints) -> int:
    """Every live box against every point; the number of answers, writing those that fit."""
    found = 0
    cap = out_pt.shape[0]
    for i in range(points.shape[0]):
        for j in range(lo.shape[0]):
            if alive[j] and contains(lo, hi, j, points, i):
                if found < cap:
                    out_pt[found] = i
                    out_row[found] = j
                found += 1
    return found


@compiled
def _per_slab(m: int, capacity: int, dims_left: int) -> int:
    """STR's boxes per slab when `m` boxes are cut along the first of `dims_left` dimensions:
    whole leaves, about leaves ** (1 / dims_left) slabs."""
    leaves = -(-m // capacity)
    slabs = int(np.ceil(leaves ** (1.0 / dims_left)))
    return int(-(-leaves // slabs) * capacity)


@compiled
def _tile(centre: Floats, perm: npt.NDArray[np.intp], slabs: Ints, capacity: int) -> None:
    """str_order's tiling of each slab (start, end, dimension) of `perm` in place."""
    dims = centre.shape[1]
    # slabs still to tile, (start, end, dimension): disjoint runs of perm, so at most n of them
    stack = np.empty((max(perm.shape[0], slabs.shape[0]), 3), dtype=np.int64)
    stack[:slabs.shape[0]] = slabs
    top = slabs.shape[0]
    while top > 0:
        top -= 1
        s, e, d = stack[top, 0], stack[top, 1], stack[top, 2]
        rows = perm[s:e].copy()
        key = np.empty(e - s)
        for i in range(e - s):
            key[i] = centre[rows[i], d]
        order = np.argsort(key, kind="mergesort")  # stable: ties keep the previous dimension's order
        for i in range(e - s):
            perm[s + i] = rows[order[i]]
        if d < dims - 1 and e - s > capacity:
            per = _per_slab(e - s, capacity, dims - d)
            for j in range(s, e, per):
                stack[top, 0], stack[top, 1], stack[top, 2] = j, min(j + per, e), d + 1
                top += 1
