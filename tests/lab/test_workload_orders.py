"""The orders workload (docs/workloads.md, "`orders`: typed attributes with skew"): every filter
parses in its typed space, every order is a valid message, the skew, the mix of operators and
the selectivity are the documented ones, and a seed gives one workload."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from bluedove.core.attributes import BOOLEAN, NUMBER, STRING
from bluedove.core.model import parse_message
from bluedove.core.space import Space
from bluedove.lab.workloads.orders import CLOSED, MAX_BOXES_PER_SUB, PARTITION, REGIONS, STATUSES, get, orders_space
from bluedove.lab.workloads.typed import TypedWorkload, matching


@pytest.fixture(scope="module")
def w() -> TypedWorkload:
    return get(seed=1, n_subs=4000, n_queues=400)


@pytest.fixture(scope="module")
def msgs(w) -> list[dict[str, Any]]:
    return w.messages(4000, seed=2)


def test_the_space_is_the_documented_one():
    space = orders_space()
    assert space.typed and space.names == PARTITION == ("region", "status", "amount")
    assert [(a.name, a.type, a.optional) for a in space.attributes] == [
        ("status", STRING, False), ("region", STRING, False), ("sku", STRING, False), ("amount", NUMBER, False),
        ("coupon", STRING, True), ("express", BOOLEAN, False)]
    assert (space.by_name["amount"].min, space.by_name["amount"].max) == (0.0, 10_000.0)
    assert Space.from_json(space.to_json()) == space  # the typed form, as a space file would give it


def test_every_filter_parses_within_the_box_limit(w):
    assert w.name == "orders(n_subs=4000,n_queues=400)" and w.n_subs == 4000
    boxes = Counter(len(f.boxes) for f in w.filters())
    assert set(boxes) == {1, 2, MAX_BOXES_PER_SUB}  # `in` of 2 or 3 statuses, any_of's 2 alternatives


def test_every_order_is_a_valid_message(w, msgs):
    for m in msgs:
        parse_message({"attributes": m}, w.space)
    assert all(type(m["amount"]) is float and type(m["express"]) is bool for m in msgs)  # plain JSON values


def _share(values: list[Any], of: tuple[Any, ...]) -> float:
    return sum(v in of for v in values) / len(values)


def test_the_skew_is_the_documented_one(msgs):
    regions = [m["region"] for m in msgs]
    assert [r for r, _ in Counter(regions).most_common(2)] == list(REGIONS[:2])
    assert 0.50 <= _share(regions, REGIONS[:2]) <= 0.60  # Zipf 1.1 over 10: 54.7 %
    assert 0.55 <= _share([m["status"] for m in msgs], ("delivered", "shipped")) <= 0.65  # 60 %
    categories = Counter(m["sku"][:2] for m in msgs)
    assert sum(n for _, n in categories.most_common(3)) / len(msgs) >= 0.52  # Zipf 1 over 12: 59 %
    assert 0.10 <= sum("coupon" in m for m in msgs) / len(msgs) <= 0.20  # 15 %
    assert 0.15 <= sum(m["express"] for m in msgs) / len(msgs) <= 0.25  # 20 %
    amounts = np.array([m["amount"] for m in msgs])
    assert 50 <= np.median(amounts) <= 75 and np.mean(amounts >= 1000) < 0.02  # median 60, a long tail


def test_same_seed_same_workload_another_seed_another():
    a, b = get(seed=3, n_subs=500, n_queues=50), get(seed=3, n_subs=500, n_queues=50)
    assert a.predicates == b.predicates and np.array_equal(a.queue_of, b.queue_of)
    assert a.messages(200, seed=4) == b.messages(200, seed=4)
    assert get(seed=4, n_subs=500, n_queues=50).predicates != a.predicates
    assert a.messages(200, seed=4) != a.messages(200, seed=5)


def _operators(pred: dict[str, Any]) -> set[str]:
    """The operators a predicates object uses: `eq` for a bare value, `range` for [low, high]."""
    ops = set()
    for name, cond in pred.items():
        if name == "any_of":
            ops |= {"any_of"}.union(*(_operators(member) for member in cond))
        else:
            ops |= {"range"} if isinstance(cond, list) else set(cond) if isinstance(cond, dict) else {"eq"}
    return ops


# the share of subscriptions using each operator, from the kinds' shares (docs/workloads.md)
OPERATOR_MIX = {"eq": 0.96, "in": 0.20, "prefix": 0.22, "range": 0.12, "gte": 0.13, "exists": 0.13,
                "not_in": 0.07, "any_of": 0.05}


def test_the_mix_of_operators_is_the_documented_one(w):
    used = Counter(op for pred in w.predicates for op in _operators(pred))
    assert set(used) == set(OPERATOR_MIX)
    assert {op: round(used[op] / w.n_subs, 2) for op in OPERATOR_MIX} == pytest.approx(OPERATOR_MIX, abs=0.03)
    not_in = [p["status"]["not_in"] for p in w.predicates if "not_in" in _operators(p)]
    assert not_in and all(v == list(CLOSED) for v in not_in)
    assert all(p["status"] in STATUSES for p in w.predicates if isinstance(p.get("status"), str))


def test_a_queue_s_subscriptions_share_its_home_region(w):
    sizes = np.bincount(w.queue_of, minlength=w.n_queues)
    assert w.n_queues == 400 and sizes.min() == sizes.max() == 10
    for q in range(0, w.n_queues, 7):
        regions = {w.predicates[j].get("region") for j in np.nonzero(w.queue_of == q)[0]} - {None}
        assert len(regions) <= 1


def test_selectivity_is_the_documented_band():
    """Matches per message, by the core's exact check: 2-5 % of subscriptions (3.3 % measured); the
    boxes hold every match and about 3.3 times as many subscriptions (the exact check rejects ~70 %)."""
    w = get(seed=1, n_subs=1000, n_queues=100)
    filters, msgs = w.filters(), w.messages(300, seed=11)
    counts = np.array([len(r) for r in matching(filters, msgs)])
    assert 0.02 <= counts.mean() / w.n_subs <= 0.05
    assert np.mean(counts == 0) < 0.05  # a rare order (a small region, a rare status) may match nothing
    in_boxes = 0
    for m in msgs[:100]:
        point = parse_message({"attributes": m}, w.space)[1]
        held = {j for j, f in enumerate(filters) if any(all(lo[i] <= point[i] < hi[i] for i in range(len(point)))
                                                        for lo, hi in f.boxes)}
        assert {j for j, f in enumerate(filters) if f.matches(m)} <= held
        in_boxes += len(held)
    assert 0.2 <= counts[:100].sum() / in_boxes <= 0.45


def test_another_partition_cuts_other_attributes():
    w = get(seed=2, n_subs=300, n_queues=30, partition=("sku", "region"))
    assert w.name == "orders(n_subs=300,n_queues=30,partition=sku+region)" and w.space.names == ("sku", "region")
    assert max(len(f.boxes) for f in w.filters()) <= MAX_BOXES_PER_SUB
    assert get().name == "orders"


@pytest.mark.parametrize("bad, field", [
    ({"n_queues": 0}, "n_queues"), ({"n_subs": 5, "n_queues": 10}, "n_subs"), ({"partition": ()}, "partition"),
    ({"partition": ("colour",)}, "partition"), ({"partition": ("region", "region")}, "partition")])
def test_bad_parameters_are_refused_naming_them(bad, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        get(**bad)
