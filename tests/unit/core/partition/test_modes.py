"""bluedove/core/partition/modes.py: placement, candidates and held ranges of mPartition and the two
baselines (the paper's §IV-B), the matcher's sets and the dispatcher's ranking under each, and the
settings that carry the mode."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.core.load import LoadReport
from bluedove.core.model import build_subscription
from bluedove.core.partition.modes import (
    FULL,
    MODES,
    MPARTITION,
    P2P,
    candidates,
    check_mode,
    held,
    placement,
    placement_many,
)
from bluedove.core.partition.segments import SegmentTable, equal_partition
from bluedove.core.space import default_space
from bluedove.dispatcher.view import ClusterView, MemberHealth
from bluedove.matcher.sets import SubscriptionSets
from bluedove.runtime.settings import DispatcherSettings, MatcherSettings, from_env

SPACE = default_space()  # x0..x3 in [0, 1000)
TABLE = equal_partition(SPACE, {m: f"{m}:7001" for m in "abcd"})  # b owns [250, 500) everywhere


# -- the rules, case by case ---------------------------------------------------------------------


@pytest.mark.parametrize("mode, member, want", [
    (MPARTITION, "b", {0: (250.0, 500.0), 1: (250.0, 500.0), 2: (250.0, 500.0), 3: (250.0, 500.0)}),
    (P2P, "b", {0: (250.0, 500.0)}),
    (P2P, "d", {0: (750.0, 1000.0)}),
    (FULL, "b", {0: (0.0, 1000.0)}),
    (MPARTITION, "zz", {}),  # not a member: holds nothing
    (P2P, "zz", {}),
    (FULL, "zz", {}),
])
def test_held(mode, member, want):
    assert held(mode, TABLE, member) == want


@pytest.mark.parametrize("mode, lows, highs, want", [
    (MPARTITION, (100, 600, 0, 900), (300, 700, 1000, 950),
     {"a": {0, 2}, "b": {0, 2}, "c": {1, 2}, "d": {2, 3}}),
    (P2P, (100, 600, 0, 900), (300, 700, 1000, 950), {"a": {0}, "b": {0}}),
    (P2P, (250, 0, 0, 0), (500, 1000, 1000, 1000), {"b": {0}}),  # exactly b's segment
    (P2P, (0, 0, 0, 0), (1000, 1000, 1000, 1000), {m: {0} for m in "abcd"}),  # a wildcard
    (FULL, (100, 600, 0, 900), (300, 700, 1000, 950), {m: {0} for m in "abcd"}),
])
def test_placement(mode, lows, highs, want):
    assert placement(mode, TABLE, lows, highs) == want


@pytest.mark.parametrize("mode, point, want", [
    (MPARTITION, (10, 260, 510, 999), [(0, "a"), (1, "b"), (2, "c"), (3, "d")]),
    (P2P, (10, 260, 510, 999), [(0, "a")]),
    (P2P, (250, 0, 0, 0), [(0, "b")]),  # on a cut: the segment starting there
    (FULL, (10, 260, 510, 999), [(0, "a"), (0, "b"), (0, "c"), (0, "d")]),
])
def test_candidates(mode, point, want):
    assert candidates(mode, TABLE, point) == want


def test_an_unknown_mode_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="partition: expected one of mpartition, p2p, full-replication"):
        check_mode("mesh")
    for fn, args in ((held, ("b",)), (placement, ((0,) * 4, (1,) * 4)), (candidates, ((0,) * 4,))):
        with pytest.raises(ValueError):
            fn("mesh", TABLE, *args)


# -- the property that makes matching exact ----------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_every_candidate_holds_every_match_along_its_dimension(mode):
    """For any message, each candidate (dimension i, member) was sent every matching
    subscription along i, and holds the message's dim-i value: it alone finds all matches."""
    rng = random.Random(7)
    table = equal_partition(SPACE, {f"m{j}": "" for j in range(5)})
    subs = []
    for _ in range(400):
        lo = [rng.choice([0, rng.uniform(0, 990)]) for _ in range(4)]
        subs.append((tuple(lo), tuple(min(1000, x + rng.uniform(0.001, 400)) for x in lo)))
    placed = [placement(mode, table, lo, hi) for lo, hi in subs]
    for _ in range(300):
        p = tuple(rng.choice([rng.uniform(0, 1000), 200.0, 400.0, 0.0]) for _ in range(4))
        matching = [j for j, (lo, hi) in enumerate(subs) if all(a <= v < b for a, v, b in zip(lo, p, hi))]
        for dim, m in candidates(mode, table, p):
            lo, hi = held(mode, table, m)[dim]
            assert lo <= p[dim] < hi
            assert all(dim in placed[j].get(m, ()) for j in matching), (mode, p, m)


