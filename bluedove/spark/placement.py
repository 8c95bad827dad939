"""Equal-load boundaries and risk-aware placement: the pure arithmetic of the skew job.

Everything here works on aggregates the job has already brought back from Spark (histograms of
a few thousand buckets, a covariance matrix of k·N segments); numpy only, no Spark, no I/O.

Boundaries (`equal_load_cuts`): the load of a dimension is known per fine bucket; cuts go
where the cumulative load reaches each 1/N of the rest, interpolating inside a bucket (load
spread evenly in it). A bucket flagged as an *atom* (one value carrying much load, which no
boundary can split) is never cut inside: the segment ends just before it or just after it,
whichever leaves the segment nearer its share, and the segments after it share what remains.

Placement (`place`): every matcher owns one segment per dimension. A message is routed to one
of its k candidates, the owners of its value's segment on each dimension, and the adaptive
forwarding spreads it among them, so a matcher's load is modelled as V_j = Σ_d L[d, π_d(j)] / k.
With the segments' mean loads μ and covariance Σ over time windows, the risk of a matcher is
P(V_j > C) under a normal approximation, 1 − Φ((C − μ_j) / σ_j), σ_j² = 1ᵀ Σ_j 1 (GEMOM's
eq. 2–3). `place` minimises the worst risk: first-fit decreasing by effective size μ + zσ
(the approach of correlation-aware operator placement, Xing et al., ICDE 2005), then pairwise
swaps of one dimension's segments between two matchers while the worst risk falls.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Assignment = npt.NDArray[np.int64]  # [d, j]: the segment of dimension d that matcher j owns
Buckets = npt.NDArray[np.intp]  # per fine bucket of a dimension, the segment holding it


# -- boundaries ----------------------------------------------------------------------------
def equal_load_cuts(edges: npt.ArrayLike, load: npt.ArrayLike, n: int,
                    atoms: Iterable[int] = ()) -> tuple[list[float], list[float]]:
    """N−1 interior cuts over buckets `edges` (B+1 rising) with `load` (B, ≥ 0) for n segments,
    and each segment's share of the load. `atoms`: indexes of buckets that must not be cut."""
    edges = np.asarray(edges, dtype=np.float64)
    load = np.clip(np.asarray(load, dtype=np.float64), 0.0, None)
    atoms = set(int(a) for a in atoms)
    lo_all, hi_all = float(edges[0]), float(edges[-1])
    cuts: list[float] = []
    remaining, acc = float(load.sum()), 0.0
    for b in range(len(load)):
        lo, hi, L = float(edges[b]), float(edges[b + 1]), float(load[b])
        used = 0.0  # part of this bucket's load already in earlier segments
        while len(cuts) < n - 1 and remaining > 0:
            target = remaining / (n - len(cuts))
            need = target - acc
            if L - used < need:  # the bucket's rest fits in the current segment
                break
            if b in atoms:
                # Close the segment before the atom or after it, whichever leaves its load
                # nearer the share; an empty segment never closes before it.
                before = acc > 0 and target - acc < acc + (L - used) - target
                if before:
                    cut, taken = lo, 0.0
                else:
                    cut, taken = hi, L - used
            else:
                taken = need
                cut = lo + (hi - lo) * ((used + need) / L if L > 0 else 1.0)
            if cuts and cut <= cuts[-1] or not lo_all < cut < hi_all:
                break  # no room for another cut here: carry on with the next bucket
            cuts.append(cut)
            used += taken
            remaining -= acc + taken
            acc = 0.0
            if b in atoms and not before:
                break
        acc += L - used
    cuts = _fill(cuts, n, lo_all, hi_all)
    return cuts, segment_shares(edges, load, cuts)


def _fill(cuts: list[float], n: int, lo: float, hi: float) -> list[float]:
    """Make n−1 strictly rising cuts: when the load runs out (or sits in atoms) before every cut
    is placed, the widest remaining segments are halved (they carry no load to balance)."""
    cuts = sorted(set(c for c in cuts if lo < c < hi))
    while len(cuts) < n - 1:
        bounds = [lo, *cuts, hi]
        widths = [b - a for a, b in zip(bounds, bounds[1:])]
        w = int(np.argmax(widths))
        mid = bounds[w] + widths[w] / 2
        if not bounds[w] < mid < bounds[w + 1]:
            raise ValueError(f"cannot cut [{lo}, {hi}) into {n} segments")
        cuts.insert(w, mid)
        cuts.sort()
    return cuts


def segment_shares(edges: npt.ArrayLike, load: npt.ArrayLike, cuts: Sequence[float]) -> list[float]:
    """Each segment's share of the total load (buckets cut by a boundary split evenly)."""
    edges = np.asarray(edges, dtype=np.float64)
    load = np.asarray(load, dtype=np.float64)
    cum = np.concatenate([[0.0], np.cumsum(load)])
    bounds = [edges[0], *cuts, edges[-1]]
    at = np.interp(bounds, edges, cum)
    total = float(cum[-1]) or 1.0
    return [float(b - a) / total for a, b in zip(at, at[1:])]


def segment_of(edges: npt.ArrayLike, cuts: Sequence[float]) -> Buckets:
    """For each bucket, the segment holding it: the one its centre falls in."""
    edges = np.asarray(edges, dtype=np.float64)
    centres: Floats = (edges[:-1] + edges[1:]) / 2
    return np.searchsorted(np.asarray(cuts, dtype=np.float64), centres, side="right")


