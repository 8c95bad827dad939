"""A set's levels walked in one call (Forest), and the set packing itself anew once its queries
have paid a pack's worth of looking outside its biggest tree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.matcher.forest import Forest
from bluedove.matcher.index import PackThresholds, SubscriptionSet
from bluedove.matcher.levels import Levels
from bluedove.matcher.packed import PackedTree, scan


def boxes(rng, n, k=3):
    lo = rng.uniform(0, 100, (n, k))
    return lo, lo + rng.uniform(0, 30, (n, k))


def one_at_a_time(trees, b, points):
    """Each level queried on its own, then the answers put back in point order (stable)."""
    found = [t.query(points) for t in trees]
    at, rows = scan(points, *b[1:])
    found.append((at, b[0][rows]))
    at = np.concatenate([f[0] for f in found])
    ids = np.concatenate([f[1] for f in found])
    by_point = np.argsort(at, kind="stable")
    return at[by_point], ids[by_point]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.integers(0, 40))
def test_one_walk_gives_what_each_level_gives_in_the_same_order(seed, n_trees, n_buffer):
    rng = np.random.default_rng(seed)
    trees, start = [], 0
    for size in sorted(rng.integers(1, 300, n_trees).tolist(), reverse=True):
        lo, hi = boxes(rng, size)
        trees.append(PackedTree(np.arange(start, start + size), lo, hi))
        start += size
    lo, hi = boxes(rng, n_buffer)
    buffer = (np.arange(start, start + n_buffer), lo, hi, rng.integers(0, 2, n_buffer).astype(np.uint8))
    for t in trees:  # some boxes masked before the forest is made
        t.kill_many(rng.choice(t.ids, size=len(t) // 5, replace=False))
    forest = Forest(trees)
    points = rng.uniform(0, 130, (int(rng.integers(1, 50)), 3))
    at, ids, _ = forest.query(points, buffer[1], buffer[2], buffer[3], buffer[0])
    want_at, want_ids = one_at_a_time(trees, buffer, points)
    assert at.tolist() == want_at.tolist() and ids.tolist() == want_ids.tolist()


def test_a_box_masked_after_the_forest_is_made_is_not_found():
    """The small trees keep their arrays as views of the forest's: a kill reaches both."""
    lo = np.zeros((20, 2))
    hi = np.ones((20, 2))
    big, small = PackedTree(np.arange(10), lo[:10], hi[:10]), PackedTree(np.arange(10, 20), lo[10:], hi[10:])
    lv = Levels(2, 1, 1)
    lv.trees = [big, small]
    point = np.full((1, 2), 0.5)
    assert sorted(lv.query(point)[1].tolist()) == list(range(20))
    forest = lv._forest
    assert lv.kill(13) and lv.kill(4)
    assert sorted(lv.query(point)[1].tolist()) == [i for i in range(20) if i not in (4, 13)]
    assert lv._forest is forest, "a kill changes no tree: the same forest"


def test_looked_counts_what_the_small_trees_and_the_buffer_look_at():
    far = PackedTree(np.arange(100, 164), np.full((64, 2), 50.0), np.full((64, 2), 60.0))
    big = PackedTree(np.arange(64), np.zeros((64, 2)), np.ones((64, 2)))
    points = np.full((5, 2), 0.5)
    no_buffer = (np.empty((0, 2)), np.empty((0, 2)), np.empty(0, dtype=np.uint8), np.empty(0, dtype=np.int64))
    assert Forest([big]).query(points, *no_buffer)[2] == 0, "the big tree is not counted"
    assert Forest([big, far]).query(points, *no_buffer)[2] == 5, "a small tree's root, once a point"
    buffer = (np.zeros((7, 2)), np.ones((7, 2)), np.ones(7, dtype=np.uint8), np.arange(200, 207))
    at, ids, looked = Forest([big, far]).query(points, *buffer)
    assert looked == 5 * (1 + 7) and len(at) == 5 * (64 + 7)


