"""Partition seeds: where each dimension is cut and which matcher owns which segment.

A seed is JSON, either the version 1 form a skew-statistics job writes (docs/operations.md,
"Seeds": `matchers`, per dimension `boundaries` (N+1 rising values from the dimension's min to
its max) and an optional load `histogram`, and a `placement` giving every matcher j one segment
index per dimension), or the old form `{"cuts": [[N-1 interior cuts] per dimension]}` (matcher
j owns segment j everywhere). Matcher j of a seed is the j-th member of the table's members.

Pure: no I/O. Errors are `SeedError`s naming the field (`seed.dimensions.x1.boundaries: …`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypeGuard

from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import Space


class SeedError(ValueError):
    """A seed that cannot be used with this space and these members; the message names the field."""


@dataclass(frozen=True)
class Histogram:
    """A dimension's load histogram: B buckets' load between B+1 rising edges."""

    edges: tuple[float, ...]  # B+1 rising values
    load: tuple[float, ...]  # B values >= 0


@dataclass(frozen=True)
class Seed:
    """A checked seed, dimensions in the space's order."""

    names: tuple[str, ...]  # the space's dimension names
    matchers: int
    boundaries: tuple[tuple[float, ...], ...]  # per dimension: N+1 values, min .. max
    placement: tuple[tuple[int, ...], ...]  # placement[j][i]: matcher j's segment index on dimension i
    histograms: tuple[Histogram | None, ...]  # per dimension

    def split_point(self, dim: int, lo: float, hi: float) -> float | None:
        """`seed_split_point` of this seed: the split planner's hint (segments.SplitHints)."""
        return seed_split_point(self, dim, lo, hi)


def _finite(v: object) -> TypeGuard[float]:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _int(v: object) -> TypeGuard[int]:
    return not isinstance(v, bool) and isinstance(v, int)


def parse_seed(data: object, space: Space, members: int | None) -> Seed:
    """Check `data` (either form) against `space` and a count of `members` (None: any count, as
    for the split planner reading the seed a cluster was laid out by); raise SeedError."""
    if isinstance(data, Seed):
        if members is not None and data.matchers != members:
            raise SeedError(f"seed.matchers: {data.matchers} matchers, but the cluster has {members}")
        return data
    if members is not None and members < 1:
        raise SeedError("a segment table needs at least one matcher")
    if isinstance(data, dict) and set(data) == {"cuts"}:
        cuts = data["cuts"]
        count = members if members is not None else (len(cuts[0]) + 1 if isinstance(cuts, list) and cuts
                                                     and isinstance(cuts[0], list) else 1)
        return _parse_cuts(cuts, space, count)
    if not isinstance(data, dict) or ("version" not in data and "cuts" not in data):
        raise SeedError('seed: expected a JSON object with "version": 1 (or the old form '
                        '{"cuts": [[c1, ..., c_N-1] for each dimension]})')
    if data.get("version") != 1:
        raise SeedError(f"seed.version: {data.get('version')!r} is not supported (expected 1)")
    n = data.get("matchers")
    if not _int(n) or n < 1:
        raise SeedError(f"seed.matchers: expected a positive integer, got {n!r}")
    if members is not None and n != members:
        raise SeedError(f"seed.matchers: {n} matchers, but the cluster has {members}")
    if "space" in data:
        _check_space(data["space"], space)
    dims = data.get("dimensions")
    if not isinstance(dims, dict):
        raise SeedError("seed.dimensions: expected an object with one entry per dimension")
    missing = [name for name in space.names if name not in dims]
    unknown = sorted(set(dims) - set(space.names))
    if missing or unknown:
        raise SeedError(f"seed.dimensions: expected exactly {', '.join(space.names)}"
                        + (f"; missing {', '.join(missing)}" if missing else "")
                        + (f"; unknown {', '.join(unknown)}" if unknown else ""))
    boundaries, histograms = [], []
    for d in space.dimensions:
        entry = dims[d.name]
        where = f"seed.dimensions.{d.name}"
        if not isinstance(entry, dict):
            raise SeedError(f"{where}: expected an object with boundaries")
        boundaries.append(_boundaries(entry.get("boundaries"), f"{where}.boundaries", d.min, d.max, n))
        histograms.append(_histogram(entry.get("histogram"), f"{where}.histogram"))
    placement = _placement(data.get("placement"), space, n)
    return Seed(space.names, n, tuple(boundaries), placement, tuple(histograms))


