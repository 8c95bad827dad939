"""Subscriptions with filters in a matcher's sets (bluedove/matcher/sets.py, filter_book.py):
every way they arrive (catalogue, a dispatcher's direct call, an old owner's export) files
their boxes and teaches the book their filter; a removal takes every box and the filter."""

from __future__ import annotations

import json

import numpy as np

from bluedove.core.model import build_subscription
from bluedove.core.partition.segments import equal_partition
from bluedove.core.space import default_space
from bluedove.matcher.sets import SubscriptionSets
from bluedove.v1 import matcher_pb2 as pb

SPACE = default_space()  # x0..x3 in [0, 1000)
TABLE = equal_partition(SPACE, {"a": "", "b": "", "c": "", "d": ""})  # b owns [250, 500) everywhere
IN = {"x0": {"in": [300, 310]}}  # two boxes, both in b's segment of x0
NOT_IN = {"x1": {"not_in": [260]}, "x0": [250, 260]}  # one box, checked after the index


def _rows(sets: SubscriptionSets) -> set[str]:
    return {key for s in sets.sets for key in s.ids()}


def _matched(sets: SubscriptionSets, dim: int, point: list[float]) -> list[str]:
    m = sets.sets[dim].matches(np.array([point], dtype=np.float64))
    return sorted(sid for _p, _q, sids in m.deliveries() for sid in sids)


def test_the_catalogue_files_a_filter_s_boxes_and_the_book_checks_them():
    sets = SubscriptionSets("b", TABLE)
    raws = [json.dumps({"id": "f", "queue": "q", "predicates": IN}),
            json.dumps({"id": "n", "queue": "q", "predicates": NOT_IN}),
            json.dumps({"id": "p", "queue": "q", "predicates": {"x0": [250, 500]}}),
            json.dumps({"id": "o", "queue": "q", "predicates": {"any_of": [{"x0": [400, 450]}, {"x0": [420, 470]}]}})]
    sets.add_catalogue(raws)
    assert {"f#0", "f#1", "n#0", "p", "o#0", "o#1"} <= _rows(sets) and len(sets.book) == 3
    assert _matched(sets, 0, [430, 0, 0, 0]) == ["o", "p"]  # in both of o's boxes: once
    assert _matched(sets, 0, [300, 0, 0, 0]) == ["f", "p"]
    assert _matched(sets, 0, [305, 0, 0, 0]) == ["p"]  # between the two values of `in`
    assert _matched(sets, 0, [255, 261, 0, 0]) == ["n", "p"]
    assert _matched(sets, 0, [255, 260, 0, 0]) == ["p"]  # in n's box, but its not_in says no


def test_a_removal_takes_every_box_and_the_filter_and_a_late_add_stays_out():
    sets = SubscriptionSets("b", TABLE)
    f = build_subscription("f", "q", IN, SPACE)
    sets.add_many([f])
    assert sets.remove("f") > 0
    assert not any(k.startswith("f") for k in _rows(sets)) and len(sets.book) == 0
    sets.add_many([f])  # a direct call that comes late: the tombstone keeps it out
    assert not any(k.startswith("f") for k in _rows(sets))


def test_a_dispatcher_s_direct_call_carries_a_filter_s_predicates():
    sets = SubscriptionSets("b", TABLE)
    sent = [pb.Subscription(id="f", queue="q", lows=[300, 0, 0, 0], highs=[310.00000000000006, 1000, 1000, 1000],
                            predicates=json.dumps(IN)),
            pb.Subscription(id="p", queue="q", lows=[250, 0, 0, 0], highs=[500, 1000, 1000, 1000])]
    assert sets.add_direct_batch(sent) > 0
    assert _matched(sets, 0, [310, 0, 0, 0]) == ["f", "p"]
    assert sets.filed("f") and sets.filed("p")  # their catalogue entries are skipped unparsed


def test_new_sets_share_the_book_and_learn_what_an_old_owner_exports():
    old = SubscriptionSets("b", TABLE)
    old.add_many([build_subscription("f", "q", IN, SPACE)])
    new = SubscriptionSets("b", TABLE)
    new.carry_removals(old)
    assert new.book is old.book and all(s.book is new.book for s in new.sets)
    ids, queues, lows, highs = old.sets[0].export(0, 250, 500)
    other = SubscriptionSets("b", TABLE)
    other.book.learn_all(old.book.predicates(["f"]))  # as a hand-off's export carries them
    other.add_rows(ids, queues, lows, highs, dims={0})
    assert _matched(other, 0, [300, 0, 0, 0]) == ["f"] and _matched(other, 0, [305, 0, 0, 0]) == []
