"""The paper and sparse workloads (docs/workloads.md): deterministic, inside the space, the paper's figures."""

from __future__ import annotations

import numpy as np
import pytest

from bluedove.lab.workloads import Workload, brute_force
from bluedove.lab.workloads.paper import cropped_normal, get, hot_spot, paper, sparse


@pytest.fixture(scope="module")
def pw() -> Workload:
    return get("paper")


@pytest.fixture(scope="module")
def sw() -> Workload:
    return get("sparse")


def test_same_seed_same_arrays():
    a, b = get("paper", seed=5, n_subs=2000), get("paper", seed=5, n_subs=2000)
    assert np.array_equal(a.lows, b.lows) and np.array_equal(a.highs, b.highs)
    assert np.array_equal(a.queue_of, b.queue_of)
    assert np.array_equal(a.messages(100, seed=3), b.messages(100, seed=3))


def test_different_seeds_differ():
    a, b = get("paper", seed=5, n_subs=2000), get("paper", seed=6, n_subs=2000)
    assert not np.array_equal(a.lows, b.lows)
    assert not np.array_equal(a.messages(100, seed=3), a.messages(100, seed=4))


def test_paper_shape(pw):
    assert pw.name == "paper"
    assert pw.space.names == ("x0", "x1", "x2", "x3")
    assert pw.lows.shape == pw.highs.shape == (40_000, 4)
    assert pw.n_subs == 40_000 and pw.n_queues == 40_000
    assert np.array_equal(np.sort(pw.queue_of), np.arange(40_000))  # one queue per subscription


@pytest.mark.parametrize("name, width", [("paper", 250.0), ("sparse", 60.0)])
def test_predicates_inside_the_space(name, width, pw, sw):
    w = pw if name == "paper" else sw
    assert np.all(w.lows >= 0.0) and np.all(w.highs <= 1000.0)
    assert np.allclose(w.highs - w.lows, width, rtol=0, atol=1e-9)
    assert np.all(w.lows <= 1000.0 - width)
    # cropping piles the tails on the space's edges: some lows are exactly 0 or 1000 - width
    assert np.any(w.lows[:, 0] == 0.0) and np.any(w.lows[:, 3] == 1000.0 - width)


def test_centres_follow_the_hot_spots(pw):
    # dimension i's hot spot is at 125 + 250 i: the per-dimension medians rise with i
    centres = (pw.lows + pw.highs) / 2
    med = np.median(centres, axis=0)
    assert list(med) == sorted(med)
    assert med[0] < 300 and med[3] > 700


def _densest_over_mean(w: Workload, n: int = 20) -> float:
    """Largest over mean count of subscriptions overlapping one of n equal segments of a dimension."""
    seg = 1000.0 / n
    sizes = [np.sum((w.lows[:, i] < (j + 1) * seg) & (j * seg < w.highs[:, i])) for i in range(w.space.k)
             for j in range(n)]
    return max(sizes) / np.mean(sizes)


def test_hot_spot_density_is_about_2_7x(pw):
    # the paper's §IV-B: "the density of subscriptions at a hot spot is 2.7x of the average"
    assert 2.3 < _densest_over_mean(pw) < 3.1


def test_messages_uniform_inside_the_space(pw):
    pts = pw.messages(20_000, seed=1)
    assert pts.shape == (20_000, 4)
    assert np.all(pts >= 0.0) and np.all(pts < 1000.0)
    quarter = np.mean(pts < 250.0, axis=0)
    assert np.all(np.abs(quarter - 0.25) < 0.02)


def test_paper_about_150_matches_per_message(pw):
    pts = pw.messages(400, seed=2)
    mean = np.mean([len(m) for m in brute_force(pw.lows, pw.highs, pts)])
    assert 120 <= mean <= 180  # docs/workloads.md: about 150 (0.4 %)


