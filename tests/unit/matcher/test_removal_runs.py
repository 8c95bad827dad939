"""A long run of removals (a deleted queue's 10,000 subscriptions, an unsubscribe storm) is applied
in bounded steps: the catalogue tail in slices of APPLY_SLICE changes, each set repacked at most
once per slice (its packed tree compacted, not sorted again), and tombstones each looked at a
bounded number of times."""

from __future__ import annotations

import numpy as np

from bluedove.core.partition.segments import equal_partition
from bluedove.core.space import default_space
from bluedove.matcher import index
from bluedove.matcher.index import PackThresholds, SubscriptionSet
from bluedove.matcher.sets import TOMBSTONES_CHECKED, SubscriptionSets
from bluedove.matcher.sets_owner import APPLY_SLICE, SetsOwner
from bluedove.runtime.settings import MatcherSettings
from tests.unit.matcher.test_sets_owner import TABLE, Logs, queue_in_shard, tail_until


async def test_the_tail_applies_a_deleted_queues_removals_in_bounded_slices():
    """Every removal of a deleted queue arrives in one read of the log: the tail applies them in
    index jobs of at most APPLY_SLICE changes, in order, and removes exactly them."""
    logs = Logs(True)
    jobs: list[int] = []  # subscriptions of dimension 1's set each index job removed

    async def run_index(fn, *args):
        before = len(o.sets.sets[1])
        out = fn(*args)
        jobs.append(before - len(o.sets.sets[1]))
        return out

    o = SetsOwner(MatcherSettings(id="a", catalog_block_ms=200, catalog_linger_ms=0), logs, run_index)
    o.begin(TABLE)
    q, other = queue_in_shard(2), queue_in_shard(4)
    n = 2 * APPLY_SLICE + 200
    for j in range(n):
        logs.add(f"s{j}", q, j % 500, j % 500 + 1)
    logs.add("keep", other, 0, 10)
    await tail_until(o, logs)
    assert len(o.sets.sets[1]) == n + 1  # every one overlaps a's [0, 500) on x1
    jobs.clear()
    for j in range(n):
        logs.write(q, {"op": "remove", "id": f"s{j}"})
    await tail_until(o, logs)
    assert o.sets.sets[1].ids() == ["keep"]
    assert sum(jobs) == n and max(jobs) <= APPLY_SLICE and len([x for x in jobs if x]) >= 3


def random_boxes(rng: np.random.Generator, n: int, k: int = 3) -> tuple[np.ndarray, np.ndarray]:
    lows = rng.uniform(0, 900, (n, k))
    return lows, lows + rng.uniform(1, 300, (n, k))


def test_a_run_of_removals_repacks_at_most_once_and_stays_exact(monkeypatch):
    """`remove_many` repacks the set at most once, where removing one by one repacks each time
    the masked boxes cross the threshold; both answer exactly (a brute-force check of the boxes
    left), the repacks keeping the packed tree's order rather than sorting it again."""
    rng = np.random.default_rng(5)
    lows, highs = random_boxes(rng, 3000)
    ids = [f"s{j}" for j in range(3000)]
    small = PackThresholds(bulk_min=16, delta_min=16, ratio=4)
    many, one = SubscriptionSet(3, small), SubscriptionSet(3, small)
    for s in (many, one):
        s.add_many(ids[:2000], ["q"] * 2000, lows[:2000], highs[:2000])  # packed
        for j in range(2000, 2100):  # and some in the buffer and smaller trees
            s.add(ids[j], "q", lows[j], highs[j])
    rebuilds = {"pack": 0, "compact": 0}
    for name in rebuilds:
        def counted(self, name=name, was=getattr(index.SubscriptionSet, f"_{name}")):
            rebuilds[name] += 1
            was(self)

        monkeypatch.setattr(index.SubscriptionSet, f"_{name}", counted)
    gone = ids[:1500] + ids[2050:2100] + ["never-added"]
    assert many.remove_many(gone) == 1550
    assert sum(rebuilds.values()) <= 1
    rebuilds.update(pack=0, compact=0)
    assert sum(one.remove(s) for s in gone) == 1550
    assert rebuilds["compact"] > 1
    points = rng.uniform(0, 1000, (400, 3))
    left = [j for j in range(3000) if ids[j] not in gone and j < 2100]
    inside = np.all((lows[left][None] <= points[:, None]) & (points[:, None] < highs[left][None]), axis=2)
    expected = [sorted(ids[left[j]] for j in np.flatnonzero(row)) for row in inside]
    for s in (many, one):
        assert [sorted(x for xs in m.values() for x in xs) for m in s.match_batch(points)] == expected
    assert sorted(many.ids()) == sorted(one.ids()) == sorted(ids[1500:2050])
    assert many.remove_many(gone) == 0  # removed already


def test_sets_remove_many_is_remove_of_each():
    space = default_space()
    table = equal_partition(space, {"a": "", "b": ""})
    rng = np.random.default_rng(2)
    lows, highs = random_boxes(rng, 500, k=4)
    ids = [f"s{j}" for j in range(500)]
    many, one = SubscriptionSets("a", table), SubscriptionSets("a", table)
    for s in (many, one):
        s.add_rows(ids, ["q"] * 500, lows, highs)
    assert many.remove_many(ids[:300], now=0.0) == sum(one.remove(s, now=0.0) for s in ids[:300])
    assert many.counts() == one.counts()
    assert many.add_rows(ids[:1], ["q"], lows[:1], highs[:1]) == 0  # a tombstone holds


class Clock(float):
    """A time that counts how often it is compared: the work of pruning tombstones."""

    compared = 0

    def __lt__(self, other):
        Clock.compared += 1
        return float(self) < other

    def __ge__(self, other):
        Clock.compared += 1
        return float(self) >= other


def test_tombstones_past_the_bound_are_each_looked_at_a_bounded_number_of_times():
    """Past TOMBSTONES_CHECKED tombstones all younger than the TTL, each further removal looks at
    the oldest one only, not at every tombstone: 300 more removals, not 300 scans of 10,000."""
    table = equal_partition(default_space(), {"a": "", "b": ""})
    sets = SubscriptionSets("a", table, tombstone_ttl_s=600.0)
    for j in range(TOMBSTONES_CHECKED):
        sets.remove(f"old{j}", now=Clock(0.0))
    Clock.compared = 0
    for j in range(300):
        sets.remove(f"new{j}", now=Clock(1.0 + j))
    assert Clock.compared <= 10 * 300
    assert len(sets._tombstones) == TOMBSTONES_CHECKED + 300  # all young: all kept
    sets.remove("late", now=Clock(700.0))  # the old ones are past the TTL now: forgotten, the new kept
    assert len(sets._tombstones) == 300 + 1 - sum(1 for j in range(300) if 1.0 + j < 100.0)
