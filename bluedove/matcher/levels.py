"""A set's boxes in levels: a buffer of the latest boxes, read whole, and static packed trees of
growing size (the log-structured merge idea, applied to R-trees).

A packed tree answers fast but cannot take an insert, and packing costs 0.1-0.4 µs a box. Packing
the whole set each time a few hundred boxes came (what the set did before, with the new boxes
in a libspatialindex R*-tree meanwhile, ~30 µs an insert) cost a subscription ~55 µs in every
set it was filed in. Here a new box goes to the buffer: appended, no index. When the buffer
holds more than `delta_min` live boxes it is packed into a tree of its own, and the smallest
trees are merged (packed together) while the one above holds at most `ratio` times as many:
the trees then grow by more than `ratio` from one to the next, so a set of n boxes has at most
log_ratio(n / delta_min) + 1 of them, and a box is packed again a few times in its life, not
at every pack of the set. When a merge would reach the biggest tree, the owner packs the whole
set anew instead (`append` says so), which also lets it choose a new dimension order.

Matching pays for the levels: a query walks them all (bluedove/matcher/forest.py), and small
trees look at more boxes a match than the big one. Queries count what they look at outside the
biggest tree; once that passes `repack_looks` a live box (about a pack's cost), `repack_due`
says so and the owner packs the set anew: a set that is matched much and added to little does
not stay in levels for long (the ski-rental rule: never pay much more than one pack for them).

A removed box is masked where it is; a tree whose masked boxes pass a quarter of it (and
`delta_min`) is compacted, its live boxes kept in their order. Boxes are in the owner's tree
order (bluedove/matcher/index.py); ids are ints. Not thread-safe, as its owner.
"""

from __future__ import annotations

import numpy as np

from bluedove.matcher.forest import Forest
from bluedove.matcher.packed import PackedTree, scan

Rows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # ids, lo, hi, alive


