"""The segment table and mPartition (the BlueDove paper §III-A).

Each searchable dimension's range is cut into contiguous, non-overlapping segments, and
each matcher owns one segment per dimension. A subscription goes, along dimension i, to
every owner whose dim-i segment overlaps its range; a message's candidate along i is the
owner of the segment holding its value. Pure: no I/O, no clocks.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from bluedove.core.load import LoadReport
from bluedove.core.space import Space


@dataclass(frozen=True)
class SegmentTable:
    """Versioned assignment of segments to matchers.

    `cuts[i]` are the lower bounds of dimension i's segments in increasing order (the first is
    the space's min; segment j is `[cuts[i][j], cuts[i][j+1])`, the last ends at the space's
    max); `owners[i][j]` is the member id owning segment j of dimension i.
    """

    epoch: int
    space: Space
    members: dict[str, str]  # member id -> gRPC address
    cuts: tuple[tuple[float, ...], ...]
    owners: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        if len(self.cuts) != self.space.k or len(self.owners) != self.space.k:
            raise ValueError("segment table: one list of cuts and owners per dimension is required")
        for i, (cuts, owners) in enumerate(zip(self.cuts, self.owners)):
            dim = self.space.dimensions[i]
            if not cuts or len(cuts) != len(owners):
                raise ValueError(f"segment table: dimension {dim.name} needs one owner per segment")
            # `not a < b` rather than `a >= b`: a NaN cut must fail the check, not slip past it.
            if cuts[0] != dim.min or any(not a < b for a, b in zip(cuts, cuts[1:])) or not cuts[-1] < dim.max:
                raise ValueError(f"segment table: cuts of {dim.name} must rise from {dim.min} inside the space")
            unknown = set(owners) - set(self.members)
            if unknown:
                raise ValueError(f"segment table: owners {sorted(unknown)} of {dim.name} are not members")
            # A member owns one contiguous range per dimension (runs of the same owner).
            runs = [o for j, o in enumerate(owners) if j == 0 or owners[j - 1] != o]
            if len(runs) != len(set(runs)):
                raise ValueError(f"segment table: a member's segments of {dim.name} must be adjacent, "
                                 f"got {list(owners)}")

    # -- lookups ---------------------------------------------------------------------------
    def segment_bounds(self, dim: int, j: int) -> tuple[float, float]:
        cuts = self.cuts[dim]
        hi = cuts[j + 1] if j + 1 < len(cuts) else self.space.dimensions[dim].max
        return cuts[j], hi

    def owner_at(self, dim: int, value: float) -> str:
        """The owner of the segment of dimension `dim` that holds `value`."""
        j = bisect_right(self.cuts[dim], value) - 1
        return self.owners[dim][max(j, 0)]

    def candidates(self, point: tuple[float, ...] | list[float]) -> list[tuple[int, str]]:
        """A message's candidate matchers: (dimension, owner) for every dimension."""
        return [(i, self.owner_at(i, v)) for i, v in enumerate(point)]

    @cached_property
    def _arrays(self) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
        members = list(self.members)
        at = {m: i for i, m in enumerate(members)}
        return (members, [np.asarray(c, dtype=np.float64) for c in self.cuts],
                [np.array([at[o] for o in owners], dtype=np.int64) for owners in self.owners])

    def owners_at(self, dim: int, values: np.ndarray) -> np.ndarray:
        """`owner_at` for many values: each owner as an index into `list(self.members)`."""
        _, cuts, owners = self._arrays
        j = np.searchsorted(cuts[dim], values, side="right") - 1
        return owners[dim][np.maximum(j, 0)]

    def overlapping(self, dim: int, low: float, high: float) -> set[str]:
        """Owners of the dim segments overlapping [low, high); none for an empty range."""
        if low >= high:
            return set()
        cuts = self.cuts[dim]
        first = max(bisect_right(cuts, low) - 1, 0)
        last = bisect_right(cuts, high)  # segments starting at or below high...
        out = set()
        for j in range(first, last):
            lo, hi = self.segment_bounds(dim, j)
            # ...but a segment starting exactly at high does not overlap [low, high), nor does
            # the last one when the range lies at or above the space's max.
            if lo < high and low < hi:
                out.add(self.owners[dim][j])
        return out

    def placement(self, lows: tuple[float, ...], highs: tuple[float, ...]) -> dict[str, set[int]]:
        """mPartition: member id -> the dimensions along which it stores the subscription."""
        out: dict[str, set[int]] = {}
        for i in range(self.space.k):
            for m in self.overlapping(i, lows[i], highs[i]):
                out.setdefault(m, set()).add(i)
        return out

    def storers(self, lows: np.ndarray, highs: np.ndarray, dims: range | None = None) -> dict[str, np.ndarray]:
        """`placement` of many boxes within the space (rows of `lows`/`highs`) at once, along
        `dims` (all by default): member id -> a mask of the rows it stores; members storing
        none left out. A member's segments of a dimension are adjacent, so a row goes to each
        member whose run of segments [a, b) meets the row's [first, last): from the segment
        holding its low to the last one starting below its high."""
        out: dict[str, np.ndarray] = {}
        _, cuts, _ = self._arrays
        for i in dims if dims is not None else range(self.space.k):
            lo, hi = lows[:, i], highs[:, i]
            first = np.searchsorted(cuts[i], lo, side="right") - 1
            last = np.searchsorted(cuts[i], hi, side="left")
            ok = lo < hi
            for m, (a, b) in self._runs[i].items():
                hit = ok & (first < b) & (last > a)
                out[m] = out[m] | hit if m in out else hit
        return {m: mask for m, mask in out.items() if mask.any()}

    @cached_property
    def _runs(self) -> list[dict[str, tuple[int, int]]]:
        """Per dimension, each owner's run of segments [a, b) (they are adjacent)."""
        runs: list[dict[str, tuple[int, int]]] = []
        for owners in self.owners:
            run: dict[str, tuple[int, int]] = {}
            for j, o in enumerate(owners):
                run[o] = (run[o][0] if o in run else j, j + 1)
            runs.append(run)
        return runs

    def segments_of(self, member: str) -> dict[int, tuple[float, float]]:
        """The range a member owns on each dimension (contiguous; missing if it owns none)."""
        out: dict[int, tuple[float, float]] = {}
        for i, owners in enumerate(self.owners):
            js = [j for j, o in enumerate(owners) if o == member]
            if js:
                out[i] = (self.segment_bounds(i, js[0])[0], self.segment_bounds(i, js[-1])[1])
        return out

    # -- serialisation ---------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "space": self.space.to_json(),
            "members": dict(self.members),
            "cuts": [list(c) for c in self.cuts],
            "owners": [list(o) for o in self.owners],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "SegmentTable":
        return cls(
            epoch=int(data["epoch"]),
            space=Space.from_json(data["space"]),
            members=dict(data["members"]),
            cuts=tuple(tuple(float(x) for x in c) for c in data["cuts"]),
            owners=tuple(tuple(o) for o in data["owners"]),
        )


