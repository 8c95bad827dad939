"""The simulator's pure parts: placement, candidates, the cost fit, ranking as `rank` does,
queues by hand and closed form."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bluedove.core.forwarding import rank
from bluedove.core.load import LoadReport, matcher_time
from bluedove.lab.sim.costmodel import CostModel, Models, fit
from bluedove.lab.sim.dimindex import DimensionIndex
from bluedove.lab.sim.engine import Pool, SimConfig, Simulator
from bluedove.lab.sim.fluid import matcher_time as matcher_time_v
from bluedove.lab.sim.fluid import rank_vectorised
from bluedove.lab.sim.layouts import build, count_matches, expected_matches, set_sizes, split
from bluedove.lab.sim.saturation import Budget, Prepared, run_at, saturation
from bluedove.lab.workloads.paper import get as get_workload


@pytest.fixture(scope="module")
def w():
    return get_workload("paper", seed=3, n_subs=2000)


def test_mpartition_sizes_equal_the_real_placement(w):
    layout = build("mpartition", w, 7)
    want = np.zeros_like(layout.sizes)
    index = {m: j for j, m in enumerate(layout.members)}
    for lo, hi in zip(w.lows, w.highs):
        for m, dims in layout.table.placement(tuple(lo), tuple(hi)).items():
            for i in dims:
                want[index[m], i] += 1
    assert np.array_equal(layout.sizes, want)


def test_p2p_places_along_dimension_zero_only(w):
    layout = build("p2p", w, 5)
    assert layout.k == 1 and layout.table.space.k == 1
    for j, m in enumerate(layout.members):
        lo, hi = layout.table.segment_bounds(0, j)
        assert layout.sizes[j, 0] == int(np.sum((w.lows[:, 0] < hi) & (lo < w.highs[:, 0])))
    pts = w.sample(50, np.random.default_rng(0))
    assert [layout.members[c] for c in layout.candidates(pts)[:, 0]] == [layout.table.owner_at(0, p[0]) for p in pts]


def test_full_replication_holds_everything_everywhere(w):
    layout = build("full-replication", w, 4)
    assert layout.sizes.tolist() == [[w.n_subs]] * 4
    assert (layout.candidates(w.sample(3, np.random.default_rng(0))) == -1).all()


def test_candidates_are_the_tables(w):
    layout = build("mpartition", w, 9)
    pts = w.sample(200, np.random.default_rng(1))
    got = layout.candidates(pts)
    for p, row in zip(pts, got):
        assert [(i, layout.members[m]) for i, m in enumerate(row)] == layout.table.candidates(tuple(p))


def test_split_hands_the_upper_half_to_the_new_matcher(w):
    layout = build("mpartition", w, 2)
    t = split(layout.table, ["m0", "m1", "m0", "m1"], "m2")
    assert t.segments_of("m2") == {0: (250.0, 500.0), 1: (750.0, 1000.0), 2: (250.0, 500.0), 3: (750.0, 1000.0)}
    assert t.segments_of("m0")[0] == (0.0, 250.0) and t.epoch == layout.table.epoch + 1
    assert set_sizes(t, ("m0", "m1", "m2"), w.lows, w.highs).shape == (3, 4)


def test_expected_matches_agree_with_brute_force_on_average(w):
    pts = w.sample(400, np.random.default_rng(2))
    exact, est = count_matches(w, pts), expected_matches(w, pts)
    assert abs(est.mean() - exact.mean()) / exact.mean() < 0.05
    assert np.corrcoef(exact, est)[0, 1] > 0.95


def test_fit_recovers_known_coefficients_and_scores_held_out_rows():
    rng = np.random.default_rng(0)
    feats = {"one": np.ones(60), "size": rng.uniform(100, 40_000, 60), "matches": rng.uniform(1, 500, 60)}
    y = 2e-6 + 3e-9 * feats["size"] + 8e-7 * feats["matches"]
    test = np.arange(60) % 3 == 2
    terms, stats = fit(feats, y, ("one", "size", "matches"), test)
    assert terms["one"] == pytest.approx(2e-6, rel=1e-6) and terms["matches"] == pytest.approx(8e-7, rel=1e-6)
    assert stats["rows"] == 40 and stats["held_out_rows"] == 20 and stats["r2_test"] > 0.999999
    noisy = y * rng.lognormal(0, 0.3, 60)
    _, stats = fit(feats, noisy, ("one", "size", "matches"), test)
    assert stats["r2_test"] < 0.999 and stats["rel_rms_test"] > 0.1  # a bad fit shows in the held-out score


def test_models_round_trip_and_refuse_unknown_features(tmp_path):
    m = Models(CostModel({"one": 1e-5, "size": 2e-9, "matches": 6e-7}, "rtree", 3e-6, {"fit": {}}),
               CostModel({"one": 4e-6, "searched": 4e-8, "matches": 4e-7}, "per_dimension"))
    m.save(tmp_path / "m.json")
    back = Models.load(tmp_path / "m.json")
    assert back == m and back.rtree.load_s_per_sub == 3e-6
    assert m.rtree.cost({"one": 1, "size": 1000, "matches": 10}) == pytest.approx(1e-5 + 2e-6 + 6e-6)
    with pytest.raises(ValueError, match="unknown features"):
        CostModel({"bogus": 1.0})


def test_dimension_index_is_exact_and_searches_the_overlapping_ones(w):
    pts = w.sample(200, np.random.default_rng(4))
    idx = DimensionIndex(w.lows, w.highs, 2, 0.0, 1000.0)
    for p, want in zip(pts, count_matches(w, pts)):
        rows, searched = idx.match(p)
        assert len(rows) == want
        holding = int(np.sum((w.lows[:, 2] <= p[2]) & (p[2] < w.highs[:, 2])))
        assert holding <= searched <= holding + 0.1 * w.n_subs  # a bucket is 1/32 of the range
        assert len(idx.scan(p)[0]) == want and idx.scan(p)[1] == w.n_subs


@pytest.mark.parametrize("extrapolate", [True, False])
def test_vectorised_ranking_picks_what_rank_picks(extrapolate):
    """Each row: k candidate matchers (candidate i is matcher i's dimension-i queue), each with
    reports for all k of its dimension queues, ranked per matcher as the dispatcher does."""
    rng = np.random.default_rng(7)
    S, k = 300, 4
    shape = (S, k, k)  # row, matcher, dimension
    lam, mu = rng.uniform(0, 600, shape), rng.choice([0.0, 800.0, 1500.0, 3000.0], shape)
    q, subs = rng.integers(0, 50, shape).astype(float), rng.integers(100, 9000, shape).astype(float)
    at, now = np.full(S, 10.0), 10.0 + rng.uniform(0, 0.2, S)
    full = matcher_time_v(lam, mu, q, subs, at, now, extrapolate)  # (S, k, k)
    keys = full[:, np.arange(k), np.arange(k)]
    col = rank_vectorised("adaptive", keys, np.random.default_rng(0))
    policy = "adaptive" if extrapolate else "response-time"
    ties = 0
    for r in range(S):
        view = {f"m{m}": [LoadReport(lam[r, m, i], mu[r, m, i], int(q[r, m, i]), int(subs[r, m, i]), at[r])
                          for i in range(k)] for m in range(k)}
        cands = [(i, f"m{i}") for i in range(k)]
        for i, m in cands:
            assert keys[r, i] == pytest.approx(matcher_time(view[m][i], view[m], float(now[r]), extrapolate))
        first = rank(policy, cands, lambda c: view[c[1]][c[0]], float(now[r]), random.Random(r), view.__getitem__)[0]
        best = set(np.flatnonzero(keys[r] == keys[r].min()).tolist())  # ties go either way, at random
        assert first[0] in best and int(col[r]) in best
        ties += len(best) > 1
    assert ties < S / 2  # most rows have one best candidate: the comparison means something


def test_vectorised_random_choice_is_uniform():
    col = rank_vectorised("random", np.zeros((40_000, 4)), np.random.default_rng(1))
    assert np.allclose(np.bincount(col) / 40_000, 0.25, atol=0.01)


def _prep(w, system, n, model):
    pts = w.sample(4000, np.random.default_rng(9))
    return Prepared.of(build(system, w, n), model, Pool.of(w, pts))


MODEL = CostModel({"one": 1e-5, "size": 2e-9, "matches": 6e-7})
QUICK = Budget(horizon_s=6.0, warmup_s=1.5, steps=5)


@pytest.mark.parametrize("policy", ["random", "subscription-count"])
def test_stepped_simulator_agrees_with_the_closed_form(w, policy):
    prep = _prep(w, "mpartition", 6, MODEL)
    closed = saturation(prep, SimConfig(policy=policy), QUICK)
    assert closed == pytest.approx(1 / prep.work_per_message(policy).max())
    assert run_at(prep, SimConfig(policy=policy), 0.9 * closed, QUICK)[0] is False
    assert run_at(prep, SimConfig(policy=policy), 1.15 * closed, QUICK)[0] is True


def test_one_matcher_queue_by_hand():
    """One matcher, one dimension, 1 ms per message: saturated above 1,000 msg/s, not below."""
    w1 = get_workload("paper", seed=1, n_subs=10, dims=1)
    prep = _prep(w1, "mpartition", 1, CostModel({"one": 1e-3}))
    assert run_at(prep, SimConfig(policy="adaptive"), 900.0, QUICK)[0] is False
    assert run_at(prep, SimConfig(policy="adaptive"), 1150.0, QUICK)[0] is True
    assert 930 < saturation(prep, SimConfig(policy="adaptive"), QUICK) < 1030


def test_full_replication_and_p2p_in_closed_form(w):
    full = _prep(w, "full-replication", 4, MODEL)
    per_msg = float(MODEL.cost({"one": 1, "size": w.n_subs, "matches": full_pool_matches(w)}).mean())
    assert saturation(full, SimConfig(policy="random")) == pytest.approx(4 / per_msg, rel=1e-9)
    p2p = _prep(w, "p2p", 4, MODEL)
    assert p2p.cand.shape[1] == 1 and saturation(p2p, SimConfig(policy="adaptive")) == pytest.approx(
        1 / p2p.work_per_message("random").max())


def full_pool_matches(w):
    return expected_matches(w, w.sample(4000, np.random.default_rng(9)))


def test_discrete_event_forwarding_goes_through_rank(monkeypatch, w):
    import bluedove.lab.sim.engine as engine

    calls = []

    def spy(policy, candidates, reports, now, rng, siblings=None, sent=None):
        calls.append((policy, list(candidates)))
        return list(candidates)[::-1]

    monkeypatch.setattr(engine, "rank", spy)
    layout = build("mpartition", w, 4)
    pts = w.sample(50, np.random.default_rng(3))
    sim = Simulator(layout, CostModel({"one": 1e-4}), Pool.of(w, pts), SimConfig(policy="adaptive"))
    sim.run(lambda t: 100.0, 1.0)
    assert calls and all(p == "adaptive" and len(c) == 4 for p, c in calls)
    assert sum(sum(row) for row in sim.arrived[:4]) == len(calls)  # one forward per message
    # the spy ranks the last dimension first: every message went to its dim-3 candidate
    assert all(sum(sim.arrived[m][:3]) == 0 for m in range(4))


def test_discrete_event_queue_by_hand():
    w1 = get_workload("paper", seed=1, n_subs=10, dims=1)
    layout = build("full-replication", w1, 1)
    sim = Simulator(layout, CostModel({"one": 1e-3}), Pool.of(w1, w1.sample(100, np.random.default_rng(0))),
                    SimConfig(policy="random"))
    res = sim.run(lambda t: 2000.0, 5.0)
    assert sim.free_at[0] - 5.0 == pytest.approx(len(res.t) * 1e-3 - 5.0, abs=0.05)
