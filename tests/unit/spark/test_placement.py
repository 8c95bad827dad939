"""The skew job's pure arithmetic: equal-load boundaries, the risk, and risk-aware placement."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.spark import placement as P
from bluedove.spark.job import DEFAULT_COST

ROOT = Path(__file__).resolve().parents[3]


def test_uniform_load_is_cut_at_equal_widths():
    cuts, shares = P.equal_load_cuts(np.linspace(0, 100, 101), np.ones(100), 4)
    assert cuts == pytest.approx([25.0, 50.0, 75.0])
    assert shares == pytest.approx([0.25] * 4)


def test_cuts_follow_the_load_not_the_data_width():
    # Three quarters of the load in the first tenth of the range: three cuts land there.
    load = np.r_[np.full(10, 7.5), np.full(90, 2.5 / 9)]
    cuts, shares = P.equal_load_cuts(np.linspace(0, 100, 101), load, 4)
    assert cuts[:2] == pytest.approx([10 / 3, 20 / 3]) and cuts[2] == pytest.approx(10.0)
    assert shares == pytest.approx([0.25] * 4)


def test_a_hot_value_is_never_cut_and_gets_a_segment_to_itself():
    load = np.ones(100)
    load[50] = 1000.0  # bucket [50, 51): one value that carries 91 % of the load
    cuts, shares = P.equal_load_cuts(np.linspace(0, 100, 101), load, 4, atoms=[50])
    assert 50.0 in cuts and 51.0 in cuts
    assert max(shares) == pytest.approx(1000 / 1099)
    # The same bucket without the atom flag is cut as if its load were spread inside it.
    cuts, _ = P.equal_load_cuts(np.linspace(0, 100, 101), load, 4)
    assert all(50 < c < 51 for c in cuts)


def test_when_the_load_runs_out_the_widest_empty_segments_are_halved():
    load = np.zeros(100)
    load[10] = 5.0
    cuts, shares = P.equal_load_cuts(np.linspace(0, 100, 101), load, 4, atoms=[10])
    assert len(cuts) == 3 and all(a < b for a, b in zip(cuts, cuts[1:]))
    assert shares[0] == pytest.approx(1.0)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(0, 100), min_size=4, max_size=60), st.integers(1, 12), st.data())
def test_cuts_always_rise_inside_the_range_and_balance_up_to_one_bucket(load, n, data):
    b = len(load)
    edges = np.cumsum(np.r_[0.0, data.draw(st.lists(st.floats(0.01, 10), min_size=b, max_size=b))])
    atoms = data.draw(st.sets(st.integers(0, b - 1), max_size=3))
    cuts, shares = P.equal_load_cuts(edges, load, n, atoms)
    assert len(cuts) == n - 1
    assert all(edges[0] < c < edges[-1] for c in cuts) and all(a < b for a, b in zip(cuts, cuts[1:]))
    total = sum(load)
    if total > 0:
        assert sum(shares) == pytest.approx(1.0)
        if not atoms:  # a segment exceeds its share by at most a bucket's load
            assert max(shares) <= 1 / n + max(load) / total + 1e-9


def test_risk_is_the_normal_upper_tail_of_each_matchers_summed_load():
    # 1 dimension... two: matcher j owns segment a[0, j] and a[1, j]; loads already ÷ k.
    mu = np.array([1.0, 2.0, 3.0, 4.0])           # d0: s0 s1, d1: s0 s1
    cov = np.diag([1.0, 1.0, 1.0, 1.0])
    cov[0, 2] = cov[2, 0] = 0.5                    # d0s0 and d1s0 move together
    assign = np.array([[0, 1], [0, 1]])
    means, sds = P.matcher_loads(mu, cov, assign, 2)
    assert means == pytest.approx([4.0, 6.0]) and sds == pytest.approx([math.sqrt(3.0), math.sqrt(2.0)])
    r = P.risks(mu, cov, assign, 2, capacity=5.0)
    tail = lambda x: 0.5 * math.erfc(x / math.sqrt(2))  # noqa: E731
    assert r == pytest.approx([tail(1 / math.sqrt(3)), tail(-1 / math.sqrt(2))])


def test_placement_separates_segments_that_peak_together():
    # Two dimensions, two matchers; segment 0 of each dimension rises and falls together (a
    # rush hour), segment 1 of each is steady. Round robin puts both peaks on matcher 0.
    t = np.arange(200)
    peak = 1.0 + np.sin(t / 10.0)
    steady = np.full(200, 1.0) + 0.05 * np.cos(t / 7.0)
    series = np.column_stack([peak, steady, peak, steady])  # d0s0 d0s1 d1s0 d1s1
    mu, cov = series.mean(axis=0), np.cov(series, rowvar=False)
    capacity = 1.25 * mu.sum() / 2
    placed = P.place(mu, cov, 2, 2, capacity)
    rr = P.round_robin(2, 2)
    assert placed[0, 0] != placed[1, 0] or placed[0, 1] != placed[1, 1]  # the peaks apart
    p_placed, p_rr = P.risks(mu, cov, placed, 2, capacity).max(), P.risks(mu, cov, rr, 2, capacity).max()
    assert p_placed < p_rr
    assert P.gain(p_placed, p_rr) == pytest.approx((p_rr - p_placed) / p_rr)
    assert P.gain(0.0, 0.0) is None


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.integers(0, 10_000))
def test_placement_is_a_permutation_per_dimension_and_never_riskier_than_round_robin(k, n, seed):
    rng = np.random.default_rng(seed)
    series = rng.gamma(2.0, 1.0, (30, k * n)) * rng.uniform(0.2, 3.0, k * n)
    series[:, rng.integers(0, k * n)] += np.linspace(0, 5, 30)  # one trending segment
    mu, cov = series.mean(axis=0), np.cov(series, rowvar=False).reshape(k * n, k * n)
    capacity = 1.1 * mu.sum() / n
    placed = P.place(mu, cov, k, n, capacity)
    assert all(sorted(row) == list(range(n)) for row in placed.tolist())
    assert (P.risks(mu, cov, placed, n, capacity).max()
            <= P.risks(mu, cov, P.round_robin(k, n), n, capacity).max() + 1e-12)


def test_hot_spots_are_the_densest_runs_by_share():
    load = np.ones(100)
    load[20:23] = 50.0
    load[70] = 30.0
    spots = P.hot_spots(np.linspace(0, 100, 101), load)
    assert [(s["low"], s["high"]) for s in spots] == [(20.0, 23.0), (70.0, 71.0)]
    assert spots[0]["load_share"] == pytest.approx(150 / load.sum())


def test_the_jobs_cost_terms_are_the_simulators_calibrated_model():
    model = json.loads((ROOT / "docs" / "sim" / "model.json").read_text())["rtree"]["terms"]
    assert {t: model[t] for t in DEFAULT_COST} == DEFAULT_COST


def test_the_job_reads_either_regime_of_a_calibrated_model_and_names_a_missing_one(tmp_path):
    from bluedove.spark.job import read_cost

    path = ROOT / "docs" / "sim" / "model.json"
    model = json.loads(path.read_text())
    assert read_cost(str(path), "per_dimension") == {t: model["per_dimension"]["terms"].get(t, 0.0)
                                                     for t in DEFAULT_COST}
    other = tmp_path / "m.json"
    other.write_text(json.dumps({"rtree": model["rtree"]}))
    with pytest.raises(ValueError, match="no regime 'per_dimension'"):
        read_cost(str(other), "per_dimension")