def equal_partition(space: Space, members: dict[str, str], epoch: int = 1) -> SegmentTable:
    """Cut every dimension into len(members) equal-width segments; member j owns segment j."""
    ids = list(members)
    n = len(ids)
    if n == 0:
        raise ValueError("a segment table needs at least one matcher")
    cuts = []
    for d in space.dimensions:
        width = (d.max - d.min) / n
        cuts.append(tuple(d.min + j * width for j in range(n)))
    owners = tuple(tuple(ids) for _ in space.dimensions)
    return SegmentTable(epoch, space, dict(members), tuple(cuts), owners)


def merge_out(table: SegmentTable, gone: set[str],
              weight: Callable[[str], float] | None = None) -> SegmentTable:
    """The next epoch's table without the `gone` members (the BlueDove paper §III-C, takeover).

    On each dimension every run of segments owned by gone members is merged into an adjacent
    live owner: the lighter of the two neighbours by `weight(member) -> float` (default: all
    equal; ties go left), so each member still owns one contiguous range per dimension.
    """
    live = [m for m in table.members if m not in gone]
    if not live:
        raise ValueError("cannot take over: every owner is gone")
    weight = weight or (lambda m: 0.0)
    cuts_out, owners_out = [], []
    for i in range(table.space.k):
        owners = list(table.owners[i])
        n = len(owners)
        j = 0
        while j < n:
            if owners[j] not in gone:
                j += 1
                continue
            end = j
            while end < n and owners[end] in gone:
                end += 1
            left = owners[j - 1] if j > 0 else None
            right = owners[end] if end < n else None
            taker = left if right is None or (left is not None and weight(left) <= weight(right)) else right
            if taker is None:  # neither neighbour is live
                raise ValueError(f"cannot take over dimension {table.space.dimensions[i].name}: no live owner")
            owners[j:end] = [taker] * (end - j)
            j = end
        # Adjacent segments of one owner become one segment.
        keep = [j for j in range(n) if j == 0 or owners[j] != owners[j - 1]]
        cuts_out.append(tuple(table.cuts[i][j] for j in keep))
        owners_out.append(tuple(owners[j] for j in keep))
    members = {m: a for m, a in table.members.items() if m not in gone}
    return SegmentTable(table.epoch + 1, table.space, members, tuple(cuts_out), tuple(owners_out))


