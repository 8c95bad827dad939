"""PackedTree (the static STR-packed R-tree walked in compiled code) against brute force, and
SubscriptionSet with boxes split between packed trees, the buffer of recent ones and
masked removals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.matcher import packed
from bluedove.matcher.index import PackThresholds, SubscriptionSet
from bluedove.matcher.packed import _COMPILED_TILE, PackedTree, _stable_argsort, compiled, str_order

INF = math.inf


def brute(lo, hi, alive, points):
    """(point index, id) pairs of closed-box containment, by point then id."""
    inside = np.all((lo[None, :, :] <= points[:, None, :]) & (points[:, None, :] <= hi[None, :, :]), axis=2)
    inside &= alive[None, :]
    at, ids = np.nonzero(inside)
    return sorted(zip(at.tolist(), ids.tolist()))


def answers(tree, points):
    at, ids = tree.query(points)
    assert np.all(np.diff(at) >= 0), "answers must come grouped by point, in order"
    return sorted(zip(at.tolist(), ids.tolist()))


@pytest.mark.parametrize("capacity", [2, 3, 8, 33])
@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 64, 1000])
def test_random_boxes_agree_with_brute_force(capacity, n):
    rng = np.random.default_rng(n * 100 + capacity)
    k = 3
    lo = rng.uniform(0, 100, (n, k))
    hi = lo + rng.uniform(0, 30, (n, k))
    tree = PackedTree(np.arange(n), lo, hi, capacity)
    points = np.vstack([rng.uniform(-5, 135, (300, k)), lo[:20], hi[:20]])  # on the corners: closed boxes
    assert answers(tree, points) == brute(lo, hi, np.ones(n, bool), points)


def test_more_answers_than_the_first_buffer_holds():
    """Every point inside every box: the walk counts past its buffers and runs once more."""
    n, m = 500, 10
    lo, hi = np.zeros((n, 2)), np.ones((n, 2))
    tree = PackedTree(np.arange(n) + 1000, lo, hi)
    at, ids = tree.query(np.full((m, 2), 0.5))
    assert len(at) == n * m and np.bincount(at).tolist() == [n] * m
    assert sorted(ids[at == 3].tolist()) == list(range(1000, 1000 + n))
    # The next query starts with room for a quarter more answers a point than this one had, so it
    # is walked once; fewer answers later shrink the room again, never below MIN_PER_POINT.
    assert tree.per_point == n * 1.25
    walks = []
    original = packed._query
    try:
        packed._query = lambda *a: walks.append(1) or original(*a)
        at, _ = tree.query(np.full((m, 2), 0.25))
        assert len(at) == n * m and len(walks) == 1
        assert len(tree.query(np.full((m, 2), 5.0))[0]) == 0 and tree.per_point == packed.MIN_PER_POINT
    finally:
        packed._query = original


def test_unbounded_sides_nan_points_and_killed_rows():
    lo = np.array([[-INF, 0.0], [0.0, -INF], [5.0, 5.0]])
    hi = np.array([[INF, 1.0], [1.0, INF], [6.0, 6.0]])
    tree = PackedTree(np.array([10, 11, 12]), lo, hi, capacity=2)
    pts = np.array([[1e300, 0.5], [0.5, -1e300], [np.nan, 0.5], [0.5, np.nan], [5.5, 5.5], [0.5, 0.5]])
    assert answers(tree, pts) == [(0, 10), (1, 11), (4, 12), (5, 10), (5, 11)]  # NaN: inside nothing
    assert tree.kill(10) and not tree.kill(10) and not tree.kill(99) and not tree.kill(-1)
    assert answers(tree, pts) == [(1, 11), (4, 12), (5, 11)]


def test_empty_tree_and_no_points():
    tree = PackedTree(np.empty(0, dtype=np.int64), np.empty((0, 2)), np.empty((0, 2)))
    assert len(tree) == 0 and answers(tree, np.zeros((3, 2))) == []
    full = PackedTree(np.arange(3), np.zeros((3, 2)), np.ones((3, 2)))
    assert answers(full, np.empty((0, 2))) == []


def test_str_order_is_a_permutation_with_leaves_of_close_boxes():
    rng = np.random.default_rng(1)
    lo = rng.uniform(0, 1000, (4096, 2))
    perm = str_order(lo, lo + 1, 16)
    assert sorted(perm.tolist()) == list(range(4096))
    # 256 leaves in 16 x 16 tiles: each leaf spans about a 16th of the range on each axis
    spans = np.ptp(lo[perm].reshape(256, 16, 2), axis=1)
    assert np.median(spans[:, 0]) < 100 and np.median(spans[:, 1]) < 100


def reference_str(lo, hi, capacity):
    """STR written plainly: numpy's stable sort at every slab, recursion in Python."""
    big = np.finfo(np.float64).max / 4
    centre = (np.clip(lo, -big, big) + np.clip(hi, -big, big)) / 2
    dims, out = centre.shape[1], []

    def tile(rows, d):
        rows = rows[np.argsort(centre[rows, d], kind="stable")]
        if d == dims - 1 or len(rows) <= capacity:
            out.append(rows)
            return
        leaves = -(-len(rows) // capacity)
        per = -(-leaves // int(np.ceil(leaves ** (1.0 / (dims - d))))) * capacity
        for j in range(0, len(rows), per):
            tile(rows[j:j + per], d + 1)

    tile(np.arange(len(lo)), 0)
    return np.concatenate(out) if out else np.empty(0, dtype=np.intp)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0, 7, 300, _COMPILED_TILE + 1, 3 * _COMPILED_TILE]),
       st.integers(1, 4), st.sampled_from([2, 8]))
