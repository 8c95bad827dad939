"""A subscription's new version in a matcher's sets (bluedove/matcher/sets.py `replace_many`,
bluedove/matcher/sets_owner.py `replace_direct` and the log's `replace`): the old rows out and
the new ones in, in one step, wherever they fall; a filter's book entry with them; the newest
version wins whichever way each came (a dispatcher's call, the catalogue tail, a reload)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bluedove.core.model import build_subscription
from bluedove.core.partition.segments import equal_partition
from bluedove.core.space import default_space
from bluedove.matcher.errors import BadRequest
from bluedove.matcher.sets import SubscriptionSets
from bluedove.matcher.sets_owner import SetsOwner, applier
from bluedove.runtime.settings import MatcherSettings
from bluedove.store.catalogue_tail import change
from bluedove.store.keys import pos_of, pos_with, shard_of
from bluedove.v1 import matcher_pb2 as pb

SPACE = default_space()  # x0..x3 in [0, 1000)
TABLE = equal_partition(SPACE, {"a": "", "b": "", "c": "", "d": ""})  # b owns [250, 500), c [500, 750)
IN = {"x0": {"in": [300, 310]}}  # two boxes, in b's segment of x0
NOT_IN = {"x0": [250, 400], "x1": {"not_in": [5]}}  # one box, checked after the index


def sub(sub_id: str, predicates: dict, queue: str = "q"):
    return build_subscription(sub_id, queue, predicates, SPACE)


def rows(sets: SubscriptionSets) -> set[str]:
    return {key for s in sets.sets for key in s.ids()}


def matched(sets: SubscriptionSets, dim: int, point: list[float]) -> list[str]:
    m = sets.sets[dim].matches(np.array([point], dtype=np.float64))
    return sorted(sid for _p, _q, sids in m.deliveries() for sid in sids)


def filed_in(sets: SubscriptionSets, key: str) -> list[int]:
    return [i for i, s in enumerate(sets.sets) if key in s]


def test_a_replace_moves_the_rows_between_owners_and_leaves_no_trace_of_the_old():
    old, new = sub("s", {"x0": [300, 400]}), sub("s", {"x0": [600, 700]})
    b, c = SubscriptionSets("b", TABLE), SubscriptionSets("c", TABLE)
    for sets in (b, c):
        sets.add_many([old])
    assert filed_in(b, "s") == [0, 1, 2, 3] and filed_in(c, "s") == [1, 2, 3]
    for sets in (b, c):
        assert sets.replace_many([(new, "2-0")]) > 0
    assert filed_in(b, "s") == [1, 2, 3] and filed_in(c, "s") == [0, 1, 2, 3]
    assert b.counts() == [0, 1, 1, 1] and c.counts() == [1, 1, 1, 1]
    for sets in (b, c):  # every set of either owner answers by the new version alone
        assert matched(sets, 1, [350, 300, 0, 0]) == [] and matched(sets, 1, [650, 300, 0, 0]) == ["s"]
    assert matched(c, 0, [650, 0, 0, 0]) == ["s"]


def test_a_replace_changes_a_filter_s_boxes_and_its_book_with_them():
    sets = SubscriptionSets("b", TABLE)
    sets.add_many([sub("s", {"x0": [250, 500]})])
    sets.replace_many([(sub("s", IN), "2-0")])
    assert {"s#0", "s#1"} <= rows(sets) and "s" not in rows(sets) and len(sets.book) == 1
    assert matched(sets, 0, [300, 0, 0, 0]) == ["s"] and matched(sets, 0, [305, 0, 0, 0]) == []
    sets.replace_many([(sub("s", NOT_IN), "3-0")])  # one checked box: the second box is gone
    assert "s#1" not in rows(sets) and "s#0" in rows(sets)
    assert matched(sets, 0, [305, 6, 0, 0]) == ["s"] and matched(sets, 0, [305, 5, 0, 0]) == []
    sets.replace_many([(sub("s", {"x0": [450, 460]}), "4-0")])  # back to a plain box
    assert not any("#" in k for k in rows(sets)) and len(sets.book) == 0
    assert matched(sets, 0, [455, 5, 0, 0]) == ["s"] and matched(sets, 0, [305, 6, 0, 0]) == []


def test_the_counts_per_queue_follow_the_rows():
    sets = SubscriptionSets("b", TABLE)
    sets.add_many([sub("s", {"x0": [300, 400]}), sub("t", {"x0": [300, 400]})])
    assert sets.sets[0].directory.shared == 1  # queue q holds two subscriptions in dim 0's set
    sets.replace_many([(sub("s", {"x0": [600, 700]}), "2-0")])
    assert sets.sets[0].directory.shared == 0 and sets.sets[1].directory.shared == 1
    sets.replace_many([(sub("s", {"x0": [350, 360]}), "3-0")])
    assert sets.sets[0].directory.shared == 1 and sets.counts() == [2, 2, 2, 2]
    got = sets.sets[0].matches(np.array([[355.0, 0, 0, 0]]))  # one delivery listing both
    assert [(q, sorted(sids)) for _p, q, sids in got.deliveries()] == [("q", ["s", "t"])]


def test_the_newest_version_wins_whichever_way_each_came():
    sets = SubscriptionSets("b", TABLE)
    v1, v2, v3 = sub("s", {"x0": [300, 310]}), sub("s", {"x0": [320, 330]}), sub("s", IN)
    log = [{"op": "add", "id": "s", "sub": json.dumps(v1.to_json())},
           change("2-0", {"op": "replace", "id": "s", "sub": json.dumps(v2.to_json())}),
           change("3-0", {"op": "replace", "id": "s", "sub": json.dumps(v3.to_json())})]
    sets.replace_many([(v3, "3-0")], direct=True)  # the dispatcher's call, ahead of the tail
    assert sets.replace_many([(v2, "2-0")], direct=True) == 0  # a late call of an older version
    for f in log:  # the tail reads the log in order, one job each: none undoes v3
        applier(sets, [f], TABLE)()
        assert matched(sets, 0, [300, 0, 0, 0]) == ["s"] and matched(sets, 0, [325, 0, 0, 0]) == []
    assert sets._ahead == {}  # the tail caught up with the call
    v4 = sub("s", {"x0": [400, 410]})
    applier(sets, [change("4-0", {"op": "replace", "id": "s", "sub": json.dumps(v4.to_json())})], TABLE)()
    assert matched(sets, 0, [405, 0, 0, 0]) == ["s"] and matched(sets, 0, [300, 0, 0, 0]) == []
    late = pb.Subscription(id="s", queue="q", lows=v1.lows, highs=v1.highs)  # the first subscribe's call, late
    assert sets.add_direct_batch([late]) == 0 and matched(sets, 0, [305, 0, 0, 0]) == []


def test_a_removed_subscription_is_not_brought_back_by_a_replace():
    sets = SubscriptionSets("b", TABLE)
    sets.add_many([sub("s", {"x0": [300, 310]})])
    sets.replace_many([(sub("s", IN), "2-0")], direct=True)
    sets.remove("s")
    assert sets._ahead == {} and rows(sets) == set() and len(sets.book) == 0
    assert sets.replace_many([(sub("s", {"x0": [300, 400]}), "3-0")]) == 0 and rows(sets) == set()


def test_one_job_applies_a_run_of_adds_replaces_and_removes_in_order():
    sets = SubscriptionSets("b", TABLE)
    text = {k: json.dumps(sub(k[0], p).to_json()) for k, p in
            {"s1": {"x0": [300, 310]}, "s2": {"x0": [320, 330]}, "t1": {"x0": [260, 270]}, "t2": IN}.items()}
    applier(sets, [{"op": "add", "id": "s", "sub": text["s1"]},
                   change("2-0", {"op": "replace", "id": "s", "sub": text["s2"]}),
                   {"op": "remove", "id": "s"},
                   {"op": "add", "id": "t", "sub": text["t1"]},
                   change("5-0", {"op": "replace", "id": "t", "sub": text["t2"]})], TABLE)()
    assert rows(sets) == {"t#0", "t#1"} and matched(sets, 0, [310, 0, 0, 0]) == ["t"]


# -- the owner: a dispatcher's call against the log position, a reload ---------------------------
SHARD = shard_of("q")


class Catalogue:
    """The store's catalogue reads over queue q's shard, in memory: a hash and a log."""

    def __init__(self) -> None:
        self.subs: dict[str, str] = {}
        self.log: list[tuple[str, dict]] = []
        self.snapshot: tuple[str, list[str]] | None = None

    def write(self, op: str, s) -> str:
        at = f"{len(self.log) + 1}-0"
        text = json.dumps(s.to_json())
        self.subs[s.id] = text
        self.log.append((at, {"op": op, "id": s.id, "sub": text}))
        return at

    async def catalogue_position(self, space: str = "default") -> str:
        return pos_with("0-0", SHARD, self.log[-1][0] if self.log else "0-0")

    async def catalogue_snapshot_raw(self, space: str = "default") -> tuple[str, list[str]]:
        if self.snapshot is not None:  # one taken earlier, as a scan racing writes may see it
            return self.snapshot
        return await self.catalogue_position(), list(self.subs.values())

    async def catalogue_changes(self, after: str, space: str = "default") -> tuple[str, list[dict]]:
        start = int(pos_of(after, SHARD).split("-")[0])
        new = self.log[start:]
        return (pos_with(after, SHARD, new[-1][0]), [change(a, f) for a, f in new]) if new else (after, [])


async def run_now(fn, *args):
    return fn(*args)


def message(s, log_id: str) -> pb.Subscription:
    return pb.Subscription(id=s.id, queue=s.queue, lows=s.lows, highs=s.highs, log_id=log_id,
                           predicates=json.dumps(s.predicates) if s.filter is not None else "")


async def test_a_call_for_a_version_the_sets_have_read_already_is_skipped():
    store = Catalogue()
    store.write("add", sub("s", {"x0": [300, 310]}))
    e2 = store.write("replace", sub("s", {"x0": [320, 330]}))
    o = SetsOwner(MatcherSettings(id="b"), store, run_now)
    await o.load_catalogue(TABLE)  # current to 2-0: holds the second version
    assert await o.replace_direct([message(sub("s", {"x0": [400, 410]}), "1-0")]) == 0  # older than read
    assert await o.replace_direct([message(sub("s", {"x0": [400, 410]}), e2)]) == 0
    assert matched(o.sets, 0, [325, 0, 0, 0]) == ["s"]
    v3 = sub("s", IN)
    e3 = store.write("replace", v3)
    assert await o.replace_direct([message(v3, e3)]) > 0 and matched(o.sets, 0, [300, 0, 0, 0]) == ["s"]
    with pytest.raises(BadRequest):
        await o.replace_direct([message(v3, "")])


async def test_a_reload_from_the_catalogue_is_its_truth_and_leaves_the_serving_book_alone():
    store = Catalogue()
    store.write("add", sub("s", {"x0": [300, 310]}))
    checks: list[dict] = []

    async def run_checked(fn, *args):  # what the sets still serving check, after every index job
        out = fn(*args)
        if serving is not None:
            checks.append(serving.book.predicates(["s"]))
        return out

    serving = None
    o = SetsOwner(MatcherSettings(id="b"), store, run_checked)
    await o.load_catalogue(TABLE)
    v2, v3 = sub("s", {"x0": {"in": [320, 330]}}), sub("s", IN)
    store.write("replace", v2)
    at2 = await store.catalogue_position()
    e3 = store.write("replace", v3)
    await o.replace_direct([message(v3, e3)])
    serving = o.sets
    store.snapshot = (at2, [json.dumps(v2.to_json())])  # scanned between the two replaces
    await o.load_catalogue(TABLE)
    assert checks and all(c == {"s": IN} for c in checks)  # v2 met in the snapshot never reached them
    assert o.sets is not serving and o.sets.book is not serving.book
    assert matched(o.sets, 0, [300, 0, 0, 0]) == ["s"] and matched(o.sets, 0, [320, 0, 0, 0]) == []
