"""SubscriptionSet against the brute-force oracle: half-open bounds, wildcards, live inserts, deletes, bulk loads."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.lab.workloads import brute_force
from bluedove.matcher import index as index_mod
from bluedove.matcher.index import PackThresholds, SubscriptionSet

INF = math.inf


def assert_matches(s: SubscriptionSet, point, expected: set[str]) -> None:
    ids, _ = s.match_ids(np.array([point], dtype=np.float64))
    stale = [i for i in ids.tolist() if i not in s.sub_ids]
    assert not stale, f"{point}: the tree still holds removed entries {stale}"
    groups = s.match_batch(np.array([point], dtype=np.float64))[0]
    got = [sid for ids in groups.values() for sid in ids]
    assert len(got) == len(set(got)), f"{point}: duplicate ids {got}"
    assert set(got) == expected, f"{point}: got {sorted(got)}, want {sorted(expected)}"


def oracle(subs: dict[str, tuple[list[float], list[float]]], point) -> set[str]:
    return {sid for sid, (lo, hi) in subs.items() if all(a <= v < b for a, v, b in zip(lo, point, hi))}


# -- cases -----------------------------------------------------------------------------------
def two_d_set(via: str) -> SubscriptionSet:
    """The box a = [10, 20) x [20, 30), added alone or bulk-loaded among far-away fillers
    spread along dimension 1 only (so the bulk load reorders the tree's dimensions)."""
    s = SubscriptionSet(2)
    if via == "add":
        assert s.add("a", "qa", (10.0, 20.0), (20.0, 30.0))
    else:
        n = index_mod.BULK_MIN
        lows = np.column_stack([np.full(n, 500.0), 100.0 + np.arange(n)])
        ids = ["a"] + [f"f{j}" for j in range(n)]
        s.add_many(ids, ["qa"] + ["q"] * n, np.vstack([[10.0, 20.0], lows]), np.vstack([[20.0, 30.0], lows + 1.0]))
        assert s._order.tolist() == [1, 0]
    return s


@pytest.mark.parametrize("via", ["add", "add_many"])
@pytest.mark.parametrize("point, expected", [
    ((10.0, 20.0), {"a"}),  # exactly on both lows: inside
    ((15.0, 25.0), {"a"}),
    ((20.0, 25.0), set()),  # exactly on high of dim 0: outside
    ((15.0, 30.0), set()),  # exactly on high of dim 1
    ((math.nextafter(20.0, -INF), math.nextafter(30.0, -INF)), {"a"}),  # the last doubles inside
    ((math.nextafter(10.0, -INF), 25.0), set()),  # the last double below low
    ((20.0, 30.0), set()),
])
def test_half_open_bounds(via, point, expected):
    assert_matches(two_d_set(via), point, expected)


def test_adjacent_ranges_share_no_point():
    s = SubscriptionSet(2)
    s.add("left", "q", (0.0, 0.0), (5.0, 10.0))
    s.add("right", "q", (5.0, 0.0), (10.0, 10.0))
    assert_matches(s, (5.0, 1.0), {"right"})
    assert_matches(s, (math.nextafter(5.0, -INF), 1.0), {"left"})


@pytest.mark.parametrize("lows, highs", [
    ((0.0, -INF, 0.0), (1000.0, INF, 1000.0)),  # infinite wildcard
    ((0.0, 0.0, 0.0), (1000.0, 1000.0, 1000.0)),  # the space's bounds as wildcards
])
def test_wildcards(lows, highs):
    s = SubscriptionSet(3)
    s.add("w", "q", lows, highs)
    s.add("narrow", "q", (0.0, 5.0, 0.0), (1000.0, 6.0, 1000.0))
    assert_matches(s, (0.0, 0.0, 999.0), {"w"})
    assert_matches(s, (500.0, 5.5, 500.0), {"w", "narrow"})
    assert_matches(s, (1000.0, 5.5, 500.0), set())  # the space's max is outside [0, 1000)


def test_empty_and_duplicate_subscriptions_are_refused():
    s = SubscriptionSet(2)
    assert not s.add("e", "q", (5.0, 0.0), (5.0, 1.0))  # low == high: empty
    assert not s.add("n", "q", (math.nan, 0.0), (5.0, 1.0))
    assert s.add("a", "q", (0.0, 0.0), (1.0, 1.0))
    assert not s.add("a", "other", (0.0, 0.0), (2.0, 2.0))
    assert len(s) == 1 and "a" in s and "e" not in s and s.ids() == ["a"]
    assert s.queues[s._by_id["a"]] == "q"


def test_wrong_arity_is_an_error():
    with pytest.raises(ValueError):
        SubscriptionSet(2).add("a", "q", (0.0,), (1.0,))
    with pytest.raises(ValueError):
        SubscriptionSet(0)


def test_remove():
    s = SubscriptionSet(2)
    s.add("a", "q", (0.0, 0.0), (1.0, 1.0))
    s.add("b", "q", (0.0, 0.0), (1.0, 1.0))
    assert s.remove("a") and not s.remove("a") and not s.remove("zz")
    assert_matches(s, (0.5, 0.5), {"b"})
    assert s.add("a", "q2", (0.0, 0.0), (2.0, 2.0))  # the id can come back, with a new box
    assert_matches(s, (1.5, 1.5), {"a"})
    assert len(s) == 2 and s._levels.live == len(s.sub_ids) == len(s.queues) == 2  # no leftovers


def test_match_batch_groups_by_queue():
    s = SubscriptionSet(2)
    s.add("a", "q1", (0.0, 0.0), (1.0, 1.0))
    s.add("b", "q1", (0.0, 0.0), (2.0, 2.0))
    s.add("c", "q2", (0.0, 0.0), (2.0, 2.0))
    out = s.match_batch(np.array([[0.5, 0.5], [1.5, 1.5], [5.0, 5.0]]))
    assert [{q: sorted(v) for q, v in g.items()} for g in out] == [
        {"q1": ["a", "b"], "q2": ["c"]}, {"q1": ["b"], "q2": ["c"]}, {}]


def test_empty_set_and_no_points():
    s = SubscriptionSet(3)
    ids, counts = s.match_ids(np.zeros((4, 3)))
    assert len(ids) == 0 and counts.tolist() == [0, 0, 0, 0]
    s.add("a", "q", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    ids, counts = s.match_ids(np.zeros((0, 3)))
    assert len(ids) == 0 and len(counts) == 0


def test_one_dimension():
    s = SubscriptionSet(1)
    s.add("a", "q", (0.0,), (10.0,))
    s.add("b", "q", (10.0,), (20.0,))
    assert [sorted(x for v in g.values() for x in v) for g in s.match_batch(np.array([[0.0], [10.0], [20.0]]))] == [
        ["a"], ["b"], []]
    assert s.add_many([f"m{i}" for i in range(300)], ["q"] * 300, np.arange(300.0)[:, None],
                      np.arange(1.0, 301.0)[:, None]) == 300
    assert_matches(s, (5.0,), {"a", "m5"})


def test_add_many_skips_like_add():
    s = SubscriptionSet(2)
    s.add("old", "q", (0.0, 0.0), (1.0, 1.0))
    lows = np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 0.0], [0.0, 0.0]])
    highs = np.array([[2.0, 2.0], [3.0, 3.0], [3.0, 1.0], [4.0, 4.0]])
    # "old" is there already, "x" twice (the first wins), "e" is empty
    assert s.add_many(["old", "x", "e", "x"], ["q", "qx", "q", "q2"], lows, highs) == 1
    assert sorted(s.ids()) == ["old", "x"]
    assert_matches(s, (2.5, 2.5), {"x"})
    assert_matches(s, (3.5, 3.5), set())
    with pytest.raises(ValueError):
        s.add_many(["a"], [], lows[:1], highs[:1])