def _check_space(raw: object, space: Space) -> None:
    try:
        given = Space.from_json(raw)
    except Exception as exc:
        raise SeedError(f"seed.space: not a space ({exc})") from exc
    if given != space:
        raise SeedError(f"seed.space: the seed was made for dimensions {', '.join(given.names)} "
                        f"{[(x.min, x.max) for x in given.dimensions]}, the cluster's are {', '.join(space.names)} "
                        f"{[(x.min, x.max) for x in space.dimensions]}")


def _boundaries(b: object, where: str, lo: float, hi: float, n: int) -> tuple[float, ...]:
    if not isinstance(b, list) or len(b) != n + 1:
        raise SeedError(f"{where}: expected {n + 1} values (min, {n - 1} cuts, max) for {n} matchers, got {b!r}")
    for v in b:
        if not _finite(v):
            raise SeedError(f"{where}: {v!r} is not a finite number")
    tol = 1e-9 * (hi - lo)
    if abs(b[0] - lo) > tol or abs(b[-1] - hi) > tol:
        raise SeedError(f"{where}: must start at the dimension's min {lo:g} and end at its max {hi:g}, "
                        f"got {b[0]!r} .. {b[-1]!r}")
    out = [lo, *map(float, b[1:-1]), hi]
    if any(not x < y for x, y in zip(out, out[1:])):
        raise SeedError(f"{where}: values must rise strictly, got {b}")
    return tuple(out)


def _histogram(h: object, where: str) -> Histogram | None:
    if h is None:
        return None
    if not isinstance(h, dict):
        raise SeedError(f"{where}: expected an object with edges and load")
    edges, load = h.get("edges"), h.get("load")
    if not isinstance(edges, list) or len(edges) < 2 or not all(_finite(v) for v in edges) \
            or any(not x < y for x, y in zip(edges, edges[1:])):
        raise SeedError(f"{where}.edges: expected at least 2 finite values rising strictly")
    if not isinstance(load, list) or len(load) != len(edges) - 1:
        raise SeedError(f"{where}.load: expected {len(edges) - 1} values, one per bucket")
    if not all(_finite(v) and v >= 0 for v in load):
        raise SeedError(f"{where}.load: every value must be a finite number >= 0")
    return Histogram(tuple(map(float, edges)), tuple(map(float, load)))


def _placement(p: object, space: Space, n: int) -> tuple[tuple[int, ...], ...]:
    if not isinstance(p, list) or len(p) != n:
        raise SeedError(f"seed.placement: expected {n} entries, one per matcher, got "
                        f"{len(p) if isinstance(p, list) else type(p).__name__}")
    rows: dict[int, tuple[int, ...]] = {}
    for x, entry in enumerate(p):
        where = f"seed.placement[{x}]"
        if not isinstance(entry, dict):
            raise SeedError(f"{where}: expected {{\"matcher\": j, \"segments\": {{...}}}}")
        j = entry.get("matcher")
        if not _int(j) or not 0 <= j < n:
            raise SeedError(f"{where}.matcher: expected an integer from 0 to {n - 1}, got {j!r}")
        if j in rows:
            raise SeedError(f"{where}.matcher: matcher {j} is placed twice")
        segs = entry.get("segments")
        if not isinstance(segs, dict):
            raise SeedError(f"{where}.segments: expected an object: dimension -> segment index")
        unknown = sorted(set(segs) - set(space.names))
        if unknown:
            raise SeedError(f"{where}.segments: unknown dimension {', '.join(unknown)}")
        row: list[int] = []
        for name in space.names:
            idx = segs.get(name)
            if not _int(idx) or not 0 <= idx < n:
                raise SeedError(f"{where}.segments.{name}: expected a segment index from 0 to {n - 1}, got {idx!r}")
            row.append(idx)
        rows[j] = tuple(row)
    for i, name in enumerate(space.names):
        seen: dict[int, int] = {}
        for x, entry in enumerate(p):
            idx = rows[entry["matcher"]][i]
            if idx in seen:
                raise SeedError(f"seed.placement[{x}].segments.{name}: segment {idx} is already placed on "
                                f"matcher {p[seen[idx]]['matcher']}")
            seen[idx] = x
    return tuple(rows[j] for j in range(n))


