"""The pure core of the per-second records (bluedove/core/timeseries.py): latency buckets and their
quantiles, the series arrays with gaps, density bins and the decayed rate."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from bluedove.core import timeseries as ts


def test_latency_field_puts_a_value_in_the_first_bucket_whose_bound_holds_it():
    assert ts.latency_field(0.0) == "lat0"
    assert ts.latency_field(0.00025) == "lat0"  # bounds are inclusive upper bounds
    assert ts.latency_field(0.0003) == "lat1"
    assert ts.latency_field(1e9) == ts.LATENCY_FIELDS[-1]  # the open last bucket


def test_quantile_of_a_histogram_is_within_the_bucket_of_the_exact_quantile():
    rng = random.Random(3)
    values = [rng.lognormvariate(math.log(0.01), 1.0) for _ in range(20_000)]
    counts = [0] * len(ts.LATENCY_FIELDS)
    for v in values:
        counts[ts.LATENCY_FIELDS.index(ts.latency_field(v))] += 1
    for q in (0.5, 0.99):
        exact = sorted(values)[int(q * len(values))]
        got = ts.quantile(counts, q)
        i = ts.LATENCY_FIELDS.index(ts.latency_field(exact))
        lo = ts.LATENCY_BOUNDS_S[i - 1] if i else 0.0
        assert lo <= got <= ts.LATENCY_BOUNDS_S[i], (q, exact, got)


def test_quantile_of_nothing_is_none_and_of_one_bucket_lies_inside_it():
    assert ts.quantile([0] * len(ts.LATENCY_FIELDS), 0.5) is None
    counts = [0] * len(ts.LATENCY_FIELDS)
    counts[3] = 10  # (0.00075, 0.001]
    assert 0.00075 <= ts.quantile(counts, 0.5) <= 0.001
    counts = [0] * len(ts.LATENCY_FIELDS)
    counts[-1] = 1  # above the last bound: read as that bound
    assert ts.quantile(counts, 0.99) == ts.LATENCY_BOUNDS_S[-1]


def test_assemble_gives_parallel_arrays_with_nulls_where_nothing_was_written():
    seconds = [100, 101, 102]
    records = [{"published": "5", "delivered": "7", "lat3": "5", "matchers_actual": "4"}, {},
               {"published": "0", "undelivered": "12", "autoscaler_input": "0.25"}]
    s = ts.assemble(seconds, records)
    assert s["t"] == seconds
    assert set(s) == {"t", *ts.SERIES}
    assert all(len(v) == 3 for v in s.values())
    assert s["published"] == [5, None, 0]
    assert s["delivered"] == [7, None, None]
    assert s["matchers_actual"] == [4, None, None]
    assert s["undelivered"] == [None, None, 12]
    assert s["autoscaler_input"] == [None, None, 0.25]
    assert 0.00075 <= s["latency_p50_s"][0] <= 0.001 and s["latency_p50_s"][1:] == [None, None]
    assert s["answered_p50_s"] == [None, None, None]  # no answer handed anything out


def test_the_answered_hop_has_its_own_histogram_in_the_same_buckets():
    """stored -> answered counts in `ans<i>` fields, read as the latency's are, and apart from them."""
    assert ts.answered_field(0.004) == "ans7" and ts.latency_field(0.004) == "lat7"
    s = ts.assemble([1], [{"lat0": "10", ts.answered_field(2.5): "3", ts.answered_field(0.004): "1"}])
    assert s["latency_p99_s"][0] <= 0.00025  # only the publish latency's
    assert 0.003 <= s["answered_p50_s"][0] <= 3.0 and 2.0 <= s["answered_p99_s"][0] <= 3.0


def test_seconds_between_holds_only_whole_seconds_that_ended_and_settled():
    assert ts.seconds_between(100.0, 103.4) == [101]  # 102 ended at 103, not settled until 103.5
    assert ts.seconds_between(100.0, 103.6) == [101, 102]
    assert ts.seconds_between(100.5, 100.9) == []


@pytest.mark.parametrize("since,expected", [(None, 400.0), (-5000.0, 1000.0 - 3600), (5000.0, 1000.0), (900.5, 900.5)])
def test_clamp_since(since, expected):
    assert ts.clamp_since(since, 1000.0) == expected


def test_every_bin_centre_has_exactly_one_owner_among_adjacent_segments():
    cuts = [0.0, 3.3, 250.0, 251.0, 777.7, 1000.0]
    owned = [ts.owned_bins(a, b, 0.0, 1000.0) for a, b in zip(cuts, cuts[1:])]
    flat = [j for o in owned for j in o]
    assert sorted(flat) == list(range(ts.DENSITY_BINS))
    assert owned[2] == []  # a segment narrower than a bin may own no centre


def test_bin_counts_per_dimension_clipped_to_the_ends():
    pts = np.array([[0.0, 10.0], [999.9, 10.0], [-5.0, 19.99], [1e6, 15.0]])
    counts = ts.bin_counts(pts, np.array([0.0, 10.0]), np.array([1000.0, 20.0]))
    assert counts[0][0] == 2 and counts[0][63] == 2 and sum(counts[0]) == 4
    assert counts[1][0] == 2 and counts[1][32] == 1 and counts[1][63] == 1


def test_decayed_rate_of_a_steady_stream_tends_to_the_rate_and_decays_after():
    r = ts.DecayedRate(bins=2, tau_s=5.0)
    for t in range(200):  # 40/s into bin 1 for 200 s
        r.add({1: 40}, float(t))
    at_end = r.rates(199.0)
    assert at_end[1] == pytest.approx(40, rel=0.12) and at_end[0] == 0
    assert r.rates(199.0 + 5.0)[1] == pytest.approx(at_end[1] / math.e, rel=1e-6)  # one time constant later


def test_sum_lists_keeps_none_where_no_list_reports():
    assert ts.sum_lists([[1, None, None], [2, 3, None]], 3) == [3, 3, None]
