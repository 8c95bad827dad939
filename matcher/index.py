"""One subscription set: an R-tree over all k dimensions with live insert and delete.

Ranges are half-open, `[low, high)`, while the R-tree's boxes are closed; a box is stored
as `[low, nextafter(high, -inf)]`, which holds exactly the doubles v with `low <= v < high`,
so the index answers exactly with no post-filter. Ids are opaque strings to the caller.
"""

from __future__ import annotations

import numpy as np
from rtree import index as rtree_index


class SubscriptionSet:
    def __init__(self, k: int) -> None:
        self.k = k
        prop = rtree_index.Property(dimension=k)
        self._idx = rtree_index.Index(properties=prop)
        self._next = 0
        self._by_id: dict[str, int] = {}  # subscription id -> internal int id
        self._boxes: dict[int, tuple[float, ...]] = {}  # internal id -> stored box
        self.sub_ids: dict[int, str] = {}  # internal id -> subscription id
        self.queues: dict[int, str] = {}  # internal id -> delivery queue

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, sub_id: str) -> bool:
        return sub_id in self._by_id

    def ids(self) -> list[str]:
        return list(self._by_id)

    def add(self, sub_id: str, queue: str, lows: tuple[float, ...], highs: tuple[float, ...]) -> bool:
        """Insert a subscription; False (and no change) if it is there already or is empty."""
        if sub_id in self._by_id or any(lo >= hi for lo, hi in zip(lows, highs)):
            return False
        iid = self._next
        self._next += 1
        box = tuple(float(x) for x in lows) + tuple(float(np.nextafter(h, -np.inf)) for h in highs)
        self._idx.insert(iid, box)
        self._by_id[sub_id] = iid
        self._boxes[iid] = box
        self.sub_ids[iid] = sub_id
        self.queues[iid] = queue
        return True

    def remove(self, sub_id: str) -> bool:
        iid = self._by_id.pop(sub_id, None)
        if iid is None:
            return False
        self._idx.delete(iid, self._boxes.pop(iid))
        del self.sub_ids[iid], self.queues[iid]
        return True

    def match_ids(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Internal ids matching each point, in one vectorised call: (ids, counts per point)."""
        if len(self._by_id) == 0 or len(points) == 0:
            return np.empty(0, dtype=np.int64), np.zeros(len(points), dtype=np.int64)
        pts = np.ascontiguousarray(points, dtype=np.float64)
        return self._idx.intersection_v(pts, pts)

    def match_batch(self, points: np.ndarray) -> list[dict[str, list[str]]]:
        """For each point, {delivery queue: [subscription ids]} of every subscription it matches."""
        ids, counts = self.match_ids(points)
        out: list[dict[str, list[str]]] = []
        pos = 0
        sub_ids, queues = self.sub_ids, self.queues
        for c in counts.tolist():
            groups: dict[str, list[str]] = {}
            for iid in ids[pos : pos + c].tolist():
                groups.setdefault(queues[iid], []).append(sub_ids[iid])
            pos += c
            out.append(groups)
        return out