def hand_over(table: SegmentTable, taker: str, addr: str) -> SegmentTable:
    """The next epoch's table with one owner, `taker`, of the whole range of every dimension: a
    named space whose owners are all gone, or whose last live one leaves, lives on there."""
    cuts = tuple((c[0],) for c in table.cuts)
    owners = tuple((taker,) for _ in table.cuts)
    return SegmentTable(table.epoch + 1, table.space, {taker: addr}, cuts, owners)


def grown(old: SegmentTable, new: SegmentTable) -> dict[str, dict[int, tuple[float, float]]]:
    """Members whose range grew from `old` to `new`: member -> {dim: new range}, for a hand-off."""
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for m in new.members:
        before, after = old.segments_of(m), new.segments_of(m)
        for i, rng in after.items():
            was = before.get(i)
            if was is None or rng[0] < was[0] or was[1] < rng[1]:  # not inside the old range
                out.setdefault(m, {})[i] = rng
    return out


def gained(old: SegmentTable, taker: str, ranges: dict[int, tuple[float, float]]
           ) -> list[tuple[int, set[str], float, float]]:
    """What `taker` gains of its grown `ranges` (grown()'s entry for it): per dimension the new
    range minus the old one, below and above it (a re-seed may move a range clear of the old
    one, so each part is clipped to the new range), with the part's other owners in `old`:
    (dim, owners, low, high). A hand-off fetches each part from its single old owner."""
    out = []
    before = old.segments_of(taker)
    for i, (lo, hi) in ranges.items():
        was = before.get(i)
        parts = [(lo, hi)] if was is None else [(lo, min(hi, was[0])), (max(lo, was[1]), hi)]
        out += [(i, old.overlapping(i, a, b) - {taker}, a, b) for a, b in parts if a < b]
    return out


