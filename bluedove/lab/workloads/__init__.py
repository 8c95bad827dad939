"""Benchmark and demo workloads (docs/workloads.md), deterministic for a seed.

A workload is a space, a set of subscriptions (arrays of bounds, one row each, wildcards
as the space's bounds), the subscriber (queue) each belongs to, and a message generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from bluedove.core.space import Space


@dataclass(frozen=True)
class Workload:
    """A workload: its space, its subscriptions' bounds and queues, and a message sampler."""

    name: str
    space: Space
    lows: np.ndarray  # (n_subs, k) inclusive lower bounds
    highs: np.ndarray  # (n_subs, k) exclusive upper bounds
    queue_of: np.ndarray  # (n_subs,) index of the subscriber/queue owning each subscription
    n_queues: int
    # sample(n, rng) -> (n, k) message points inside the space
    sample: Callable[[int, np.random.Generator], np.ndarray]

    @property
    def n_subs(self) -> int:
        return len(self.lows)

    def predicates(self, j: int) -> dict[str, list[float]]:
        """Subscription j as an API predicate object (wildcard dimensions left out)."""
        out = {}
        for i, d in enumerate(self.space.dimensions):
            lo, hi = float(self.lows[j, i]), float(self.highs[j, i])
            if lo > d.min or hi < d.max:
                out[d.name] = [lo, hi]
        return out

    def messages(self, n: int, seed: int = 0) -> np.ndarray:
        return self.sample(n, np.random.default_rng(seed))


def brute_force(w_lows: np.ndarray, w_highs: np.ndarray, points: np.ndarray) -> list[np.ndarray]:
    """The oracle: for each point, the indices of the subscriptions it matches."""
    out = []
    for p in points:
        ok = np.all((w_lows <= p) & (p < w_highs), axis=1)
        out.append(np.nonzero(ok)[0])
    return out