def test_sparse_shape_and_queues(sw):
    assert sw.name == "sparse"
    assert sw.lows.shape == (100_000, 4)
    assert sw.n_queues == 10_000
    assert np.array_equal(np.bincount(sw.queue_of), np.full(10_000, 10))


def test_sparse_about_one_match_per_message(sw):
    pts = sw.messages(300, seed=2)
    mean = np.mean([len(m) for m in brute_force(sw.lows, sw.highs, pts)])
    assert 0.5 <= mean <= 2.0


def test_sparse_centres_drawn_like_paper():
    p, s = paper(seed=4, n_subs=5000), sparse(seed=4, n_subs=5000)
    pc, sc = (p.lows + p.highs) / 2, (s.lows + s.highs) / 2
    inner = (pc > 125.0) & (pc < 875.0)  # neither predicate was pushed inside the space
    assert inner.mean() > 0.5
    assert np.allclose(pc[inner], sc[inner])


@pytest.mark.parametrize("j", [1, 2, 4])
def test_adverse_skews_the_first_j_dimensions(j):
    w = get("paper", seed=1, adverse=j, n_subs=100)
    pts = w.messages(20_000, seed=1)
    assert np.all(pts >= 0.0) and np.all(pts < 1000.0)
    for i in range(4):
        near_hot = np.mean(np.abs(pts[:, i] - hot_spot(i)) < 125.0)
        if i < j:
            assert near_hot > 0.33, (i, near_hot)  # uniform gives 0.25
        else:
            assert abs(near_hot - 0.25) < 0.02, (i, near_hot)


def test_adverse_messages_match_more():
    w = get("paper", seed=1, adverse=4, n_subs=10_000)
    u = get("paper", seed=1, n_subs=10_000)
    adverse = np.mean([len(m) for m in brute_force(w.lows, w.highs, w.messages(300, seed=1))])
    uniform = np.mean([len(m) for m in brute_force(u.lows, u.highs, u.messages(300, seed=1))])
    assert adverse > 2 * uniform


def test_sigma_flattens():
    sharp, flat = get("paper", sigma=250, n_subs=20_000), get("paper", sigma=1000, n_subs=20_000)
    assert flat.name == "paper(sigma=1000,n_subs=20000)"
    assert np.std(flat.lows[:, 1]) > np.std(sharp.lows[:, 1])
    assert _densest_over_mean(flat) < 0.7 * _densest_over_mean(sharp)


def test_dims_keeps_the_first_k():
    w = get("paper", dims=2, n_subs=1000)
    full = get("paper", n_subs=1000)
    assert w.space.k == 2 and w.space.names == ("x0", "x1")
    assert w.lows.shape == (1000, 2) and w.messages(10).shape == (10, 2)
    assert np.array_equal(w.lows, full.lows[:, :2])  # dimension columns do not depend on k


def test_predicates_round_trip(pw):
    pred = pw.predicates(0)
    for i, name in enumerate(pw.space.names):
        lo, hi = pw.lows[0, i], pw.highs[0, i]
        assert pred[name] == [lo, hi]


@pytest.mark.parametrize("name, params", [
    ("nope", {}), ("paper", {"dims": 5}), ("paper", {"dims": 0}), ("paper", {"adverse": 5}),
    ("paper", {"sigma": 0}), ("sparse", {"n_subs": -1}),
])
def test_bad_parameters_are_refused(name, params):
    with pytest.raises(ValueError):
        get(name, **params)


def test_none_parameters_mean_defaults():
    assert get("paper", seed=2, sigma=None, n_subs=None, dims=None, adverse=None).n_subs == 40_000


def test_cropped_normal_stays_inside_and_is_deterministic():
    a = cropped_normal(np.random.default_rng(1), 10_000, 125.0, 1000.0)
    b = cropped_normal(np.random.default_rng(1), 10_000, 125.0, 1000.0)
    assert np.array_equal(a, b)
    assert np.all(a >= 0.0) and np.all(a < 1000.0)