class Levels:
    """The boxes of one set: `trees`, biggest first, and the buffer (`b_*` arrays, `b_alive`).
    Ids must be given out in ascending order (`append` after `append`)."""

    def __init__(self, tk: int, delta_min: int, ratio: int, repack_looks: float = float("inf")) -> None:
        self.tk, self.delta_min, self.ratio = tk, max(delta_min, 1), max(ratio, 1)
        self.repack_looks = repack_looks
        self.trees: list[PackedTree] = []
        self._forest: Forest | None = None  # the trees as `query` walks them, remade when they change
        self.looked = 0  # nodes and boxes queries looked at outside the biggest tree since `reset`
        self._empty_buffer()

    def _empty_buffer(self) -> None:
        # Shared, read-only empties: a matcher holds a set per dimension of every space it serves,
        # idle ones too, and `append` makes new arrays rather than writing into these.
        self.b_ids, self.b_lo, self.b_hi, self.b_alive = _empties(self.tk)
        self.b_live = 0

    @property
    def live(self) -> int:
        return sum(t.live for t in self.trees) + self.b_live

    def reset(self, ids: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        """One tree of these boxes, nothing else (the owner's pack of the whole set)."""
        self.trees = [PackedTree(ids, lo, hi)] if len(ids) else []
        self.looked, self._forest = 0, None  # (the forest would keep the old trees' arrays)
        self._empty_buffer()

    def append(self, ids: np.ndarray, boxes: np.ndarray, pack: bool = True) -> bool:
        """Add boxes (rows `[mins..., maxs...]`) to the buffer, packing it when it is full
        (unless `pack` is False: the owner packs everything next). True when the merges that
        follow would reach the biggest tree: the owner should pack everything anew (`boxes()`
        then `reset`)."""
        tk = self.tk
        self.b_ids = np.concatenate([self.b_ids, ids])
        self.b_lo = np.concatenate([self.b_lo, boxes[:, :tk]])
        self.b_hi = np.concatenate([self.b_hi, boxes[:, tk:]])
        self.b_alive = np.concatenate([self.b_alive, np.ones(len(ids), dtype=np.uint8)])
        self.b_live += len(ids)
        if pack and self.b_live > self.delta_min:
            return self._flush()
        if len(self.b_ids) > 2 * self.delta_min:  # mostly removed: adds and removals taking turns
            keep = self.b_alive.astype(bool)
            self.b_ids, self.b_lo, self.b_hi, self.b_alive = (self.b_ids[keep], self.b_lo[keep], self.b_hi[keep],
                                                              self.b_alive[keep])
        return False

    def _flush(self) -> bool:
        tree = PackedTree(*_live([self._buffer()]))
        self._empty_buffer()
        # Adds still coming: levels would soon be back after a pack, so what counts towards one
        # is what queries looked at since the levels last changed shape.
        self.looked = 0
        if not len(tree):
            return False
        trees = self.trees
        while trees and trees[-1].live <= self.ratio * tree.live:
            if len(trees) == 1:  # into the biggest: the whole set is packed anew
                trees.append(tree)
                return True
            tree = _merged(trees.pop(), tree)
        trees.append(tree)
        return False

    def kill(self, box_id: int) -> bool:
        """Mask box `box_id`; False if no live box has that id. (The buffer's ids ascend, as the
        owner gives them out; a tree is asked only when the id is within its range.)"""
        b_ids = self.b_ids
        if len(b_ids) and box_id >= b_ids[0]:
            at = int(np.searchsorted(b_ids, box_id))
            if at < len(b_ids) and b_ids[at] == box_id and self.b_alive[at]:
                self.b_alive[at] = 0
                self.b_live -= 1
                return True
        return any(t.id_low <= box_id <= t.id_high and t.kill(box_id) for t in self.trees)

    def kill_many(self, box_ids: np.ndarray) -> int:
        """`kill` for many distinct ids; how many were live boxes here."""
        n = 0
        if self.b_live:
            hit = np.isin(self.b_ids, box_ids) & (self.b_alive == 1)
            n = int(np.count_nonzero(hit))
            self.b_alive[hit] = 0
            self.b_live -= n
        for t in self.trees:
            n += int(np.count_nonzero(t.kill_many(box_ids)))
        return n

    def _due(self, t: PackedTree) -> bool:
        return t.dead > max(self.delta_min, len(t) // 4) or (t.dead > 0 and not t.live)

    def compaction_due(self) -> bool:
        return any(self._due(t) for t in self.trees)

    def compact(self) -> None:
        """Each tree past its share of masked boxes (or with none live) without them, in its
        order (no sort); a tree left empty goes."""
        kept = []
        for t in self.trees:
            if self._due(t):
                t = t.compacted()
            if len(t):
                kept.append(t)
        self.trees = kept

    def boxes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every live box: (ids, lo, hi)."""
        return _live([_rows(t) for t in self.trees] + [self._buffer()])

    def _buffer(self) -> Rows:
        return self.b_ids, self.b_lo, self.b_hi, self.b_alive

    def repack_due(self) -> bool:
        """Whether matching has spent on the set being in levels about what packing it whole
        would cost: `looked` past `repack_looks` a live box (the owner then packs it anew)."""
        in_levels = len(self.trees) > 1 or self.b_live > 0  # (first: a packed set is asked at every query)
        return in_levels and self.looked > self.repack_looks * self.live

    def query(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The live boxes containing each point (in tree order): (point index, id) pairs,
        grouped by point in ascending order. Several levels are walked in one call (forest.py)."""
        trees = self.trees
        if not trees:
            at, rows = scan(points, self.b_lo, self.b_hi, self.b_alive)
            self.looked += len(points) * len(self.b_lo)
            return at, self.b_ids[rows]
        if len(trees) == 1 and not self.b_live:
            self._forest = None
            return trees[0].query(points)
        if self._forest is None or not self._forest.of(trees):
            self._forest = Forest(trees)
        at, ids, looked = self._forest.query(points, self.b_lo, self.b_hi, self.b_alive, self.b_ids)
        self.looked += looked
        return at, ids


def warm_up() -> None:
    """Compile (or load from the cache) every walk a set's query runs, on a few boxes: one tree,
    a buffer alone, trees and a buffer. A first compile holds the GIL for a second or more; a
    matcher does it before it joins the gossip, where a process that stops answering for that
    long is suspected and may be declared dead."""
    point = np.full((1, 2), 0.5)
    boxes = np.array([[0.0, 0.0, 1.0, 1.0]] * 4)
    alone = Levels(2, 8, 1)
    alone.append(np.arange(1), boxes[:1])
    alone.query(point)  # scan
    lv = Levels(2, 1, 8)
    lv.append(np.arange(2), boxes[:2])
    lv.query(point)  # one tree
    lv.append(np.arange(2, 4), boxes[2:])
    lv.query(point)  # two trees (forest.py)
    lv.append(np.arange(4, 5), boxes[:1])
    lv.query(point)  # and a buffer


_EMPTIES: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}


def _empties(tk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An empty buffer's arrays for boxes of `tk` dimensions, made once and read-only."""
    if tk not in _EMPTIES:
        arrays = (np.empty(0, dtype=np.int64), np.empty((0, tk)), np.empty((0, tk)), np.empty(0, dtype=np.uint8))
        for a in arrays:
            a.setflags(write=False)
        _EMPTIES[tk] = arrays
    return _EMPTIES[tk]


def _merged(a: PackedTree, b: PackedTree) -> PackedTree:
    """One tree of the live boxes of two."""
    return PackedTree(*_live([_rows(a), _rows(b)]))


def _rows(t: PackedTree) -> Rows:
    return t.ids, t.lo, t.hi, t.alive


def _live(parts: list[Rows]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The live rows of these (ids, lo, hi, alive), one after another: (ids, lo, hi)."""
    kept = [_live_rows(*part) for part in parts]
    return (np.concatenate([k[0] for k in kept]), np.concatenate([k[1] for k in kept]),
            np.concatenate([k[2] for k in kept]))


def _live_rows(ids: np.ndarray, lo: np.ndarray, hi: np.ndarray, alive: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if alive.all():  # (a mask would copy them for nothing)
        return ids, lo, hi
    live = alive.astype(bool)
    return ids[live], lo[live], hi[live]
