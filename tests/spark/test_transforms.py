"""Each transform of the skew job on tiny DataFrames, checked by hand or against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from bluedove.spark import transforms as T
from bluedove.spark.skew_stats import bucket_edges

SPACE = [("x", 0.0, 30.0), ("y", 0.0, 100.0)]
EDGES = [[0.0, 10.0, 20.0, 30.0], [0.0, 50.0, 100.0]]


def _messages(spark, rows):
    return spark.createDataFrame(rows, "ts DOUBLE, point ARRAY<DOUBLE>")


def _subs(spark, rows):
    return spark.createDataFrame(rows, "lows ARRAY<DOUBLE>, highs ARRAY<DOUBLE>")


def _table(df, *cols):
    return sorted(tuple(r[c] for c in cols) for r in df.collect())


def test_a_message_falls_in_the_bucket_whose_lower_edge_it_reaches(spark):
    msgs = _messages(spark, [(0.0, [5.0, 0.0]), (1.0, [10.0, 50.0]), (2.0, [29.9, 99.9]), (3.0, [0.0, 49.99])])
    got = _table(T.message_buckets(msgs, EDGES), "ts", "b0", "b1")
    assert got == [(0.0, 0, 0), (1.0, 1, 1), (2.0, 2, 1), (3.0, 0, 0)]
    hist = _table(T.message_histogram(T.message_buckets(msgs, EDGES), 2), "dim", "bucket", "messages")
    assert hist == [(0, 0, 2.0), (0, 1, 1.0), (0, 2, 1.0), (1, 0, 2.0), (1, 1, 2.0)]


def test_a_range_reaches_the_buckets_it_overlaps_and_not_the_one_starting_at_its_end(spark):
    subs = _subs(spark, [([0.0, 0.0], [10.0, 100.0]),    # x: bucket 0 only (ends on the edge 10)
                         ([5.0, 0.0], [20.0, 50.0]),     # x: 0..1; y: 0 only
                         ([10.0, 50.0], [30.0, 100.0]),  # x: 1..2; y: 1
                         ([0.0, 0.0], [30.0, 100.0]),    # everything
                         ([5.0, 0.0], [5.0, 100.0])])    # empty on x: matches nothing, dropped
    got = _table(T.subscription_buckets(subs, EDGES), "first0", "last0", "first1", "last1")
    assert got == [(0, 0, 0, 1), (0, 1, 0, 0), (0, 2, 0, 1), (1, 2, 1, 1)]
    cov = _table(T.coverage_histogram(T.subscription_buckets(subs, EDGES), T.grid(spark, EDGES), 2),
                 "dim", "bucket", "subscriptions")
    assert cov == [(0, 0, 3.0), (0, 1, 3.0), (0, 2, 2.0), (1, 0, 3.0), (1, 1, 3.0)]


def test_coverage_equals_a_brute_force_count_on_random_ranges(spark):
    rng = np.random.default_rng(4)
    edges = [sorted(set([0.0, 1000.0, *np.round(rng.uniform(1, 999, 40), 1).tolist()]))]
    lows = np.round(rng.uniform(0, 1000, 300), 0)
    highs = np.minimum(lows + np.round(rng.uniform(1, 300, 300), 0), 1000.0)
    subs = _subs(spark, [([float(a)], [float(b)]) for a, b in zip(lows, highs)])
    got = dict(((r["bucket"]), r["subscriptions"]) for r in
               T.coverage_histogram(T.subscription_buckets(subs, [edges[0]]), T.grid(spark, edges), 1).collect())
    e = np.asarray(edges[0])
    want = [int(np.sum((lows < e[b + 1]) & (highs > e[b]))) for b in range(len(e) - 1)]
    assert [got[b] for b in range(len(e) - 1)] == want


def test_the_load_model_is_messages_times_the_cost_of_searching_and_matching(spark):
    # x: bucket 0 has 2 messages and 3 subscriptions; y: every message passes half the subs.
    cells = T.grid(spark, [[0.0, 10.0, 20.0], [0.0, 1.0]])
    msgs = spark.createDataFrame([(0, 0, 2.0), (0, 1, 1.0), (1, 0, 3.0)], "dim INT, bucket INT, messages DOUBLE")
    cover = spark.createDataFrame([(0, 0, 3.0), (0, 1, 1.0), (1, 0, 2.0)], "dim INT, bucket INT, subscriptions DOUBLE")
    cost = {"one": 1.0, "searched": 0.1, "matches": 10.0}
    rows = {(r["dim"], r["bucket"]): r for r in T.load_model(cells, msgs, cover, 4.0, cost).collect()}
    # p_x = (2·3 + 1·1) / (3 · 4) = 7/12; p_y = 3·2 / (3 · 4) = 1/2
    assert rows[(0, 0)]["matches"] == pytest.approx(3 * 0.5)
    assert rows[(0, 0)]["load"] == pytest.approx(2 * (1.0 + 0.1 * 3 + 10.0 * 1.5))
    assert rows[(0, 1)]["load"] == pytest.approx(1 * (1.0 + 0.1 * 1 + 10.0 * 0.5))
    assert rows[(1, 0)]["matches"] == pytest.approx(2 * 7 / 12)
    assert rows[(1, 0)]["load"] == pytest.approx(3 * (1.0 + 0.1 * 2 + 10.0 * 2 * 7 / 12))


def test_uniform_messages_spread_by_bucket_width(spark):
    cells = T.grid(spark, [[0.0, 10.0, 40.0], [0.0, 100.0]])
    got = _table(T.uniform_message_histogram(cells, [("x", 0.0, 40.0), ("y", 0.0, 100.0)], 100.0),
                 "dim", "bucket", "messages")
    assert got == [(0, 0, 25.0), (0, 1, 75.0), (1, 0, 100.0)]


def test_the_series_sums_each_window_s_cost_per_segment_shared_by_the_candidates(spark):
    msgs = _messages(spark, [(0.0, [5.0, 10.0]), (30.0, [15.0, 10.0]), (70.0, [25.0, 60.0]), (None, [1.0, 1.0])])
    units = spark.createDataFrame([(0, 0, 0, 1.0), (0, 1, 0, 2.0), (0, 2, 1, 4.0), (1, 0, 2, 8.0), (1, 1, 3, 16.0)],
                                  "dim INT, bucket INT, col INT, unit DOUBLE")
    got = _table(T.segment_series(T.message_buckets(msgs, EDGES), units, 2, 60.0, 0.0), "window", "col", "load")
    # window 0: x buckets 0 and 1 (col 0: 1 + 2), y bucket 0 twice (col 2: 8 + 8); window 1: col 1 and 3.
    # Each cost halved: a message goes to one of its two candidates. The message with no time is left out.
    assert got == [(0, 0, 1.5), (0, 2, 8.0), (1, 1, 2.0), (1, 3, 8.0)]


def test_a_value_that_holds_many_quantiles_becomes_an_atom_bucket_of_its_own(spark):
    rng = np.random.default_rng(1)
    xs = np.where(rng.random(2000) < 0.4, 7.0, rng.uniform(0, 30, 2000))
    ys = rng.uniform(0, 100, 2000)
    msgs = _messages(spark, [(0.0, [float(x), float(y)]) for x, y in zip(xs, ys)])
    subs = _subs(spark, [([0.0, 0.0], [30.0, 100.0])])
    edges, atoms = bucket_edges(subs, msgs, SPACE, 64)
    assert len(atoms[0]) == 1 and not atoms[1]
    a = atoms[0][0]
    assert edges[0][a] == 7.0 and edges[0][a + 1] - 7.0 < 1e-6
    assert all(np.diff(edges[0]) > 0) and edges[0][0] == 0.0 and edges[0][-1] == 30.0


def test_a_hot_string_is_an_atom_of_its_one_coordinate(spark):
    hot = float(int.from_bytes(b"us-eas", "big"))  # "us-east-1" and "us-east-2": one coordinate
    rng = np.random.default_rng(2)
    xs = np.where(rng.random(2000) < 0.4, hot, np.floor(rng.uniform(0, 256.0 ** 6, 2000)))
    msgs = _messages(spark, [(0.0, [float(x)]) for x in xs])
    subs = _subs(spark, [([0.0], [256.0 ** 6])])
    edges, atoms = bucket_edges(subs, msgs, [("region", 0.0, 256.0 ** 6)], 64, ["string"])
    assert len(atoms[0]) == 1 and edges[0][atoms[0][0]] == hot and edges[0][atoms[0][0] + 1] == hot + 1


@pytest.mark.parametrize("windows", [1, 7])
def test_the_segment_loads_mean_and_covariance_equal_numpy_s(spark, windows):
    """Every window from the first to the last counts (one with no message is a row of zeros);
    a constant column has no covariance; one window has none at all."""
    from bluedove.spark.skew_stats import _covariance

    rng = np.random.default_rng(5)
    n_cols = 4
    loads = rng.uniform(0, 10, (windows, n_cols))
    if windows > 2:
        loads[1] = 0.0  # a window with no message: no row in the series
    loads[:, 2] = 0.0  # a segment no message reached: constant
    rows = [(w + 10, c, float(loads[w, c])) for w in range(windows) for c in range(n_cols) if loads[w, c]]
    series = spark.createDataFrame(rows, "window LONG, col INT, load DOUBLE")
    mu, cov, n = _covariance(series, n_cols)
    assert n == windows
    assert mu == pytest.approx(loads.mean(axis=0))
    want = np.cov(loads, rowvar=False) if windows > 1 else np.zeros((n_cols, n_cols))
    assert cov == pytest.approx(want, abs=1e-9)
