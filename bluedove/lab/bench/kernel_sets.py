"""mPartition's sets of a workload for `bench kernel` (bluedove/lab/bench/kernel.py and
kernel_typed.py): every matcher's k sets, and each message's least-loaded candidate set."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from bluedove.core.partition.segments import SegmentTable
from bluedove.lab.workloads import Workload
from bluedove.matcher.filter_book import FilterBook
from bluedove.matcher.index import SubscriptionSet


@dataclass
class Partitioned:
    """Every matcher's k sets (mPartition, the paper's §III-A): sets[m][i] is S^i(M_m)."""

    table: SegmentTable
    sets: list[list[SubscriptionSet]]
    sizes: np.ndarray  # (matchers, k) subscriptions per set: what dispatchers learn by gossip
    owner: list[np.ndarray]  # per dimension: segment j -> matcher index
    cuts: list[np.ndarray]  # per dimension: segment lower bounds


def build_partitioned(w: Workload, table: SegmentTable, sub_ids: list[str], queues: list[str],
                      book: FilterBook | None = None) -> Partitioned:
    """A subscription goes, along dimension i, to every owner whose dim-i segment overlaps its range;
    every set holds `book` (the filters of rows that are boxes of one), as a matcher's sets do."""
    members = list(table.members)
    m_of = {m: n for n, m in enumerate(members)}
    k = w.space.k
    sets = [[SubscriptionSet(k) for _ in range(k)] for _ in members]
    for row in sets:
        for s in row:
            s.book = book
    for i in range(k):
        lo_i, hi_i = w.lows[:, i], w.highs[:, i]
        for j, owner in enumerate(table.owners[i]):
            seg_lo, seg_hi = table.segment_bounds(i, j)
            rows = np.nonzero((lo_i < seg_hi) & (seg_lo < hi_i) & (lo_i < hi_i))[0]
            sets[m_of[owner]][i].add_many([sub_ids[r] for r in rows], [queues[r] for r in rows],
                                          w.lows[rows], w.highs[rows])
    sizes = np.array([[len(s) for s in row] for row in sets], dtype=np.int64)
    owner = [np.array([m_of[o] for o in table.owners[i]], dtype=np.intp) for i in range(k)]
    cuts = [np.array(table.cuts[i]) for i in range(k)]
    return Partitioned(table, sets, sizes, owner, cuts)


def choose(p: Partitioned, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Subscription amount based policy (the paper's §III-B.1): among the k candidates CM^i (owner of
    the dim-i segment holding m^i), the one whose dim-i set is smallest; ties go to the lower i."""
    n, k = points.shape
    cand = np.empty((n, k), dtype=np.intp)
    for i in range(k):
        seg = np.maximum(np.searchsorted(p.cuts[i], points[:, i], side="right") - 1, 0)
        cand[:, i] = p.owner[i][seg]
    dim = np.argmin(p.sizes[cand, np.arange(k)], axis=1)
    return cand[np.arange(n), dim], dim


def set_groups(p: Partitioned, points: np.ndarray) -> Iterator[tuple[np.ndarray, int]]:
    """The messages grouped by the set `choose` sends them to: (their rows, set key) per set,
    the key `member * k + dim` (the set `p.sets[key // k][key % k]`)."""
    member, dim = choose(p, points)
    key = member * points.shape[1] + dim
    order = np.argsort(key, kind="stable")
    sorted_keys = key[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    ends = np.r_[starts[1:], len(order)]
    for a, b in zip(starts.tolist(), ends.tolist()):
        yield order[a:b], int(sorted_keys[a])
