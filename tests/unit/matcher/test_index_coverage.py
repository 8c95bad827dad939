"""SubscriptionSet.coverage (the matchers' subscription density) against brute force: through
adds, bulk adds, removals and packs (which reorder the stored dimensions), asked again
between changes (the sorted bounds are kept until the set changes)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bluedove.matcher.index import PackThresholds, SubscriptionSet


def brute(subs: dict, dim: int, values: list[float]) -> list[int]:
    return [sum(1 for lo, hi in subs.values() if lo[dim] <= v < hi[dim]) for v in values]


@pytest.mark.parametrize("k", [1, 3])
def test_coverage_counts_the_ranges_holding_each_value(k):
    rng = random.Random(k)
    s = SubscriptionSet(k, PackThresholds(bulk_min=8, delta_min=8, ratio=2))
    subs = {}
    for i in range(300):
        lo = [rng.choice([0.0, 10.0, rng.uniform(0, 100)]) for _ in range(k)]
        hi = [a + rng.choice([1e-9, 5.0, 50.0, rng.uniform(0, 100)]) for a in lo]
        if rng.random() < 0.5:
            s.add(f"s{i}", "q", lo, hi)
        else:
            s.add_many([f"s{i}"], ["q"], np.array([lo]), np.array([hi]))
        subs[f"s{i}"] = (lo, hi)
        if rng.random() < 0.2:
            gone = rng.choice(list(subs))
            s.remove(gone)
            del subs[gone]
        if i % 25 == 0 or i == 299:  # asked again after changes: nothing stale is kept
            values = [0.0, 5.0, 10.0, 15.0, 55.0, 99.9, 150.0, *(rng.uniform(0, 150) for _ in range(40))]
            values += [lo[0] for lo, _ in list(subs.values())[:10]] + [hi[0] for _, hi in list(subs.values())[:10]]
            for dim in range(k):
                assert s.coverage(dim, values) == brute(subs, dim, values), (i, dim)
                assert s.coverage(dim, values) == brute(subs, dim, values), (i, dim)  # kept bounds


def test_coverage_of_an_empty_set_is_zeros():
    assert SubscriptionSet(2).coverage(1, [1.0, 2.0]) == [0, 0]