def split(table: SegmentTable, new_id: str, new_addr: str, at: dict[int, tuple[str, float]]) -> SegmentTable:
    """The next epoch's table with `new_id` joined (the BlueDove paper §III-C, a join is a split).

    `at[i] = (owner, value)`: on dimension i, `owner`'s range is cut at `value`; the owner keeps
    the lower part and the new member takes the upper one, so both own one contiguous range.
    """
    if new_id in table.members:
        raise ValueError(f"{new_id} already owns segments")
    if set(at) != set(range(table.space.k)):
        raise ValueError("a joining member takes one part on every dimension")
    cuts_out, owners_out = [], []
    for i in range(table.space.k):
        owner, value = at[i]
        rng = table.segments_of(owner).get(i)
        if rng is None or not rng[0] < value < rng[1]:
            raise ValueError(f"cannot split {owner}'s range {rng} of {table.space.dimensions[i].name} at {value}")
        cuts, owners = list(table.cuts[i]), list(table.owners[i])
        last = max(j for j, o in enumerate(owners) if o == owner)
        # The owner's range is one run of segments: the new member takes everything from `value`.
        j = max(j for j in range(len(cuts)) if owners[j] == owner and cuts[j] <= value)
        if cuts[j] == value:  # an existing boundary: hand over the segments from j on
            owners[j:last + 1] = [new_id] * (last + 1 - j)
        else:
            cuts.insert(j + 1, value)
            owners.insert(j + 1, new_id)
            last += 1
            owners[j + 1:last + 1] = [new_id] * (last - j)
        keep = [x for x in range(len(cuts)) if x == 0 or owners[x] != owners[x - 1]]
        cuts_out.append(tuple(cuts[x] for x in keep))
        owners_out.append(tuple(owners[x] for x in keep))
    members = {**table.members, new_id: new_addr}
    return SegmentTable(table.epoch + 1, table.space, members, tuple(cuts_out), tuple(owners_out))


def shrunk(old: SegmentTable, new: SegmentTable) -> set[str]:
    """Members of `old` whose range got smaller in `new` (they keep the rest for a grace period)."""
    out = set()
    for m in old.members:
        before, after = old.segments_of(m), new.segments_of(m)
        if any(after.get(i) != rng for i, rng in before.items()):
            out.add(m)
    return out


def hottest(table: SegmentTable, dim: int, loads: dict[str, list[LoadReport]]) -> str:
    """The owner whose dim set carries the most load: processing (λ/μ, then queue), then size."""
    owners = list(dict.fromkeys(table.owners[dim]))

    def key(m: str) -> tuple[float, int, int]:
        ld = loads.get(m, [])[dim] if dim < len(loads.get(m, [])) else LoadReport()
        return (ld.busy, ld.q, ld.subs)

    return max(owners, key=key)


class SplitHints(Protocol):
    """Where a range's load halves by earlier statistics (a partition seed's histograms,
    `bluedove.core.partition.seeds.Seed`); None when they do not say."""

    def split_point(self, dim: int, lo: float, hi: float) -> float | None: ...


def plan_split(table: SegmentTable, loads: dict[str, list[LoadReport]],
               seed: SplitHints | None = None) -> tuple[dict[int, tuple[str, float]], str]:
    """Where a joining matcher takes its segments (the BlueDove paper §III-C: a new matcher
    takes half of a loaded matcher's segments): for every dimension, (owner to split, value
    to cut at) — `split`'s `at` — and a sentence saying why.

    The hottest segment is cut where its load halves: by the owner's live load (`split_at`)
    first; when the owner saw too few messages to tell, by the seed the cluster was laid out
    by (its histogram inside the range); only without either, at the midpoint."""
    at: dict[int, tuple[str, float]] = {}
    why = []
    names = table.space.names
    for i in range(table.space.k):
        owner = hottest(table, i, loads)
        lo, hi = table.segments_of(owner)[i]
        ld = loads.get(owner, [LoadReport()] * table.space.k)[i]
        cut: float | None
        cut, how = ld.split_at, "load median"
        if not (lo < cut < hi):
            cut, how = (seed.split_point(i, lo, hi) if seed is not None else None), "seed histogram"
            if cut is None or not (lo < cut < hi):
                cut, how = lo + (hi - lo) / 2, "midpoint"
        at[i] = (owner, cut)
        why.append(f"{names[i]}: {owner} (busy {ld.busy:.2f}) at {cut:.6g} ({how})")
    return at, "; ".join(why)
