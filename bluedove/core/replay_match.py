"""Which messages of a logged chunk a subscription's history holds: the replay's match.

A space's accepted messages are logged in chunks: each message's point on every dimension,
one float64 row per message, and its stored body (bluedove/core/wire.py). A subscription that
asks for history from a time gets, chunk by chunk, the messages it matches exactly that were
published at or after that time: in one of its boxes (lows <= x < highs on every dimension),
then, for a filter the boxes cannot say exactly, its check on the attributes of the body, as a
matcher does after its index (docs/design.md, "Typed attributes").

The boxes decide most, in one compiled pass over the chunk's points; only the messages in a
box have their bodies read. A filter may be up to MAX_BOXES boxes, so the pass does not test
each point against all of them: the boxes are cut into slabs on one dimension (between
consecutive distinct bounds there), the one where a sample of the chunk's points finds fewest
boxes, and a point is tested only against the boxes of its slab, found by binary search, up to
the first that holds it. A point outside every slab is outside the boxes' bounding range on
that dimension and costs the search alone.

A body's published_at is its last field, of the fixed form `iso_time` writes (microseconds,
"Z"), so it is read from the body's tail: the payload before it may be large and may hold the
same text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from itertools import chain

import numpy as np
import numpy.typing as npt

from bluedove.core.filters import Box
from bluedove.core.jit import compiled
from bluedove.core.model import Subscription

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]

# The tail of every stored body: `"published_at":"2026-11-27T09:26:10.123456Z"}`.
_FIELD = b'"published_at":"'
_STAMP = len(b"2026-11-27T09:26:10.123456Z")
_TAIL = len(_FIELD) + _STAMP + len(b'"}')
_EPOCH = datetime(1970, 1, 1)
# Points of a chunk that choose the dimension the boxes are cut on (`_slabs`): about this many.
_SAMPLE = 512


def published_ms(body: bytes) -> int:
    """A stored message body's published_at, in whole epoch milliseconds (floor). ValueError
    for a body that does not end with the field in its fixed form."""
    tail = body[-_TAIL:]
    if len(tail) != _TAIL or not tail.startswith(_FIELD) or not tail.endswith(b'Z"}'):
        raise ValueError(f"a stored body ends with published_at in the form of iso_time, not {tail[-64:]!r}")
    # naive: the "Z" is left out, and the difference to a naive epoch is exact in whole microseconds
    since = datetime.fromisoformat(tail[len(_FIELD):len(_FIELD) + _STAMP - 1].decode()) - _EPOCH
    return (since.days * 86400 + since.seconds) * 1000 + since.microseconds // 1000


def replay_matches(points: np.ndarray, body: Callable[[int], bytes], sub: Subscription, since_ms: int) -> np.ndarray:
    """Indices (int64, ascending) of the chunk's messages that `sub` matches exactly and that were
    published at or after `since_ms` (epoch ms). `points` is (n, k): message i's point is row i;
    `body(i)` its stored body, asked only for a message in one of `sub`'s boxes."""
    hits = in_boxes(points, sub.boxes)
    check = sub.filter if sub.filter is not None and not sub.filter.exact else None
    keep = []
    for i in hits.tolist():
        text = body(i)
        if published_ms(text) >= since_ms and (check is None or check.matches(json.loads(text)["attributes"])):
            keep.append(i)
    return np.array(keep, dtype=np.int64)


def warm_up() -> None:
    """Compile (or load from the cache) the scan now, before a replay's first step waits for it
    on a dispatcher's event loop."""
    in_boxes(np.zeros((2, 1)), (((0.0,), (1.0,)), ((2.0,), (3.0,))))


