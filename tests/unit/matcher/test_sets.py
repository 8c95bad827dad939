"""bluedove/matcher/sets.py: a matcher's per-dimension subscription sets (mPartition, its own side)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bluedove.core.model import build_subscription
from bluedove.core.partition.segments import SegmentTable, equal_partition
from bluedove.core.space import Dimension, Space, default_space
from bluedove.matcher.sets import SubscriptionSets
from bluedove.v1 import matcher_pb2 as pb

SPACE = default_space()  # x0..x3 in [0, 1000)
TABLE = equal_partition(SPACE, {"a": "", "b": "", "c": "", "d": ""})  # b owns [250, 500) everywhere


def sets_of(member: str = "b", table: SegmentTable = TABLE, **kw) -> SubscriptionSets:
    return SubscriptionSets(member, table, **kw)


def sub(sub_id: str, predicates: dict, queue: str = "q1"):
    return build_subscription(sub_id, queue, predicates, SPACE)


def filed_in(sets: SubscriptionSets, sub_id: str) -> list[int]:
    return [i for i, s in enumerate(sets.sets) if sub_id in s]


# -- which dimensions a subscription is filed along -----------------------------------------------


@pytest.mark.parametrize("predicates, dims", [
    ({}, [0, 1, 2, 3]),  # a wildcard overlaps every segment
    ({"x0": [100, 300]}, [0, 1, 2, 3]),
    ({"x0": [0, 250]}, [1, 2, 3]),  # ends exactly where b's segment starts
    ({"x0": [500, 600]}, [1, 2, 3]),  # starts exactly where b's segment ends
    ({"x0": [499.5, 600]}, [0, 1, 2, 3]),
    ({"x0": [250, 251]}, [0, 1, 2, 3]),
    ({"x0": [0, 100], "x1": [600, 700], "x2": [300, 400], "x3": [0, 1000]}, [2, 3]),
    ({"x0": [0, 100], "x1": [600, 700], "x2": [900, 950], "x3": [10, 20]}, []),
])
def test_a_subscription_is_filed_along_the_dimensions_whose_segment_it_overlaps(predicates, dims):
    sets = sets_of("b")
    s = sub("s1", predicates)
    assert sets.dims_for(s.lows, s.highs) == dims
    assert sets.add_subscription(s) == len(dims)
    assert filed_in(sets, "s1") == dims
    assert sets.counts() == [1 if i in dims else 0 for i in range(4)]


def test_placement_and_the_matchers_own_view_agree():
    # What the dispatcher computes (SegmentTable.placement) is what each matcher files.
    s = sub("s1", {"x0": [100, 300], "x1": [500, 750], "x3": [999, 1000]})
    placement = TABLE.placement(s.lows, s.highs)
    for member in TABLE.members:
        assert set(sets_of(member).dims_for(s.lows, s.highs)) == placement.get(member, set())


def test_a_void_subscription_is_filed_nowhere():
    sets = sets_of("d")
    s = sub("s1", {"x0": [1000, 2000]})
    assert s.void
    assert sets.add_subscription(s) == 0
    assert sets.counts() == [0, 0, 0, 0]


def test_a_matcher_without_segments_files_nothing():
    table = SegmentTable(1, SPACE, {"a": "", "e": ""}, ((0.0,),) * 4, (("a",),) * 4)
    sets = SubscriptionSets("e", table)
    assert sets.segments == {}
    assert sets.add_subscription(sub("s1", {})) == 0


def test_adding_twice_files_once():
    sets = sets_of("b")
    assert sets.add_subscription(sub("s1", {})) == 4
    assert sets.add_subscription(sub("s1", {})) == 0
    assert sets.counts() == [1, 1, 1, 1]


def test_add_takes_raw_bounds_too():
    sets = sets_of("a")
    assert sets.add("s1", "q9", (0.0, 0.0, 0.0, 0.0), (10.0, 1000.0, 1000.0, 1000.0)) == 4
    assert sets.add("s2", "q9", (900.0, 0.0, 0.0, 0.0), (1000.0, 1000.0, 1000.0, 1000.0)) == 3
    assert filed_in(sets, "s2") == [1, 2, 3]


# -- removal and tombstones --------------------------------------------------------------------------


def test_remove_takes_it_out_of_every_set():
    sets = sets_of("b")
    sets.add_subscription(sub("s1", {}))
    sets.add_subscription(sub("s2", {"x0": [300, 400]}))
    assert sets.remove("s1", now=0.0) == 4
    assert filed_in(sets, "s1") == []
    assert sets.counts() == [1, 1, 1, 1]  # s2 stays


def test_removing_an_unknown_id_removes_nothing():
    sets = sets_of("b")
    sets.add_subscription(sub("s1", {}))
    assert sets.remove("nope", now=0.0) == 0
    assert sets.counts() == [1, 1, 1, 1]


def test_a_late_add_of_a_removed_id_is_ignored():
    # The remove arrived (catalogue log) before the direct add (slow dispatcher call).
    sets = sets_of("b")
    assert sets.remove("s1", now=0.0) == 0
    assert sets.add_subscription(sub("s1", {})) == 0
    assert sets.add("s1", "q1", (0.0,) * 4, (1000.0,) * 4) == 0
    assert sets.counts() == [0, 0, 0, 0]


def test_a_removed_id_cannot_come_back_by_replay():
    sets = sets_of("b")
    sets.add_subscription(sub("s1", {}))
    sets.remove("s1", now=0.0)
    assert sets.add_subscription(sub("s1", {})) == 0  # the log's old "add" replayed
    assert sets.counts() == [0, 0, 0, 0]


def test_tombstones_stay_bounded():
    # Past 10,000 tombstones, those older than the TTL are forgotten.
    sets = sets_of("b", tombstone_ttl_s=60.0)
    for j in range(10_000):
        sets.remove(f"old{j}", now=0.0)
    assert sets.add_subscription(sub("old0", {})) == 0  # still remembered
    sets.remove("new", now=100.0)
    assert len(sets._tombstones) == 1
    assert sets.add_subscription(sub("old0", {})) == 4  # forgotten: a fresh add is accepted


def test_tombstones_younger_than_the_ttl_are_kept_when_pruning():
    sets = sets_of("b", tombstone_ttl_s=60.0)
    for j in range(10_000):
        sets.remove(f"s{j}", now=50.0)
    sets.remove("last", now=100.0)  # cutoff 40: all still young
    assert sets.add_subscription(sub("s0", {})) == 0
    assert len(sets._tombstones) == 10_001


# -- owns ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim, value, expected", [
    (0, 250.0, True),  # b's lower bound
    (0, 499.999, True),
    (0, 500.0, False),  # b's upper bound belongs to c
    (0, 249.999, False),
    (3, 300.0, True),
    (3, 0.0, False),
])
def test_owns(dim, value, expected):
    assert sets_of("b").owns(dim, value) is expected


def test_owns_on_a_dimension_where_it_has_no_segment():
    space = Space((Dimension("u", 0.0, 10.0), Dimension("v", 0.0, 10.0)))
    table = SegmentTable(1, space, {"a": "", "b": ""}, ((0.0, 5.0), (0.0,)), (("a", "b"), ("a",)))
    sets = SubscriptionSets("b", table)
    assert sets.owns(0, 7.0)
    assert not sets.owns(1, 7.0)
    assert sets.dims_for((0.0, 0.0), (10.0, 10.0)) == [0]


def test_add_many_files_exactly_what_add_would():
    """The bulk path of a catalogue load gives the same sets as adding one by one."""
    space = default_space()
    table = equal_partition(space, {"a": "h:1", "b": "h:2", "c": "h:3"})
    rng = random.Random(3)
    subs = []
    for j in range(600):
        preds = {}
        for d in space.names:
            if rng.random() < 0.7:
                lo = rng.uniform(-100, 1000)
                preds[d] = [lo, lo + rng.choice([1e-9, 1, 50, 400, 2000])]
        subs.append(build_subscription(f"s{j}", f"q{j % 7}", preds, space))
    one, bulk = SubscriptionSets("b", table), SubscriptionSets("b", table)
    one.remove("s5"), bulk.remove("s5")  # a tombstone holds in both paths
    for s in subs:
        one.add_subscription(s)
    assert bulk.add_many(subs) == sum(one.counts())
    assert [sorted(s.ids()) for s in bulk.sets] == [sorted(s.ids()) for s in one.sets]
    assert all("s5" not in s for s in bulk.sets)


def test_rows_from_catalogue_equal_one_by_one_building():
    import json as _json

    import numpy as _np

    from bluedove.core.model import Subscription as _Sub
    from bluedove.core.space import default_space
    from bluedove.matcher.sets import rows_from_catalogue

    space = default_space()
    docs = [{"id": "a", "queue": "q1", "predicates": {"x0": [10, 20], "x2": [-50, 2000]}},
            {"id": "b", "queue": "q2", "predicates": {}},
            {"id": "c", "queue": "q1", "predicates": {"x3": [999.5, 1000]}}]
    ids, queues, lows, highs = rows_from_catalogue([_json.dumps(d) for d in docs], space)
    one = [_Sub.from_json(d, space) for d in docs]
    assert ids == ["a", "b", "c"] and queues == ["q1", "q2", "q1"]
    assert (_np.array_equal(lows, _np.array([s.lows for s in one]))
            and _np.array_equal(highs, _np.array([s.highs for s in one])))


# -- what the catalogue tail may skip unparsed ----------------------------------------------------


def test_a_direct_add_is_filed_once_and_a_removed_id_always():
    sets = sets_of()
    s = sub("s1", {"x0": [300, 400]})
    sets.add_direct_one(s.id, s.queue, s.lows, s.highs)
    assert filed_in(sets, "s1") == [0, 1, 2, 3]
    assert sets.filed("s1")  # the tail's read of its log entry
    assert not sets.filed("s1")  # each add is logged once: the id is forgotten
    assert not sets.filed("s2")  # the tail parses what no direct call brought
    sets.remove("s3")
    assert sets.filed("s3") and sets.filed("s3")  # a removed id stays skipped


def _columns(subs) -> pb.Boxes:
    return pb.Boxes(ids=[s.id for s in subs], queues=[s.queue for s in subs],
                    lows=np.array([s.lows for s in subs], dtype="<f8").tobytes(),
                    highs=np.array([s.highs for s in subs], dtype="<f8").tobytes())


def test_a_batch_in_columns_is_filed_as_the_same_batch_in_messages():
    rng = random.Random(5)
    subs = []
    for i in range(60):
        lo = [rng.uniform(0, 900) for _ in range(4)]
        subs.append(sub(f"s{i}", {f"x{d}": [lo[d], lo[d] + rng.uniform(0.5, 400)] for d in range(rng.randint(0, 4))},
                        queue=f"q{i % 3}"))
    by_messages, by_columns = sets_of(), sets_of()
    n = by_messages.add_direct_batch([pb.Subscription(id=s.id, queue=s.queue, lows=s.lows, highs=s.highs)
                                      for s in subs])
    assert by_columns.add_direct_batch([], _columns(subs)) == n > 0
    for s in subs:
        assert filed_in(by_columns, s.id) == filed_in(by_messages, s.id)
        assert by_columns.filed(s.id) and by_messages.filed(s.id)  # the tail skips them unparsed
    assert [dict(x.queues) == dict(y.queues) for x, y in zip(by_columns.sets, by_messages.sets)] == [True] * 4


def test_columns_skip_a_replaced_id_and_malformed_ones_change_nothing():
    sets = sets_of()
    a, b = sub("a", {"x0": [300, 400]}), sub("b", {"x1": [260, 270]})
    sets._replaced["a"] = 0.0  # a newer version is filed: this add of "a" is late
    assert sets.add_direct_batch([], _columns([a, b])) > 0
    assert filed_in(sets, "a") == [] and filed_in(sets, "b") == [0, 1, 2, 3]
    bad = _columns([sub("c", {})])
    bad.lows = bad.lows[:-8]  # a row one bound short
    with pytest.raises(ValueError, match="float64 a row"):
        sets.add_direct_batch([], bad)
    assert filed_in(sets, "c") == [] and not sets.filed("c")


def test_direct_ids_the_tail_never_reads_are_forgotten_past_a_bound(monkeypatch):
    import bluedove.matcher.sets as catalog

    monkeypatch.setattr(catalog, "DIRECT_MAX", 3)
    sets = sets_of()
    lows, highs = np.zeros((1, 4)), np.full((1, 4), 1000.0)
    for i in range(5):
        sets.add_direct([f"s{i}"], ["q1"], lows, highs)
    # Over the bound the record starts again: the older ids are parsed by the tail (an add
    # of what the sets hold changes nothing), never lost.
    assert [sets.filed(f"s{i}") for i in range(5)] == [False, False, False, False, True]
    assert filed_in(sets, "s0") == [0, 1, 2, 3]
