"""The fault bench's verdict: lost, duplicated, misdelivered and unaccepted deliveries are each
counted, against the brute-force oracle; and its flags."""

from __future__ import annotations

import pytest

from bluedove.lab.bench import parse
from bluedove.lab.faults.inject import is_whole
from bluedove.lab.faults.workload import expected_pairs, judge

SUBS = {"s1": ("qa", {"x0": [0, 500]}), "s2": ("qa", {"x1": [100, 200]}), "s3": ("qb", {})}
POINTS = {"m1": (10.0, 150.0, 0.0, 0.0), "m2": (600.0, 0.0, 999.0, 500.0)}


def test_expected_pairs_name_each_queue_with_its_matching_subscriptions():
    assert expected_pairs(SUBS, POINTS) == {
        ("qa", "m1"): frozenset({"s1", "s2"}), ("qb", "m1"): frozenset({"s3"}),
        ("qb", "m2"): frozenset({"s3"}),
    }


def test_a_bound_is_low_inclusive_high_exclusive():
    subs = {"s": ("q", {"x0": [100, 200]})}
    assert expected_pairs(subs, {"lo": (100.0, 0, 0, 0), "hi": (200.0, 0, 0, 0)}) == {("q", "lo"): frozenset({"s"})}


def test_judge_counts_each_kind_of_failure():
    expected = expected_pairs(SUBS, POINTS)
    exact = [("qa", "m1", frozenset({"s1", "s2"})), ("qb", "m1", frozenset({"s3"})), ("qb", "m2", frozenset({"s3"}))]
    v = judge(expected, exact, {"m1", "m2"})
    assert (v.lost, v.duplicates, v.wrong, v.unaccepted) == (0, 0, 0, 0)
    v = judge(expected, exact[:2], {"m1", "m2"})
    assert v.lost == 1
    v = judge(expected, exact + [exact[0]], {"m1", "m2"})
    assert v.duplicates == 1
    v = judge(expected, [("qa", "m1", frozenset({"s1"}))] + exact[1:], {"m1", "m2"})
    assert (v.wrong, v.lost) == (1, 0)
    v = judge(expected, exact + [("qa", "m9", frozenset({"s1"}))], {"m1", "m2"})
    assert (v.unaccepted, v.wrong) == (1, 0)


def test_whole_means_every_segment_owner_alive():
    assert is_whole({"members": [{"status": "alive"}, {"status": "dead", "idle": True}]})
    assert not is_whole({"members": [{"status": "alive"}, {"status": "suspect", "idle": False}]})
    assert not is_whole({"members": []}) and not is_whole(None)


def test_bench_faults_flags():
    assert parse(["faults", "--fault", "store-kill,partition"]).fault == ["store-kill", "partition"]
    assert len(parse(["faults", "--fault", "all"]).fault) == 6
    with pytest.raises(SystemExit) as e:
        parse(["faults", "--fault", "meteor"])
    assert e.value.code == 2