# -- risk ----------------------------------------------------------------------------------
def _upper_tail(x: float) -> float:
    """P(Z > x) for a standard normal Z."""
    return 0.5 * math.erfc(x / math.sqrt(2.0))


def matcher_loads(mu: Floats, cov: Floats, assign: Assignment, n: int) -> tuple[Floats, Floats]:
    """Mean and standard deviation of every matcher's load; `assign[d, j]` is the segment of
    dimension d that matcher j owns, `mu`/`cov` indexed by d·n + segment (already ÷ k)."""
    k = assign.shape[0]
    means, sds = np.empty(n), np.empty(n)
    for j in range(n):
        cols = [d * n + int(assign[d, j]) for d in range(k)]
        means[j] = float(np.sum(mu[cols]))
        sds[j] = math.sqrt(max(float(np.sum(cov[np.ix_(cols, cols)])), 0.0))
    return means, sds


def risks(mu: Floats, cov: Floats, assign: Assignment, n: int, capacity: float) -> Floats:
    """P(V_j > C) per matcher; a matcher with no variance is 0 below C and 1 above."""
    means, sds = matcher_loads(mu, cov, assign, n)
    out = np.empty(n)
    for j in range(n):
        if sds[j] <= 0:
            out[j] = 1.0 if means[j] > capacity else 0.0
        else:
            out[j] = _upper_tail((capacity - means[j]) / sds[j])
    return out


def round_robin(k: int, n: int) -> Assignment:
    """Today's layout: matcher j owns segment j of every dimension."""
    return np.tile(np.arange(n), (k, 1))


def _score(mu: Floats, cov: Floats, assign: Assignment, n: int, capacity: float, z: float) -> tuple[float, float]:
    """What `place` minimises: the worst risk, then the worst effective load μ_j + zσ_j."""
    means, sds = matcher_loads(mu, cov, assign, n)
    return float(np.max(risks(mu, cov, assign, n, capacity))), float(np.max(means + z * sds))


def place(mu: npt.ArrayLike, cov: npt.ArrayLike, k: int, n: int, capacity: float, z: float = 1.645,
          max_rounds: int = 50) -> Assignment:
    """An assignment (k × n, row d a permutation of 0..n−1) that keeps the worst P(V_j > C) low."""
    mu = np.asarray(mu, dtype=np.float64)
    cov = np.asarray(cov, dtype=np.float64)
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    assign = np.full((k, n), -1, dtype=np.int64)
    members: list[list[int]] = [[] for _ in range(n)]  # flat segment columns per matcher
    # First fit decreasing: the biggest segment (μ + zσ) first, to the matcher where the load
    # it ends with, counting its covariance with what is already there, is smallest.
    for col in sorted(range(k * n), key=lambda c: -(mu[c] + z * sd[c])):
        d, s = divmod(col, n)
        best, best_eff = -1, math.inf
        for j in range(n):
            if assign[d, j] >= 0:
                continue
            cols = members[j] + [col]
            eff = float(np.sum(mu[cols])) + z * math.sqrt(max(float(np.sum(cov[np.ix_(cols, cols)])), 0.0))
            if eff < best_eff:
                best, best_eff = j, eff
        assign[d, best] = s
        members[best].append(col)
    # Pairwise swaps within a dimension while the worst risk (then effective load) falls,
    # from round robin instead when that starts better: never worse than today's layout.
    score = _score(mu, cov, assign, n, capacity, z)
    rr = round_robin(k, n)
    if _score(mu, cov, rr, n, capacity, z) < score:
        assign, score = rr, _score(mu, cov, rr, n, capacity, z)
    for _ in range(max_rounds):
        improved = False
        for d in range(k):
            for a in range(n):
                for b in range(a + 1, n):
                    assign[d, a], assign[d, b] = assign[d, b], assign[d, a]
                    new = _score(mu, cov, assign, n, capacity, z)
                    if new < score:
                        score, improved = new, True
                    else:
                        assign[d, a], assign[d, b] = assign[d, b], assign[d, a]
        if not improved:
            break
    return assign


def gain(p_placed: float, p_round_robin: float) -> float | None:
    """GEMOM's normalised gain (P_rr − P) / P_rr; None when round robin carries no risk."""
    return None if p_round_robin <= 0 else (p_round_robin - p_placed) / p_round_robin


def hot_spots(edges: npt.ArrayLike, load: npt.ArrayLike, factor: float = 3.0, top: int = 5) -> list[dict[str, float]]:
    """The densest ranges of a dimension: runs of buckets whose load per unit of width is at
    least `factor` times the dimension's mean, the `top` largest by share of the load."""
    edges = np.asarray(edges, dtype=np.float64)
    load = np.asarray(load, dtype=np.float64)
    total = float(load.sum())
    if total <= 0:
        return []
    width = np.diff(edges)
    mean_density = total / float(edges[-1] - edges[0])
    hot = load / np.where(width > 0, width, np.inf) >= factor * mean_density
    runs: list[dict[str, float]] = []
    b = 0
    while b < len(load):
        if not hot[b]:
            b += 1
            continue
        start = b
        while b < len(load) and hot[b]:
            b += 1
        runs.append({"low": float(edges[start]), "high": float(edges[b]),
                     "load_share": float(load[start:b].sum()) / total})
    return sorted(runs, key=lambda r: -r["load_share"])[:top]
