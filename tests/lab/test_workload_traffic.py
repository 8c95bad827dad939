"""The traffic workload: deterministic, inside its space, rush hours visible, wildcards present."""

from __future__ import annotations

import numpy as np
import pytest

from bluedove.core.space import load_space
from bluedove.lab.workloads import Workload, brute_force
from bluedove.lab.workloads.traffic import (
    CITIES,
    HOUR,
    RUSH_WINDOWS_H,
    get,
    in_rush_hour,
    nearest_city,
    traffic_space,
    write_space,
)


@pytest.fixture(scope="module")
def w() -> Workload:
    return get(seed=7, drivers=300, subs_per_driver=3)


def test_space_is_the_documented_one():
    assert [(d.name, d.min, d.max) for d in traffic_space().dimensions] == [
        ("longitude", -180.0, 180.0), ("latitude", -90.0, 90.0), ("speed", 0.0, 200.0), ("timestamp", 0.0, 86400.0)]


def test_space_file_round_trips(tmp_path):
    path = write_space(tmp_path / "traffic.yaml")
    assert load_space(path) == traffic_space()


def test_same_seed_same_arrays():
    a, b = get(seed=3, drivers=40), get(seed=3, drivers=40)
    np.testing.assert_array_equal(a.lows, b.lows)
    np.testing.assert_array_equal(a.highs, b.highs)
    np.testing.assert_array_equal(a.queue_of, b.queue_of)
    np.testing.assert_array_equal(a.messages(500, seed=9), b.messages(500, seed=9))


def test_another_seed_other_arrays():
    assert not np.array_equal(get(seed=1, drivers=40).lows, get(seed=2, drivers=40).lows)
    w = get(seed=1, drivers=40)
    assert not np.array_equal(w.messages(100, seed=1), w.messages(100, seed=2))


def test_shape_and_queues(w):
    assert w.n_subs == 900 and w.n_queues == 300
    assert w.lows.shape == w.highs.shape == (900, 4)
    assert np.bincount(w.queue_of, minlength=300).tolist() == [3] * 300


@pytest.mark.parametrize("bad", [{"drivers": 0}, {"subs_per_driver": 0}])
def test_rejects_empty_fleets(bad):
    with pytest.raises(ValueError):
        get(**bad)


def test_points_inside_the_space(w):
    pts = w.messages(20_000, seed=1)
    assert pts.shape == (20_000, 4)
    for i, d in enumerate(w.space.dimensions):
        assert d.min <= pts[:, i].min() and pts[:, i].max() < d.max, d.name


def test_subscriptions_inside_the_space_and_not_empty(w):
    for i, d in enumerate(w.space.dimensions):
        assert (w.lows[:, i] >= d.min).all() and (w.highs[:, i] <= d.max).all(), d.name
    assert (w.lows < w.highs).all()


def test_readings_concentrate_on_the_cities(w):
    pts = w.messages(10_000, seed=1)
    near = np.array(nearest_city(pts)) != "highway"
    assert near.mean() > 0.9
    assert set(nearest_city(pts)) == {c[0] for c in CITIES} | {"highway"}


def test_rush_hour_burst_is_visible(w):
    pts = w.messages(20_000, seed=1)
    rush_hours = sum(hi - lo for lo, hi in RUSH_WINDOWS_H)
    share = in_rush_hour(pts[:, 3]).mean()
    assert share > 2 * rush_hours / 24  # more than twice what a uniform day gives
    per_hour = np.bincount((pts[:, 3] // HOUR).astype(int), minlength=24)
    assert per_hour[8] > 3 * per_hour[3] and per_hour[17] > 3 * per_hour[3]


def test_rush_hour_traffic_is_slower(w):
    pts = w.messages(20_000, seed=1)
    city = np.array(nearest_city(pts)) != "highway"
    rush = in_rush_hour(pts[:, 3])
    assert np.median(pts[city & rush, 2]) < np.median(pts[city & ~rush, 2]) - 15


def test_some_dimensions_are_left_out(w):
    names = w.space.names
    preds = [w.predicates(j) for j in range(w.n_subs)]
    assert all(preds), "every subscription constrains something"
    for name in names:
        left_out = sum(name not in p for p in preds)
        assert 0 < left_out < len(preds), f"{name}: left out by {left_out} of {len(preds)}"
    speed_only = [p for p in preds if set(p) == {"speed"}]
    assert speed_only and all(p["speed"][1] == 200.0 for p in speed_only)  # speeding alerts, anywhere
    assert any(set(p) == {"longitude", "latitude", "speed"} and p["speed"][0] == 0.0 for p in preds)  # slow on route
    assert any("timestamp" in p and p["timestamp"][1] - p["timestamp"][0] <= 2 * HOUR + 10 for p in preds)


def test_predicates_match_like_the_arrays(w):
    """The API form of a subscription (wildcards left out) selects the same points as its row."""
    pts = w.messages(2000, seed=4)
    rows = brute_force(w.lows, w.highs, pts)
    for j in range(0, w.n_subs, 37):
        p = w.predicates(j)
        idx = [w.space.index(n) for n in p]
        lo = np.array([p[n][0] for n in p])
        hi = np.array([p[n][1] for n in p])
        api = np.all((pts[:, idx] >= lo) & (pts[:, idx] < hi), axis=1)
        oracle = np.array([j in r for r in rows])
        np.testing.assert_array_equal(api, oracle)


def test_messages_match_a_plausible_number_of_drivers(w):
    pts = w.messages(3000, seed=1)
    queues = [len(set(w.queue_of[r].tolist())) for r in brute_force(w.lows, w.highs, pts)]
    assert 0.2 < np.mean(queues) < 3.0  # a picture a person can follow, not a flood