@pytest.mark.parametrize("n_before", [0, 10, 2000])
def test_add_many_bulk_then_live_changes(n_before):
    """Bulk load (STR) for a big batch, one-by-one inserts for a small one; both stay exact."""
    rng = np.random.default_rng(n_before)
    k = 3
    s = SubscriptionSet(k)
    subs: dict[str, tuple[list[float], list[float]]] = {}
    lo = rng.integers(0, 20, (n_before + 1000, k)).astype(float)
    hi = lo + rng.integers(1, 6, lo.shape)
    for j in range(n_before):
        s.add(f"s{j}", "q", lo[j], hi[j])
        subs[f"s{j}"] = (lo[j].tolist(), hi[j].tolist())
    ids = [f"s{j}" for j in range(n_before, n_before + 1000)]
    assert s.add_many(ids, ["q"] * 1000, lo[n_before:], hi[n_before:]) == 1000
    subs.update({sid: (lo[j].tolist(), hi[j].tolist()) for j, sid in enumerate(ids, n_before)})
    for sid in list(subs)[::3]:  # delete a third, then add some back with other boxes
        assert s.remove(sid)
        del subs[sid]
    for j in range(0, 300, 7):
        sid = f"s{j}"
        if s.add(sid, "q", [0.0] * k, [5.0] * k):
            subs[sid] = ([0.0] * k, [5.0] * k)
    assert len(s) == len(subs)
    pts = rng.integers(0, 25, (300, k)).astype(float)
    for p in pts:
        assert_matches(s, p, oracle(subs, p))