def test_a_set_packs_itself_anew_once_its_queries_have_paid_for_it():
    rng = np.random.default_rng(3)
    lows, highs = boxes(rng, 600, k=2)
    s = SubscriptionSet(2, PackThresholds(delta_min=8, ratio=4, repack_looks=1))
    s.add_many([f"a{i}" for i in range(500)], ["q"] * 500, lows[:500], highs[:500])
    for i in range(500, 600, 4):
        s.add_many([f"a{j}" for j in range(i, i + 4)], ["q"] * 4, lows[i:i + 4], highs[i:i + 4])
    assert len(s._levels.trees) > 1 or s._levels.b_live, "levels to start with"
    points = rng.uniform(0, 130, (5, 2))
    want = ((lows[None] <= points[:, None]) & (points[:, None] <= np.nextafter(highs, -np.inf)[None])).all(axis=2)
    counts = []
    while len(s._levels.trees) > 1 or s._levels.b_live:
        counts.append(s.match_ids(points)[1].tolist())
        assert len(counts) < 1000, "never packed"
    assert len(counts) > 1, "not at the first query: once the looks outweigh a pack"
    counts.append(s.match_ids(points)[1].tolist())
    assert all(c == want.sum(axis=1).tolist() for c in counts), "exact before, at and after the pack"


def test_a_set_whose_levels_are_held_never_packs_on_queries():
    rng = np.random.default_rng(4)
    lows, highs = boxes(rng, 300, k=2)
    s = SubscriptionSet(2, PackThresholds(delta_min=8, ratio=4, repack_looks=float("inf")))
    s.add_many([f"a{i}" for i in range(200)], ["q"] * 200, lows[:200], highs[:200])
    for i in range(200, 240, 4):
        s.add_many([f"a{j}" for j in range(i, i + 4)], ["q"] * 4, lows[i:i + 4], highs[i:i + 4])
    shape = [len(t) for t in s._levels.trees], s._levels.b_live
    for _ in range(50):
        s.match_ids(rng.uniform(0, 130, (40, 2)))
    assert ([len(t) for t in s._levels.trees], s._levels.b_live) == shape and len(shape[0]) > 1


def test_one_packed_tree_is_never_due_however_much_is_asked():
    lv = Levels(2, 4, 4, repack_looks=0)
    lv.reset(np.arange(10), np.zeros((10, 2)), np.ones((10, 2)))
    lv.looked = 10**9
    assert not lv.repack_due()


def test_adds_that_change_the_levels_start_the_count_again():
    """A set still being added to would soon be in levels again after a pack: only what queries
    looked at since the levels last changed shape counts towards one."""
    lv = Levels(2, 4, 4, repack_looks=1)
    lv.reset(np.arange(100), np.zeros((100, 2)), np.ones((100, 2)))
    lv.append(np.arange(100, 103), np.tile([0.0, 0.0, 1.0, 1.0], (3, 1)))
    lv.query(np.full((50, 2), 0.5))
    assert lv.looked == 150 and lv.repack_due()
    lv.append(np.arange(103, 106), np.tile([0.0, 0.0, 1.0, 1.0], (3, 1)))  # past delta_min: a flush
    assert len(lv.trees) == 2 and lv.looked == 0 and not lv.repack_due()


def test_trees_of_two_capacities_make_no_forest():
    a = PackedTree(np.arange(20), np.zeros((20, 2)), np.ones((20, 2)))
    b = PackedTree(np.arange(20, 30), np.zeros((10, 2)), np.ones((10, 2)), capacity=4)
    with pytest.raises(ValueError, match="capacity"):
        Forest([a, b])
    c = PackedTree(np.arange(30, 40), np.zeros((10, 2)), np.ones((10, 2)), capacity=4)
    at, ids, _ = Forest([b, c]).query(np.full((2, 2), 0.5), *(np.empty((0, 2)),) * 2, np.empty(0, dtype=np.uint8),
                                      np.empty(0, dtype=np.int64))
    assert sorted(ids[at == 1].tolist()) == list(range(20, 40))
