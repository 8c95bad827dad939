"""Partition modes: where a subscription is stored and which matchers can take a message.

`mpartition` is BlueDove's (the paper's §III-A); `p2p` and `full-replication` are the two
baselines of the paper's §IV-B, kept for benchmarks. Every mode reads the same `SegmentTable`
(so gossip, takeover and the store are shared); only these rules differ:

- `mpartition`: a subscription is in matcher m's dim-i set iff its dim-i range overlaps m's
  dim-i segment; a message's candidates are the owners of the segments holding its values,
  one per dimension.
- `p2p`: the same along dimension 0 only (one DHT over one attribute, PastryStrings-like):
  a subscription is stored once per overlapping dim-0 segment, a message has one candidate.
- `full-replication`: every matcher holds every subscription in one set (the dimension-0
  slot); a message may go to any matcher.

The mode is cluster-wide (`--partition`, BLUEDOVE_PARTITION) and must be the same on every
matcher and dispatcher. Pure: no I/O, no clocks.
"""

from __future__ import annotations

import numpy as np

from bluedove.core.partition.segments import SegmentTable

MPARTITION = "mpartition"
P2P = "p2p"
FULL = "full-replication"
MODES = (MPARTITION, P2P, FULL)


def check_mode(mode: str, key: str = "partition") -> str:
    """`mode` if it is one of MODES, else ValueError naming `key`."""
    if mode not in MODES:
        raise ValueError(f"{key}: expected one of {', '.join(MODES)}, got {mode!r}")
    return mode


def held(mode: str, table: SegmentTable, member: str) -> dict[int, tuple[float, float]]:
    """The range, per dimension, whose subscriptions `member` stores in that dimension's set
    (and whose messages it accepts along that dimension); empty for a non-member."""
    segs = table.segments_of(member)
    if mode == MPARTITION:
        return segs
    if mode == P2P:
        return {0: segs[0]} if 0 in segs else {}
    if mode == FULL:
        d = table.space.dimensions[0]
        return {0: (d.min, d.max)} if member in table.members else {}
    raise ValueError(check_mode(mode))


def placement(mode: str, table: SegmentTable, lows: tuple[float, ...],
              highs: tuple[float, ...]) -> dict[str, set[int]]:
    """Member id -> the dimensions along which it stores a subscription of bounds lows/highs."""
    if mode == MPARTITION:
        return table.placement(lows, highs)
    if mode == P2P:
        return {m: {0} for m in table.overlapping(0, lows[0], highs[0])}
    if mode == FULL:
        return {m: {0} for m in table.members}
    raise ValueError(check_mode(mode))


def placement_many(mode: str, table: SegmentTable, lows: np.ndarray, highs: np.ndarray) -> dict[str, np.ndarray]:
    """`placement` of many non-empty boxes (rows of `lows`/`highs`): member id -> a mask of the
    rows it stores; members storing none left out."""
    if mode == MPARTITION:
        return table.storers(lows, highs)
    if mode == P2P:
        return table.storers(lows, highs, range(1))
    if mode == FULL:
        return {m: np.ones(len(lows), dtype=bool) for m in table.members} if len(lows) else {}
    raise ValueError(check_mode(mode))


def candidates(mode: str, table: SegmentTable, point: tuple[float, ...] | list[float]) -> list[tuple[int, str]]:
    """A message's candidate matchers as (dimension, member): each alone finds every match."""
    if mode == MPARTITION:
        return table.candidates(point)
    if mode == P2P:
        return [(0, table.owner_at(0, point[0]))]
    if mode == FULL:
        return [(0, m) for m in table.members]
    raise ValueError(check_mode(mode))


def candidates_batch(mode: str, table: SegmentTable, points: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """`candidates` of every row of `points` at once: (members, cand_m, cand_d), where message
    i's candidates are (cand_d[i, j], members[cand_m[i, j]]) in the order `candidates` gives."""
    members = list(table.members)
    n = len(points)
    if mode == MPARTITION:
        k = table.space.k
        cand_m = np.empty((n, k), dtype=np.int64)
        for d in range(k):
            cand_m[:, d] = table.owners_at(d, points[:, d])
        return members, cand_m, np.broadcast_to(np.arange(k, dtype=np.int64), (n, k))
    if mode == P2P:
        return members, table.owners_at(0, points[:, 0]).reshape(n, 1), np.zeros((n, 1), dtype=np.int64)
    if mode == FULL:
        m = len(members)
        return members, np.broadcast_to(np.arange(m, dtype=np.int64), (n, m)), np.zeros((n, m), dtype=np.int64)
    raise ValueError(check_mode(mode))
