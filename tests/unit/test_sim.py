"""The simulator's pure parts: baseline placement, candidates, the cost fit, forwarding through `rank`, a hand-checked queue."""

from __future__ import annotations

import numpy as np
import pytest

from bluedove.sim.costmodel import CostModel, fit
from bluedove.sim.engine import Pool, SimConfig, Simulator
from bluedove.sim.layouts import build, count_matches, expected_matches, set_sizes, split
from bluedove.sim.saturation import Budget, saturation_rate
from bluedove.workloads.paper import get as get_workload


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


def test_fit_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    s, m = rng.uniform(100, 40_000, 50), rng.uniform(1, 500, 50)
    model, stats = fit(s, m, 2e-6 + 3e-9 * s + 8e-7 * m)
    assert model.a == pytest.approx(2e-6, rel=1e-6) and model.c == pytest.approx(8e-7, rel=1e-6)
    assert stats["rel_rms"] < 1e-9
    assert CostModel.from_json(model.to_json()) == model


def test_forwarding_goes_through_rank(monkeypatch, w):
    import bluedove.sim.engine as engine

    calls = []

    def spy(policy, candidates, reports, now, rng):
        calls.append((policy, list(candidates)))
        return list(candidates)[::-1]

    monkeypatch.setattr(engine, "rank", spy)
    layout = build("mpartition", w, 4)
    pts = w.sample(50, np.random.default_rng(3))
    sim = Simulator(layout, CostModel(1e-4, 0, 0), Pool(pts, np.ones(len(pts))), SimConfig(policy="adaptive"))
    sim.run(lambda t: 100.0, 1.0)
    assert calls and all(p == "adaptive" and len(c) == 4 for p, c in calls)
    assert sum(sum(row) for row in sim.arrived[:4]) == len(calls)  # one forward per message
    # the spy ranks the last dimension first: every message went to its dim-3 candidate
    assert all(sum(sim.arrived[m][:3]) == 0 for m in range(4))


def test_one_matcher_queue_by_hand():
    """One matcher, 1 ms per message, messages every 0.5 ms on average: at 2,000 msg/s it is
    saturated (its backlog grows by ~1 s per s); at 500 msg/s it is not; the bisection lands near 1,000."""
    w = get_workload("paper", seed=1, n_subs=10, dims=1)
    layout = build("full-replication", w, 1)
    pool = Pool(w.sample(100, np.random.default_rng(0)), np.zeros(100))
    model = CostModel(a=1e-3, b=0.0, c=0.0)
    sim = Simulator(layout, model, pool, SimConfig(policy="random"))
    res = sim.run(lambda t: 2000.0, 5.0)
    assert sim.free_at[0] - 5.0 == pytest.approx(len(res.t) * 1e-3 - 5.0, abs=0.05)
    rate = saturation_rate(layout, model, pool, SimConfig(policy="random"),
                           Budget(horizon_s=20.0, warmup_s=2.0, messages=20_000, steps=7), hi=4000.0)
    assert 850 < rate < 1050


def test_sim_figure_cli_json(tmp_path):
    import json
    import subprocess
    import sys

    model = tmp_path / "model.json"
    CostModel(a=2e-6, b=2e-9, c=8e-7, meta={"fit": {"rel_rms": 0.0}}).save(model)
    r = subprocess.run([sys.executable, "-m", "bluedove", "sim", "figure", "8", "--model", str(model), "--json",
                        "--messages", "4000", "--horizon", "4", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    fig = json.loads(r.stdout.strip().splitlines()[-1])
    assert fig["figure"] == "8" and set(fig["std_over_mean"]) == {"bluedove", "p2p"}
    assert len(fig["rows"]) == 20 and (tmp_path / "fig8.png").exists()
    assert fig["paper"]["std_over_mean"]["bluedove"] == 0.14
