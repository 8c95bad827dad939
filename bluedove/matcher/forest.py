"""A set's levels walked in one compiled call: every tree and the buffer, point by point.

A set of boxes is a few packed trees and a buffer (bluedove/matcher/levels.py). Walked one at a
time, each level was a compiled call of its own and the answers were then sorted back into
point order. Here one call walks every level for a point before the next point, so the answers
come out grouped by point, named by their ids: ~10 % faster with a tenth of a `paper` set
pending (trees of 40,000, 3,264 and 544 boxes and a buffer of 192).

Most of what levels cost is not the calls: a small tree's leaves are looser than the big one's,
so it looks at ~11 nodes and boxes a match where the big tree looks at ~5 (and the buffer at
all of its boxes). Every walk counts what it looked at outside the big tree; the set packs
itself anew when that has cost about what a pack would (`Levels.repack_due`).

The big tree goes in as it is. The small ones' arrays are copied into one block each (nodes,
bounds, ids, masks) when the set's trees change (a flush, a merge, a compaction), not at every
query, and those trees keep views of the blocks instead of their own arrays: no copy stays
behind, and a box a tree masks is masked here too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from bluedove.core.jit import compiled
from bluedove.matcher.packed import MIN_PER_POINT, PackedTree, answers, contains, walk

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


class Forest:
    """A set's trees as `query` walks them (the module's docstring). Made for one list of trees,
    biggest first (`of`)."""

    def __init__(self, trees: Sequence[PackedTree]) -> None:
        self.trees = tuple(trees)
        self.big, small = trees[0], trees[1:]
        self.capacity = self.big.capacity
        if any(t.capacity != self.capacity for t in small):
            raise ValueError("a forest's trees need one capacity (children per node)")
        tk = self.big.lo.shape[1]
        # per small tree, (start, end) of: its nodes, its levels (level_start, level_size), its boxes
        spans = np.zeros((len(small), 6), dtype=np.int64)
        ends = np.cumsum([[len(t.nodes_lo), len(t.level_size), len(t)] for t in small], axis=0).reshape(-1, 3)
        spans[:, 1::2] = ends
        spans[1:, 0::2] = ends[:-1]
        self.spans = spans
        self.level_start = _joined([t.level_start for t in small], np.int64, ())
        self.level_size = _joined([t.level_size for t in small], np.int64, ())
        self.nodes_lo = _joined([t.nodes_lo for t in small], np.float64, (tk,))
        self.nodes_hi = _joined([t.nodes_hi for t in small], np.float64, (tk,))
        self.lo = _joined([t.lo for t in small], np.float64, (tk,))
        self.hi = _joined([t.hi for t in small], np.float64, (tk,))
        self.ids = _joined([t.ids for t in small], np.int64, ())
        self.alive = _joined([t.alive for t in small], np.uint8, ())
        for t, (n0, n1, _, _, b0, b1) in zip(small, spans.tolist()):
            t.nodes_lo, t.nodes_hi = self.nodes_lo[n0:n1], self.nodes_hi[n0:n1]
            t.lo, t.hi, t.ids, t.alive = self.lo[b0:b1], self.hi[b0:b1], self.ids[b0:b1], self.alive[b0:b1]
        depth = max(len(t.level_size) for t in trees)
        # one stack per forest, reused by every query: its owner, a set, is not thread-safe
        self.stack = np.empty(self.capacity * (depth + 1) + 1, dtype=np.int64)
        self.per_point = MIN_PER_POINT * len(trees)  # room for answers a point (as PackedTree's)

    def of(self, trees: Sequence[PackedTree]) -> bool:
        """Whether this was made for these very trees."""
        return len(trees) == len(self.trees) and all(a is b for a, b in zip(trees, self.trees))

    def query(self, points: np.ndarray, b_lo: np.ndarray, b_hi: np.ndarray, b_alive: np.ndarray,
              b_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """The live boxes of the trees and of the buffer (`b_*`) containing each point: (point
        index, id) pairs, grouped by point in ascending order, each point's in level order; and
        how many nodes and boxes were looked at outside the big tree (what the set being in
        levels costs this query, about)."""
        points = np.ascontiguousarray(points, dtype=np.float64)
        m = len(points)
        if m == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), 0
        if not b_lo.flags.writeable:  # an empty buffer's shared arrays: read-only, another type to numba
            b_lo, b_hi, b_alive, b_ids = self.lo[:0], self.hi[:0], self.alive[:0], self.ids[:0]
        big, looked = self.big, 0

        def run(out_pt: np.ndarray, out_id: np.ndarray) -> int:
            nonlocal looked
            found, looked = _walk_levels(
                points, big.nodes_lo, big.nodes_hi, big.level_start, big.level_size, big.lo, big.hi, big.alive,
                big.ids, self.spans, self.nodes_lo, self.nodes_hi, self.level_start, self.level_size, self.lo,
                self.hi, self.alive, self.ids, b_lo, b_hi, b_alive, b_ids, self.capacity, self.stack, out_pt, out_id)
            return int(found)

        at, ids = answers(m, run, self.per_point)
        self.per_point = max(len(at) / m * 1.25, MIN_PER_POINT)
        return at, ids, looked


def _joined(arrays: list[np.ndarray], dtype: type, tail: tuple[int, ...]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.empty((0, *tail), dtype=dtype)


@compiled
def _walk_levels(points: Floats, nodes_lo: Floats, nodes_hi: Floats, level_start: Ints, level_size: Ints,
                 lo: Floats, hi: Floats, alive: npt.NDArray[np.uint8], ids: Ints, spans: Ints, s_nodes_lo: Floats,
                 s_nodes_hi: Floats, s_level_start: Ints, s_level_size: Ints, s_lo: Floats, s_hi: Floats,
                 s_alive: npt.NDArray[np.uint8], s_ids: Ints, b_lo: Floats, b_hi: Floats,
                 b_alive: npt.NDArray[np.uint8], b_ids: Ints, capacity: int, stack: Ints, out_pt: Ints,
                 out_id: Ints) -> tuple[int, int]:
    """Each point through the big tree, the small ones (`s_*`, tree t's parts at `spans[t]`),
    then the buffer read whole: (the number of answers, writing those that fit; the nodes and
    boxes the small trees and the buffer had looked at)."""
    found = small = 0
    cap = out_pt.shape[0]
    for i in range(points.shape[0]):
        found = walk(points, i, nodes_lo, nodes_hi, level_start, level_size, lo, hi, alive, capacity, stack, ids,
                     out_pt, out_id, found)[0]
        for t in range(spans.shape[0]):
            n0, n1, v0, v1, b0, b1 = spans[t, 0], spans[t, 1], spans[t, 2], spans[t, 3], spans[t, 4], spans[t, 5]
            found, looked = walk(points, i, s_nodes_lo[n0:n1], s_nodes_hi[n0:n1], s_level_start[v0:v1],
                                 s_level_size[v0:v1], s_lo[b0:b1], s_hi[b0:b1], s_alive[b0:b1], capacity, stack,
                                 s_ids[b0:b1], out_pt, out_id, found)
            small += looked
        small += b_lo.shape[0]
        for j in range(b_lo.shape[0]):
            if b_alive[j] and contains(b_lo, b_hi, j, points, i):
                if found < cap:
                    out_pt[found] = i
                    out_id[found] = b_ids[j]
                found += 1
    return found, small
