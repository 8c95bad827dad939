"""The paper's cost regime as a real index: one dimension bucketed, a bucket's subscriptions checked on all k."""

# The paper's §III-B: a matcher keeps a separate index per dimension set, and how much it must
# search is what the subscription-amount policy minimises. This index touches exactly the
# subscriptions whose range on the indexed dimension overlaps the message's bucket (about
# those holding the message's value: `searched`), then checks every dimension of those in
# numpy. A full replica has no indexed dimension to exploit here: `scan` checks all of them
# ("each matcher needs to search through all subscriptions", §III). Used only to measure the
# regime's cost (`bluedove sim calibrate`), never on the serving path.

from __future__ import annotations

import numpy as np


class DimensionIndex:
    """Subscriptions bucketed along one dimension; a message's bucket is checked on all k."""

    def __init__(self, lows: np.ndarray, highs: np.ndarray, dim: int, lo: float, hi: float,
                 buckets: int = 32) -> None:
        self.lows = np.ascontiguousarray(lows, dtype=np.float64)
        self.highs = np.ascontiguousarray(highs, dtype=np.float64)
        self.dim, self.lo, self.hi = dim, lo, hi
        self.width = (hi - lo) / buckets
        self.buckets = buckets
        first = np.clip(((self.lows[:, dim] - lo) // self.width).astype(np.int64), 0, buckets - 1)
        last = np.clip(((np.nextafter(self.highs[:, dim], -np.inf) - lo) // self.width).astype(np.int64), 0,
                       buckets - 1)
        # members[b]: rows overlapping bucket b, with their bounds copied contiguously (cache friendly)
        self.members = []
        for b in range(buckets):
            rows = np.nonzero((first <= b) & (b <= last))[0]
            self.members.append((rows, self.lows[rows], self.highs[rows]))

    def bucket(self, v: float) -> int:
        return min(max(int((v - self.lo) // self.width), 0), self.buckets - 1)

    def match(self, point: np.ndarray) -> tuple[np.ndarray, int]:
        """(matching rows, subscriptions searched) for one message."""
        rows, lo, hi = self.members[self.bucket(float(point[self.dim]))]
        ok = np.all((lo <= point) & (point < hi), axis=1)
        return rows[ok], len(rows)

    def scan(self, point: np.ndarray) -> tuple[np.ndarray, int]:
        """Full replication's search: every subscription checked."""
        ok = np.all((self.lows <= point) & (point < self.highs), axis=1)
        return np.nonzero(ok)[0], len(self.lows)