def test_str_order_is_the_plain_recursion_s_order(seed, n, dims, capacity):
    """The big slabs sorted by numpy, the small ones in compiled code: the same order as STR
    written plainly, ties (unbounded sides, repeated values) in the same places."""
    rng = np.random.default_rng(seed)
    lo = np.round(rng.uniform(0, 20, (n, dims)))
    hi = lo + np.round(rng.uniform(0, 3, (n, dims)))
    lo[rng.random((n, dims)) < 0.2] = -INF
    hi[rng.random((n, dims)) < 0.2] = INF
    assert str_order(lo, hi, capacity).tolist() == reference_str(lo, hi, capacity).tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, -2.5, INF, -INF, math.nan, 7.0]) | st.floats(), max_size=300))
def test_stable_argsort_is_numpys_stable_sort(keys):
    key = np.array(keys, dtype=np.float64)
    assert _stable_argsort(key).tolist() == np.argsort(key, kind="stable").tolist()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.sampled_from([0, 5, 50]))
def test_set_with_packed_recent_and_removed_boxes_agrees_with_brute_force(seed, k, delta_min):
    """Bulk load, then adds one by one (some land in the buffer, some pack it into a tree and
    merge trees, some pack everything) and removals (masked in a tree or in the buffer),
    checked after each step."""
    rng = np.random.default_rng(seed)
    s = SubscriptionSet(k, PackThresholds(delta_min=delta_min, ratio=4))
    n = 300
    lows = rng.uniform(0, 100, (n, k)).round(1)
    highs = lows + rng.uniform(0.1, 40, (n, k)).round(1)
    live = dict.fromkeys(range(n // 2))
    s.add_many([f"s{j}" for j in range(n // 2)], ["q"] * (n // 2), lows[:n // 2], highs[:n // 2])
    points = np.vstack([rng.uniform(0, 140, (40, k)).round(1), lows[:10], highs[:10]])
    for j in range(n // 2, n):
        if rng.random() < 0.3 and live:
            gone = int(rng.choice(list(live)))
            assert s.remove(f"s{gone}")
            del live[gone]
        assert s.add(f"s{j}", "q", lows[j].tolist(), highs[j].tolist())
        live[j] = None
        if j % 25 == 0 or j == n - 1:
            rows = np.array(sorted(live))
            inside = np.all((lows[rows][None] <= points[:, None]) & (points[:, None] < highs[rows][None]), axis=2)
            ids, counts = s.match_ids(points)
            pos = 0
            for i, c in enumerate(counts.tolist()):
                got = sorted(int(s.sub_ids[x][1:]) for x in ids[pos:pos + c].tolist())
                pos += c
                assert got == rows[inside[i]].tolist()


def test_compiles_without_a_place_to_cache():
    """A function numba cannot cache (its source is no file, as with no writable directory)
    is still compiled, without the disk cache."""
    scope: dict = {}
    exec("def twice(x):\n    return 2 * x\n", scope)  # noqa: S102 (a source that is no file)
    fn = compiled(scope["twice"])
    assert fn(21) == 42