# -- the matcher's sets and the dispatcher's ranking -----------------------------------------


def _sub(sub_id: str, predicates: dict):
    return build_subscription(sub_id, "q1", predicates, SPACE)


@pytest.mark.parametrize("mode, predicates, dims", [
    (MPARTITION, {"x0": [0, 100]}, [1, 2, 3]),
    (P2P, {"x0": [0, 100]}, []),  # not b's dim-0 segment: b does not keep it
    (P2P, {"x0": [300, 400], "x1": [0, 10]}, [0]),
    (FULL, {"x0": [0, 100], "x1": [900, 950]}, [0]),  # everything, in the one set
    (FULL, {}, [0]),
])
def test_matcher_sets_keep_what_the_mode_assigns(mode, predicates, dims):
    sets = SubscriptionSets("b", TABLE, mode=mode)
    s = _sub("s1", predicates)
    sets.add_subscription(s)
    assert [i for i, x in enumerate(sets.sets) if "s1" in x] == dims
    other = SubscriptionSets("b", TABLE, mode=mode)
    other.add_many([s])
    assert [i for i, x in enumerate(other.sets) if "s1" in x] == dims


def test_matcher_accepts_only_the_values_it_holds():
    p2p, full = SubscriptionSets("b", TABLE, mode=P2P), SubscriptionSets("b", TABLE, mode=FULL)
    assert p2p.owns(0, 300) and not p2p.owns(0, 600) and not p2p.owns(1, 300)
    assert full.owns(0, 0) and full.owns(0, 999.9) and not full.owns(1, 300)


def _view(mode: str, policy: str) -> ClusterView:
    v = ClusterView(replace(DispatcherSettings(), policy=policy, partition=mode), store=None)
    v.table = TABLE
    for m in "abcd":
        v.health[m] = MemberHealth(ready=True, reachable=True)
    return v


@pytest.mark.parametrize("policy", ["adaptive", "response-time", "subscription-count"])
def test_full_replication_ranks_every_matcher_by_its_one_set(policy):
    v = _view(FULL, policy)
    for m, q in zip("abcd", (50, 5, 0, 20)):
        v.reports[(m, 0)] = LoadReport(lam=10, mu=100.0, q=q, subs=1000 + q, at=0.0)
    assert v.ranked_candidates((10.0, 10.0, 10.0, 10.0), now=0.0) == [(0, "c"), (0, "b"), (0, "d"), (0, "a")]
    v.mark_down("c", now=0.0)  # failed just now: passed over as first choice, kept as a last resort
    order = v.ranked_candidates((10.0, 10.0, 10.0, 10.0), now=0.0)
    assert order[0] == (0, "b") and order[-1] == (0, "c")


def test_p2p_has_one_candidate_and_placement_by_dimension_zero():
    v = _view(P2P, "adaptive")
    assert v.ranked_candidates((600.0, 10.0, 10.0, 10.0), now=0.0) == [(0, "c")]
    assert v.placement((100, 0, 0, 0), (300, 10, 10, 10)) == {"a", "b"}


# -- settings ----------------------------------------------------------------------------------