def in_boxes(points: np.ndarray, boxes: tuple[Box, ...]) -> Ints:
    """Indices (ascending) of the rows of `points` (n, k) that lie in one of `boxes` (half-open,
    (lows, highs) over the k dimensions); none for no boxes. A NaN coordinate is in no box."""
    if points.ndim != 2:
        raise ValueError(f"points must be (n, k), not of shape {points.shape}")
    if not boxes or not len(points):
        return np.empty(0, dtype=np.int64)
    k = points.shape[1]
    if len(boxes[0][0]) != k:  # a subscription's boxes are all over its space's dimensions
        raise ValueError(f"boxes over {len(boxes[0][0])} dimensions, points over {k}")
    bounds = np.fromiter(chain.from_iterable(chain.from_iterable(boxes)), dtype=np.float64, count=len(boxes) * 2 * k)
    lows, highs = bounds.reshape(len(boxes), 2, k).transpose(1, 0, 2)
    some = (lows < highs).all(axis=1)  # a box empty on a dimension holds nothing
    lows, highs = np.ascontiguousarray(lows[some]), np.ascontiguousarray(highs[some])
    if not len(lows):
        return np.empty(0, dtype=np.int64)
    pts = np.ascontiguousarray(points, dtype=np.float64)
    dim, edges, starts, members = _slabs(lows, highs, pts[::max(1, len(pts) // _SAMPLE)])
    out = np.empty(len(pts), dtype=np.int64)
    found = _scan(pts, dim, edges, starts, members, lows, highs, out)
    return out[:found].copy()


def _slabs(lows: Floats, highs: Floats, sample: Floats) -> tuple[int, Floats, Ints, Ints]:
    """The boxes (none empty) cut into slabs on one dimension: (that dimension, its edges: the
    distinct bounds of the boxes there, sorted; slab j is [edges[j], edges[j + 1]) and holds
    the boxes `members[starts[j]:starts[j + 1]]`). The dimension is the one where the points
    of `sample` (some of the chunk's) find fewest boxes in their slabs, then whose fullest
    slab holds fewest."""
    if len(lows) == 1:  # one box: one slab, on any dimension
        return 0, np.array([lows[0, 0], highs[0, 0]]), np.array([0, 1], dtype=np.int64), np.zeros(1, dtype=np.int64)
    best: tuple[tuple[int, int], int, Floats, Ints, Ints] | None = None
    for d in range(lows.shape[1]):
        edges = np.unique(np.concatenate([lows[:, d], highs[:, d]]))
        first = np.searchsorted(edges, lows[:, d])
        end = np.searchsorted(edges, highs[:, d])  # a box holds slabs first .. end - 1
        # boxes per slab, and a last 0: past the last edge (or at a NaN), and read at -1, below the first
        per_slab = np.cumsum(np.bincount(first, minlength=len(edges)) - np.bincount(end, minlength=len(edges)))
        slab = np.searchsorted(edges, sample[:, d], side="right") - 1
        score = (int(per_slab[slab].sum()), int(per_slab.max()))
        if best is None or score < best[0]:
            best = (score, d, edges, first, end)
    assert best is not None  # there is a dimension: the caller checked the boxes' shape
    _, dim, edges, first, end = best
    spans = end - first
    box = np.repeat(np.arange(len(first), dtype=np.int64), spans)
    at = np.cumsum(spans) - spans  # where each box's run starts in `box`
    slab = np.repeat(first, spans) + np.arange(len(box), dtype=np.int64) - np.repeat(at, spans)
    order = np.argsort(slab, kind="stable")
    starts = np.zeros(len(edges), dtype=np.int64)
    np.cumsum(np.bincount(slab, minlength=len(edges) - 1), out=starts[1:])
    return dim, edges, starts, box[order]


@compiled
def _scan(points: Floats, dim: int, edges: Floats, starts: Ints, members: Ints, lows: Floats, highs: Floats,
          out: Ints) -> int:
    """Write to `out` the rows of `points` in a box of their slab on `dim` (`_slabs`), in order;
    returns how many."""
    n_edges = len(edges)
    k = points.shape[1]
    found = 0
    for i in range(points.shape[0]):
        x = points[i, dim]
        lo = 0
        hi = n_edges
        while lo < hi:  # the edges at or below x (none for a NaN)
            mid = (lo + hi) >> 1
            if edges[mid] <= x:
                lo = mid + 1
            else:
                hi = mid
        j = lo - 1
        if j < 0 or j >= n_edges - 1:
            continue
        for s in range(starts[j], starts[j + 1]):
            b = members[s]
            inside = True
            for d in range(k):
                v = points[i, d]
                if not (lows[b, d] <= v < highs[b, d]):
                    inside = False
                    break
            if inside:
                out[found] = i
                found += 1
                break
    return found