def test_reordering_bulk_loads_keep_deletes_and_matches_exact():
    """Each bulk load picks the dimension order anew; stored boxes must follow it."""
    s = SubscriptionSet(3)
    n = index_mod.BULK_MIN
    spread = np.arange(n, dtype=float) * 10.0
    band = np.zeros(n)
    subs = {}
    # first load: only dimension 2 spreads -> order [2, ...]; second: dimension 0 spreads more
    for tag, lows in (("a", np.column_stack([band, band + 1, spread])),
                      ("b", np.column_stack([spread * 10, band + 2, band]))):
        ids = [f"{tag}{j}" for j in range(len(subs) + n)]  # as many new ones as there are: a rebuild
        lows = np.vstack([lows] * (len(ids) // n))
        s.add_many(ids, ["q"] * len(ids), lows, lows + 5.0)
        subs.update({sid: (lo.tolist(), (lo + 5.0).tolist()) for sid, lo in zip(ids, lows)})
    assert s._order.tolist()[0] == 0
    for sid in list(subs)[::2]:
        assert s.remove(sid)
        del subs[sid]
    for sid, (lo, hi) in list(subs.items())[:50]:
        assert_matches(s, lo, oracle(subs, lo))
        assert_matches(s, [h - 1e-9 for h in hi], oracle(subs, [h - 1e-9 for h in hi]))


def test_bulk_threshold_is_used():
    s = SubscriptionSet(2)
    n = index_mod.BULK_MIN
    lows = np.arange(2 * n, dtype=np.float64).reshape(n, 2)  # distinct boxes (equal ones share a place)
    highs = lows + 1
    s.add_many([str(i) for i in range(n)], ["q"] * n, lows, highs)
    assert [len(t) for t in s._levels.trees] == [n] and s._levels.b_live == 0  # packed in one go
    small = SubscriptionSet(2)
    small.add_many(["a", "b"], ["q", "q"], lows[:2], highs[:2])
    assert small._levels.trees == [] and small._levels.b_live == 2  # into the buffer


def test_agrees_with_brute_force_on_the_paper_workload():
    from bluedove.lab.workloads.paper import get

    w = get("paper", seed=3, n_subs=3000)
    for n in (w.n_subs, 100):  # bulk-loaded, or inserted one by one
        s = SubscriptionSet(4)
        s.add_many([str(i) for i in range(n)], ["q"] * n, w.lows[:n], w.highs[:n])
        pts = np.vstack([w.messages(200, seed=1), w.lows[:50], w.highs[50:100] - 1e-9, w.highs[100:150]])
        ids, counts = s.match_ids(pts)
        pos = 0
        for c, want in zip(counts.tolist(), brute_force(w.lows[:n], w.highs[:n], pts)):
            got = sorted(int(s.sub_ids[i]) for i in ids[pos:pos + c].tolist())
            pos += c
            assert got == want.tolist()


@pytest.mark.parametrize("mins, maxs, order", [
    # dimension 0 holds every box in one narrow band (a set's own segment): it goes last
    ([[0, 0, 0], [10, 400, 900], [20, 800, 400]], [[250, 250, 250], [260, 650, 1150], [270, 1050, 650]], [2, 1, 0]),
    # a wildcard (infinite, or nextafter(inf) as stored) separates nothing
    ([[-INF, 0], [-INF, 300], [-INF, 600]], [[INF, 100], [INF, 400], [INF, 700]], [1, 0]),
    ([[0, 0], [0, 300], [0, 600]], [[np.finfo(float).max] * 2, [np.finfo(float).max, 400], [np.finfo(float).max, 700]],
     [1, 0]),
])
def test_dimension_order(mins, maxs, order):
    assert index_mod.dimension_order(np.array(mins, dtype=float), np.array(maxs, dtype=float)).tolist() == order


def test_dimension_order_of_a_big_set_is_scored_on_a_sample_of_its_boxes():
    """Past ORDER_SAMPLE boxes the score comes from evenly spaced rows: the same order as from
    all of them when the dimensions differ clearly (here 30 %, 3x and 10x in spread/width)."""
    rng = np.random.default_rng(5)
    n = 3 * index_mod.ORDER_SAMPLE + 7
    centres = rng.normal(0, [100.0, 300.0, 30.0, 1000.0], (n, 4))
    widths = np.array([10.0, 10.0, 10.0, 10.0])
    mins, maxs = centres - widths / 2, centres + widths / 2
    assert index_mod.dimension_order(mins, maxs).tolist() == [3, 1, 0, 2]


# -- properties --------------------------------------------------------------------------------
# A coarse grid, so points fall exactly on bounds often; -inf/inf are wildcards.
GRID = [-INF, 0.0, 1.0, 2.0, 2.5, 3.0, 4.0, INF]
coord = st.sampled_from([0.0, 1.0, 2.0, 2.5, 3.0, 4.0, math.nextafter(2.0, -INF), math.nextafter(3.0, INF)])


@st.composite
def box(draw, k):
    lows, highs = [], []
    for _ in range(k):
        a, b = draw(st.sampled_from(GRID)), draw(st.sampled_from(GRID))
        lows.append(min(a, b))
        highs.append(max(a, b))  # may be empty (a == b): must be refused
    return lows, highs


@st.composite
def scenario(draw):
    k = draw(st.integers(1, 4))
    bulk_min = draw(st.sampled_from([1, 3, index_mod.BULK_MIN]))  # small: add_many rebuilds the tree
    # small: adds and removes make the set pack again mid-sequence
    delta_min = draw(st.sampled_from([0, 1, 3, index_mod.DELTA_MIN]))
    ops = draw(st.lists(st.one_of(
        st.tuples(st.just("add"), st.integers(0, 15), box(k)),
        st.tuples(st.just("remove"), st.integers(0, 15)),
        st.tuples(st.just("add_many"), st.lists(st.tuples(st.integers(0, 15), box(k)), max_size=8)),
        st.tuples(st.just("match"), st.lists(st.lists(coord, min_size=k, max_size=k), min_size=1, max_size=6)),
    ), max_size=30))
    return k, bulk_min, delta_min, ops


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_interleaved_operations_match_the_oracle(sc):
    k, bulk_min, delta_min, ops = sc
    _run(SubscriptionSet(k, PackThresholds(bulk_min=bulk_min, delta_min=delta_min, ratio=2)), ops)


def _run(s, ops):
    k = s.k
    subs: dict[str, tuple[list[float], list[float]]] = {}
    for op in ops:
        if op[0] == "add":
            sid, (lo, hi) = f"s{op[1]}", op[2]
            want = sid not in subs and all(a < b for a, b in zip(lo, hi))
            assert s.add(sid, "q" + sid, lo, hi) == want
            if want:
                subs[sid] = (lo, hi)
        elif op[0] == "remove":
            sid = f"s{op[1]}"
            assert s.remove(sid) == (sid in subs)
            subs.pop(sid, None)
        elif op[0] == "add_many":
            items = op[1]
            want = 0
            for j, (lo, hi) in items:
                sid = f"s{j}"
                if sid not in subs and all(a < b for a, b in zip(lo, hi)):
                    subs[sid] = (lo, hi)
                    want += 1
            lows = np.array([b[0] for _, b in items], dtype=float).reshape(-1, k)
            highs = np.array([b[1] for _, b in items], dtype=float).reshape(-1, k)
            assert s.add_many([f"s{j}" for j, _ in items], [f"qs{j}" for j, _ in items], lows, highs) == want
        else:
            for p in op[1]:
                assert_matches(s, p, oracle(subs, p))
        assert len(s) == len(subs) and set(s.ids()) == set(subs)
    for p in [[x] * k for x in (0.0, 1.0, 2.0, 2.5, 3.0, 4.0)]:
        assert_matches(s, p, oracle(subs, p))


def test_export_gives_back_exactly_the_overlapping_subscriptions_as_added():
    rng = np.random.default_rng(5)
    n, k = 500, 3
    lows = rng.uniform(0, 900, (n, k))
    highs = lows + rng.uniform(0.001, 100, (n, k))
    s = SubscriptionSet(k)
    s.add_many([f"s{j}" for j in range(n)], [f"q{j % 7}" for j in range(n)], lows, highs)  # bulk: reordered tree
    s.add("extra", "qx", [5.0, 5.0, 5.0], [6.0, 6.0, 6.0])  # one-by-one insert
    s.remove("s3")
    ids, queues, lo, hi = s.export(1, 200.0, 400.0)
    want = [j for j in range(n) if j != 3 and lows[j, 1] < 400 and highs[j, 1] > 200]
    assert sorted(ids) == sorted(f"s{j}" for j in want)
    by_id = dict(zip(ids, range(len(ids))))
    for j in want:
        r = by_id[f"s{j}"]
        assert queues[r] == f"q{j % 7}"
        assert np.array_equal(lo[r], lows[j]) and np.array_equal(hi[r], highs[j])  # bit for bit
    copy = SubscriptionSet(k)
    copy.add_many(ids, queues, lo, hi)
    pts = rng.uniform(0, 1000, (200, k))
    pts[:, 1] = rng.uniform(200, 400, 200)
    norm = lambda groups: [{q: sorted(v) for q, v in g.items()} for g in groups]  # noqa: E731
    assert norm(copy.match_batch(pts)) == norm(s.match_batch(pts))  # the copy matches the same


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("via", ["add", "add_many"])
def test_a_box_narrower_than_epsilon_on_every_side_still_matches_inside(k, via):
    """A box whose every side spans at most DBL_EPSILON still holds exactly its points, in the
    buffer and in a tree (libspatialindex, which once held the recent boxes, kept such a box as
    the point at its low corner: hypothesis found [0, 1.2e-145) x [0, 5e-324) missing the point
    (5e-324, 0))."""
    s = SubscriptionSet(k)
    s.add("wide", "q", [0.0] * k, [1.0] * k)  # a set with a buffer of recent boxes
    lows, highs = [0.0] * k, [1e-20] * k
    if via == "add":
        assert s.add("tiny", "q", lows, highs)
    else:
        assert s.add_many(["tiny"], ["q"], np.array([lows]), np.array([highs])) == 1
    inside, corner, outside = [5e-21] * k, [0.0] * k, [1e-20] * k
    got = [{x for ids in m.values() for x in ids} for m in s.match_batch(np.array([inside, corner, outside]))]
    assert got == [{"wide", "tiny"}, {"wide", "tiny"}, {"wide"}]
    assert s.remove("tiny") and s.match_batch(np.array([inside]))[0] == {"q": ["wide"]}