def _parse_cuts(cuts: object, space: Space, n: int) -> Seed:
    if not isinstance(cuts, list):
        raise SeedError('seed: expected {"cuts": [[c1, ..., c_N-1] for each dimension]}')
    if len(cuts) != space.k:
        raise SeedError(f"seed.cuts: {len(cuts)} lists for a space of {space.k} dimensions "
                        f"({', '.join(space.names)})")
    out = []
    for i, (d, c) in enumerate(zip(space.dimensions, cuts)):
        where = f"seed.cuts[{i}] ({d.name})"
        if not isinstance(c, list) or len(c) != n - 1:
            raise SeedError(f"{where}: expected {n - 1} interior cuts for {n} matchers, got {c!r}")
        for v in c:
            if not _finite(v):
                raise SeedError(f"{where}: {v!r} is not a finite number")
        bounds = (d.min, *map(float, c), d.max)
        if any(not a < b for a, b in zip(bounds, bounds[1:])):
            raise SeedError(f"{where}: cuts must rise strictly inside ({d.min:g}, {d.max:g}), got {c}")
        out.append(bounds)
    return Seed(space.names, n, tuple(out), tuple((j,) * space.k for j in range(n)), (None,) * space.k)


# -- tables -----------------------------------------------------------------------------------
def seeded_table(space: Space, members: dict[str, str], seed: object, epoch: int = 1) -> SegmentTable:
    """The table the seed describes: its boundaries as cuts, matcher j (the j-th member) owning
    segment placement[j][i] of dimension i. Raises SeedError."""
    s = parse_seed(seed, space, len(members))
    ids = list(members)
    cuts, owners = [], []
    for i in range(space.k):
        cuts.append(s.boundaries[i][:-1])
        row = [""] * s.matchers
        for j, m in enumerate(ids):
            row[s.placement[j][i]] = m
        owners.append(tuple(row))
    return SegmentTable(epoch, space, dict(members), tuple(cuts), tuple(owners))


def reseeded(table: SegmentTable, seed: object) -> SegmentTable:
    """The next epoch of a running table laid out as the seed says: the same members (and
    addresses), matcher j of the seed being the table's j-th member. Raises SeedError."""
    return seeded_table(table.space, table.members, seed, table.epoch + 1)


def seed_split_point(seed: Seed | dict[str, Any] | None, dim: int | str, lo: float, hi: float) -> float | None:
    """Where the seed's histogram load inside [lo, hi) halves (load spread evenly within a
    bucket), strictly inside (lo, hi); None without a histogram or any load there. `seed` is a
    parsed Seed, or a seed's JSON that names its space."""
    if seed is None:
        return None
    if isinstance(seed, dict):
        if "space" not in seed:
            raise SeedError("seed.space: needed to read the seed without a cluster's space")
        try:
            space = Space.from_json(seed["space"])
        except Exception as exc:
            raise SeedError(f"seed.space: not a space ({exc})") from exc
        seed = parse_seed(seed, space, None)
    if isinstance(dim, str):
        if dim not in seed.names:
            raise SeedError(f"seed_split_point: no dimension {dim!r} (the seed's are {', '.join(seed.names)})")
        dim = seed.names.index(dim)
    h = seed.histograms[dim] if 0 <= dim < len(seed.histograms) else None
    if h is None or not lo < hi:
        return None
    parts = []  # (a, b, load) of each bucket's overlap with [lo, hi)
    for x, w in enumerate(h.load):
        a, b = max(h.edges[x], lo), min(h.edges[x + 1], hi)
        share = w * (b - a) / (h.edges[x + 1] - h.edges[x]) if a < b else 0.0
        if share > 0:  # (a load so small that its share rounds to 0 counts as none: no division by it)
            parts.append((a, b, share))
    total = sum(w for _, _, w in parts)
    if total <= 0:
        return None
    acc = 0.0
    for a, b, w in parts:
        if acc + w >= total / 2:
            cut = a + (b - a) * (total / 2 - acc) / w
            return cut if lo < cut < hi else None
        acc += w
    return None

