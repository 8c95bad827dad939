"""Levels: the buffer of recent boxes and the packed trees they are merged into, against brute
force, and the bounds that make an insert cheap (trees growing geometrically, each box packed
a few times, not at every pack of the set)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.matcher import levels as levels_mod
from bluedove.matcher import packed
from bluedove.matcher.index import PackThresholds, SubscriptionSet
from bluedove.matcher.levels import Levels
from bluedove.matcher.packed import scan


def boxes(rng, n, k=3):
    lo = rng.uniform(0, 100, (n, k))
    return np.hstack([lo, lo + rng.uniform(0, 30, (n, k))])


def brute(ids, bx, live, points):
    k = bx.shape[1] // 2
    inside = np.all((bx[None, :, :k] <= points[:, None, :]) & (points[:, None, :] <= bx[None, :, k:]), axis=2)
    inside &= np.array([i in live for i in ids])[None, :]
    at, rows = np.nonzero(inside)
    return sorted(zip(at.tolist(), ids[rows].tolist()))


def answers(lv, points):
    at, ids = lv.query(points)
    assert np.all(np.diff(at) >= 0), "answers must come grouped by point, in order"
    return sorted(zip(at.tolist(), ids.tolist()))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 4, 16]), st.sampled_from([1, 2, 4]))
def test_appends_and_kills_agree_with_brute_force(seed, delta_min, ratio):
    """Batches appended (some packing the buffer, some merging trees), boxes killed wherever
    they sit; every live box is found, no dead one, after each step."""
    rng = np.random.default_rng(seed)
    n = 400
    ids, bx = np.arange(n, dtype=np.int64), boxes(rng, n)
    lv, live, at = Levels(3, delta_min, ratio), set(), 0
    points = rng.uniform(0, 130, (30, 3))
    while at < n:
        step = int(rng.integers(1, 40))
        if lv.append(ids[at:at + step], bx[at:at + step]):  # the owner packs everything anew
            got_ids, lo, hi = lv.boxes()
            lv.reset(got_ids, lo, hi)
        live.update(range(at, min(at + step, n)))
        at += step
        for gone in rng.choice(sorted(live), size=min(len(live), int(rng.integers(0, 6))), replace=False).tolist():
            assert lv.kill(gone) and not lv.kill(gone)
            live.discard(gone)
        if lv.compaction_due():
            lv.compact()
        assert lv.live == len(live) and sorted(lv.boxes()[0].tolist()) == sorted(live)
        assert answers(lv, points) == brute(ids[:min(at, n)], bx[:min(at, n)], live, points)


def test_kill_many_masks_in_the_buffer_and_in_every_tree():
    rng = np.random.default_rng(3)
    ids, bx = np.arange(300, dtype=np.int64), boxes(rng, 300)
    lv = Levels(3, 16, 1)
    lv.reset(ids[:200], bx[:200, :3], bx[:200, 3:])
    for j in range(200, 285, 17):  # 17 at a time: each packed into a tree of its own, then merged
        assert not lv.append(ids[j:j + 17], bx[j:j + 17])
    assert not lv.append(ids[285:], bx[285:])  # 15: they stay in the buffer
    assert len(lv.trees) >= 2 and lv.b_live > 0
    gone = np.array([0, 210, 295, 299, 1000], dtype=np.int64)  # 1000 was never here
    assert lv.kill_many(gone) == 4
    assert lv.live == 296 and not set(gone.tolist()) & set(lv.boxes()[0].tolist())


def test_kill_finds_a_box_wherever_it_sits_and_nothing_else():
    rng = np.random.default_rng(4)
    ids, bx = np.arange(130, dtype=np.int64), boxes(rng, 130)
    lv = Levels(3, 16, 2)
    lv.reset(ids[:100], bx[:100, :3], bx[:100, 3:])
    assert not lv.append(ids[100:120], bx[100:120])  # 20 > 16: a tree of their own
    assert not lv.append(ids[120:126], bx[120:126])  # in the buffer
    assert [len(t) for t in lv.trees] == [100, 20] and lv.b_live == 6
    for i in (5, 110, 123, 99, 100, 125):
        assert lv.kill(i), i
    for i in (5, 123, 126, 500, -1):
        assert not lv.kill(i), i
    assert lv.live == 120 and sorted(lv.boxes()[0].tolist()) == [i for i in range(126)
                                                                 if i not in (5, 110, 123, 99, 100, 125)]


def test_adds_and_removals_taking_turns_keep_the_buffer_bounded():
    """One in, one out, 5,000 times: the buffer never holds more than it may live, so it never
    packs; its removed rows are dropped rather than kept forever (scanned by every query)."""
    rng = np.random.default_rng(6)
    bx = boxes(rng, 5000)
    lv = Levels(3, 16, 4)
    for i in range(5000):
        assert not lv.append(np.array([i], dtype=np.int64), bx[i:i + 1])
        assert lv.kill(i)
        assert len(lv.b_ids) <= 2 * 16 + 1 and lv.live == 0
    assert lv.trees == []


def test_a_small_tree_with_nothing_live_is_dropped():
    """A tree of 20, 17 removed (compacted to 3), then the last 3: too few masked for the share
    rule, but nothing live, so it goes rather than being walked for nothing."""
    rng = np.random.default_rng(7)
    ids, bx = np.arange(140, dtype=np.int64), boxes(rng, 140)
    lv = Levels(3, 16, 2)
    lv.reset(ids[:100], bx[:100, :3], bx[:100, 3:])
    assert not lv.append(ids[100:120], bx[100:120])  # a tree of 20
    assert lv.kill_many(ids[100:117]) == 17 and lv.compaction_due()
    lv.compact()
    assert [len(t) for t in lv.trees] == [100, 3]
    assert lv.kill_many(ids[117:120]) == 3 and lv.compaction_due()
    lv.compact()
    assert [len(t) for t in lv.trees] == [100] and lv.live == 100


def test_trees_grow_geometrically_and_a_merge_into_the_biggest_asks_for_a_pack():
    """Appending a box at a time: after each step the trees, biggest first, each hold more than
    `ratio` times the next; `append` says True exactly when the merges would reach the
    biggest tree, which then (with the buffer's tree) holds every box."""
    rng = np.random.default_rng(1)
    n, ratio = 3000, 4
    ids, bx = np.arange(n, dtype=np.int64), boxes(rng, n)
    lv = Levels(3, 8, ratio)
    lv.reset(ids[:1000], bx[:1000, :3], bx[:1000, 3:])
    packs = 0
    for j in range(1000, n):
        if lv.append(ids[j:j + 1], bx[j:j + 1]):
            packs += 1
            assert len(lv.trees) == 2 and lv.live == j + 1 and lv.b_live == 0
            got, lo, hi = lv.boxes()
            lv.reset(got, lo, hi)
        sizes = [t.live for t in lv.trees]
        assert all(a > ratio * b for a, b in zip(sizes, sizes[1:])), sizes
        assert len(sizes) <= math.log(max(j, 2) / 8, ratio) + 2
    assert packs >= 1


def test_a_set_packs_each_subscription_a_few_times_not_at_every_pack(monkeypatch):
    """20,000 subscriptions added 16 at a time to a set of 20,000: the boxes packed, over all
    packs and merges, stay within a small multiple of those added: 9.1 per box added (packing
    the whole set each time a few hundred had come packed 30.5)."""
    rng = np.random.default_rng(2)
    n = 40_000
    bx = boxes(rng, n, k=4)
    sids = [f"s{j}" for j in range(n)]
    s = SubscriptionSet(4)
    s.add_many(sids[:20_000], ["q"] * 20_000, bx[:20_000, :4], bx[:20_000, 4:])
    packed_rows = [0]
    was = packed.PackedTree.__init__

    def counting(self, ids, lo, hi, *args, **kwargs):
        packed_rows[0] += len(ids)
        was(self, ids, lo, hi, *args, **kwargs)

    monkeypatch.setattr(packed.PackedTree, "__init__", counting)
    for j in range(20_000, n, 16):
        s.add_many(sids[j:j + 16], ["q"] * 16, bx[j:j + 16, :4], bx[j:j + 16, 4:])
    assert packed_rows[0] <= 15 * 20_000, packed_rows[0] / 20_000
    assert len(s) == n


@pytest.mark.parametrize("m", [0, 1, 5, 200])
def test_scan_agrees_with_brute_force_and_skips_dead_and_nan(m):
    rng = np.random.default_rng(m)
    bx = boxes(rng, 50)
    alive = (rng.random(50) < 0.8).astype(np.uint8)
    points = rng.uniform(0, 130, (m, 3))
    if m:
        points[0, 1] = np.nan  # inside nothing
    at, rows = scan(points, bx[:, :3], bx[:, 3:], alive)
    assert np.all(np.diff(at) >= 0)
    ids = np.arange(50)
    live = set(np.flatnonzero(alive).tolist())
    assert sorted(zip(at.tolist(), rows.tolist())) == brute(ids, bx, live, points)


def test_scan_grows_its_buffers_when_answers_outnumber_them():
    bx = np.hstack([np.zeros((500, 2)), np.ones((500, 2))])  # every box holds every point
    at, rows = scan(np.full((3, 2), 0.5), bx[:, :2], bx[:, 2:], np.ones(500, dtype=np.uint8))
    assert len(at) == 1500 and sorted(rows[at == 2].tolist()) == list(range(500))


def test_thresholds_reach_the_levels():
    s = SubscriptionSet(2, PackThresholds(delta_min=5, ratio=3))
    assert (s._levels.delta_min, s._levels.ratio) == (5, 3)
    assert levels_mod.Levels is Levels
