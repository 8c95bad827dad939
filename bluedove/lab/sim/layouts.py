"""Where subscriptions live and which matchers can take a message: mPartition (the paper's §III-A), §IV-B baselines.

- `mpartition`: the project's SegmentTable over the first k searchable dimensions; a
  subscription is in matcher m's dim-i set iff its dim-i range overlaps m's dim-i segment;
  a message's candidates are the owners of the segments holding its values.
- `p2p`: the same along dimension 0 only; a message has one candidate.
- `full-replication`: every matcher holds every subscription; a message may go to any.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bluedove.core.partition import segments
from bluedove.core.partition.modes import MODES
from bluedove.core.partition.segments import SegmentTable, equal_partition
from bluedove.core.space import Space
from bluedove.lab.workloads import Workload

SYSTEMS = MODES  # the real cluster's partition modes (bluedove/core/partition/modes.py), vectorised here


@dataclass(frozen=True)
class Layout:
    """One system's placement on n matchers: its segment table and each matcher's set sizes."""

    system: str
    n: int  # matchers
    table: SegmentTable | None  # over the searchable dimensions; None for full replication
    sizes: np.ndarray  # (n, k) subscriptions in each matcher's dim-i set (k = 1 for the baselines)
    members: tuple[str, ...]

    @property
    def k(self) -> int:
        return self.sizes.shape[1]

    def candidates(self, points: np.ndarray) -> np.ndarray:
        """(P, k) matcher index of each message's candidate along each searchable dimension, the
        vectorised form of `SegmentTable.candidates` (full replication: -1, "any matcher")."""
        if self.table is None:
            return np.full((len(points), 1), -1, dtype=np.intp)
        index = {m: j for j, m in enumerate(self.members)}
        out = np.empty((len(points), self.k), dtype=np.intp)
        for i in range(self.k):
            cuts = np.asarray(self.table.cuts[i])
            owners = np.array([index[o] for o in self.table.owners[i]], dtype=np.intp)
            seg = np.maximum(np.searchsorted(cuts, points[:, i], side="right") - 1, 0)
            out[:, i] = owners[seg]
        return out


def searchable_space(space: Space, k: int) -> Space:
    """The first k dimensions: the paper's §IV-F partitions along k of the subscriptions' dimensions."""
    if not 1 <= k <= space.k:
        raise ValueError(f"searchable dimensions: expected 1..{space.k}, got {k}")
    return Space(space.dimensions[:k])


def member_ranges(table: SegmentTable, members: tuple[str, ...], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Per member (in `members` order) the [lo, hi) it owns on `dim`; members owning none get an empty range."""
    lo = np.full(len(members), np.inf)
    hi = np.full(len(members), -np.inf)
    index = {m: j for j, m in enumerate(members)}
    for j, owner in enumerate(table.owners[dim]):
        a, b = table.segment_bounds(dim, j)
        m = index[owner]
        lo[m], hi[m] = min(lo[m], a), max(hi[m], b)
    return lo, hi


def set_sizes(table: SegmentTable, members: tuple[str, ...], lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
    """(n, k) how many subscriptions mPartition places in each matcher's dim-i set: those whose
    dim-i range overlaps the member's range (the rule of `SegmentTable.placement`, counted with
    sorted bounds instead of one call per subscription)."""
    out = np.zeros((len(members), table.space.k), dtype=np.int64)
    n = len(lows)
    for i in range(table.space.k):
        lo, hi = member_ranges(table, members, i)
        slo, shi = np.sort(lows[:, i]), np.sort(highs[:, i])
        # overlap iff low < seg_hi and seg_lo < high: n - #(low >= seg_hi) - #(high <= seg_lo)
        not_before = n - np.searchsorted(slo, hi, side="left")
        ends_before = np.searchsorted(shi, lo, side="right")
        out[:, i] = np.where(np.isfinite(lo), n - not_before - ends_before, 0)
    return out


def build(system: str, w: Workload, n: int, k: int | None = None) -> Layout:
    """The layout of `system` for workload `w` on n matchers (k searchable dimensions for mPartition)."""
    if n < 1:
        raise ValueError(f"matchers: expected >= 1, got {n}")
    members = tuple(f"m{j}" for j in range(n))
    if system == "full-replication":
        return Layout(system, n, None, np.full((n, 1), w.n_subs, dtype=np.int64), members)
    if system == "p2p":
        k = 1
    elif system == "mpartition":
        k = w.space.k if k is None else k
    else:
        raise ValueError(f"system: expected one of {SYSTEMS}, got {system!r}")
    table = equal_partition(searchable_space(w.space, k), {m: "" for m in members})
    return Layout(system, n, table, set_sizes(table, members, w.lows, w.highs), members)


def with_table(layout: Layout, table: SegmentTable, w: Workload) -> Layout:
    """The same system on a new table (after a split); new members are appended to the order."""
    members = layout.members + tuple(m for m in table.members if m not in layout.members)
    return Layout(layout.system, len(members), table, set_sizes(table, members, w.lows, w.highs), members)


def split(table: SegmentTable, victims: list[str], new: str) -> SegmentTable:
    """A new matcher `new` takes the upper half of `victims[i]`'s range on each dimension i: the
    product's join (`bluedove.core.partition.segments.split`), cut at each range's midpoint (the
    paper's §III-C: the joining node takes half of a loaded node's segments)."""
    at = {}
    for i, victim in enumerate(victims):
        lo, hi = table.segments_of(victim)[i]
        at[i] = (victim, (lo + hi) / 2)
    return segments.split(table, new, "", at)


def coverage(lows: np.ndarray, highs: np.ndarray, dim: int, values: np.ndarray) -> np.ndarray:
    """Fraction of subscriptions whose dim range holds each value: #(low <= v) - #(high <= v), over n."""
    slo, shi = np.sort(lows[:, dim]), np.sort(highs[:, dim])
    return (np.searchsorted(slo, values, side="right") - np.searchsorted(shi, values, side="right")) / len(lows)


def expected_matches(w: Workload, points: np.ndarray) -> np.ndarray:
    """E[matches] of each point: n · Π_i coverage_i(p_i). Exact in expectation for workloads whose
    subscriptions draw each dimension independently (paper, sparse); cheap for millions of points."""
    out = np.full(len(points), float(w.n_subs))
    for i in range(w.space.k):
        out *= coverage(w.lows, w.highs, i, points[:, i])
    return out


def make_pool_arrays(w: Workload, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(expected matches, (P, k) coverage counts) of each point, for `engine.Pool`."""
    cov = np.column_stack([coverage(w.lows, w.highs, i, points[:, i]) for i in range(w.space.k)]) * w.n_subs
    return expected_matches(w, points), cov


def count_matches(w: Workload, points: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Exact matches of each point (brute force, chunked); for small pools and tests."""
    out = np.empty(len(points), dtype=np.int64)
    for s in range(0, len(points), chunk):
        p = points[s:s + chunk, None, :]
        out[s:s + chunk] = np.all((w.lows[None] <= p) & (p < w.highs[None]), axis=2).sum(axis=1)
    return out