def test_settings_carry_the_mode_from_flags_or_env(monkeypatch):
    assert MatcherSettings().partition == DispatcherSettings().partition == MPARTITION
    monkeypatch.setenv("BLUEDOVE_PARTITION", "p2p")
    assert from_env(MatcherSettings).partition == from_env(DispatcherSettings).partition == P2P
    assert from_env(DispatcherSettings, partition=FULL).partition == FULL  # a flag wins
    monkeypatch.setenv("BLUEDOVE_PARTITION", "ring")
    with pytest.raises(ValueError, match="BLUEDOVE_PARTITION"):
        from_env(MatcherSettings)


# -- combinations that make no sense are refused -------------------------------------------------


@pytest.mark.parametrize("argv, says", [
    (["up", "--partition", "p2p", "--autoscale"], "--autoscale needs --partition mpartition"),
    (["matcher", "--id", "m9", "--port", "1", "--store", "redis://127.0.0.1:1/0", "--partition",
      "full-replication", "--join", "127.0.0.1:2"], "--join needs --partition mpartition"),
])
def test_baselines_refuse_joins_and_autoscaling(argv, says, capsys):
    from bluedove.cli.main import build_parser

    args = build_parser().parse_args(argv)
    assert args.func(args) == 2  # before any process or connection is started
    assert says in capsys.readouterr().err


def test_a_baseline_cluster_adds_no_matcher(tmp_path, monkeypatch):
    from bluedove.local.cluster import LocalCluster

    monkeypatch.setenv("BLUEDOVE_PARTITION", "full-replication")
    c = LocalCluster(matchers=2, http_port=1, grpc_port=1, data_dir=tmp_path)  # the env gives the mode
    assert c.partition == FULL
    with pytest.raises(RuntimeError, match="cannot add a matcher under partition full-replication"):
        c.add_matcher()
    assert LocalCluster(matchers=2, http_port=1, grpc_port=1, data_dir=tmp_path, partition=P2P).partition == P2P


# -- many subscriptions at once ------------------------------------------------------------------


@st.composite
def tables_and_boxes(draw):
    """A table of 1-6 members whose segments (1-9 a dimension, uneven cuts) are runs in any
    order, and boxes whose bounds often sit on a cut, at the space's ends, or past them."""
    members = [f"m{i}" for i in range(draw(st.integers(1, 6)))]
    cuts, owners = [], []
    for _ in range(SPACE.k):
        n = draw(st.integers(1, 9))
        inner = sorted(set(draw(st.lists(st.floats(0.001, 999.999), min_size=n - 1, max_size=n - 1))))
        cuts.append((0.0, *inner))
        order = draw(st.permutations(members))
        sizes = [0] * len(order)
        for _ in range(len(inner) + 1):
            sizes[draw(st.integers(0, len(order) - 1))] += 1
        owners.append(tuple(m for m, k in zip(order, sizes) for _ in range(k)))
    table = SegmentTable(1, SPACE, {m: "" for m in members}, tuple(cuts), tuple(owners))
    edges = [c for cs in cuts for c in cs] + [0.0, 1000.0]
    value = st.one_of(st.sampled_from(edges), st.floats(0.0, 1000.0))
    rows = draw(st.lists(st.tuples(*[st.tuples(value, value)] * SPACE.k), min_size=1, max_size=30))
    boxes = [tuple((min(a, b), max(a, b) if a != b else b + 1.0) for a, b in row) for row in rows]
    lows = np.array([[lo for lo, _ in row] for row in boxes])
    highs = np.minimum(np.array([[hi for _, hi in row] for row in boxes]), 1000.0)
    return table, lows, highs


@settings(max_examples=300, deadline=None)
@given(tables_and_boxes(), st.sampled_from(MODES))
def test_placing_many_at_once_is_placing_each(drawn, mode):
    table, lows, highs = drawn
    many = placement_many(mode, table, lows, highs)
    assert all(mask.any() for mask in many.values())
    for r in range(len(lows)):
        want = set(placement(mode, table, tuple(lows[r]), tuple(highs[r])))
        assert {m for m, mask in many.items() if mask[r]} == want
