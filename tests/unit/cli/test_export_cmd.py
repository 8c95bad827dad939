"""`bluedove export catalogue`'s per-attribute conditions: whether a condition names each
attribute, and the coordinate intervals it admits there, partition attribute or not."""

from __future__ import annotations

from bluedove.cli.export_cmd import attribute_conditions, attribute_spaces
from bluedove.core.attributes import STRING_TOP, encode, prefix_interval
from bluedove.core.space import Space
from bluedove.lab.workloads.orders import orders_space

SPACE = orders_space()  # status, region, sku, amount [0, 10000), coupon (optional), express


def conditions(predicates):
    named, lows, highs = attribute_conditions(predicates, SPACE, attribute_spaces(SPACE))
    return {a.name: (n, list(zip(lo, hi))) for a, n, lo, hi in zip(SPACE.schema, named, lows, highs)}


def test_each_attribute_gets_the_intervals_its_conditions_admit():
    got = conditions({"region": "eu-west-1", "status": {"in": ["paid", "packed"]}, "sku": {"prefix": "EL-"}})
    eu = encode("eu-west-1")
    assert got["region"] == (True, [(eu, eu + 1)])
    paid, packed = encode("paid"), encode("packed")
    assert got["status"] == (True, sorted([(paid, paid + 1), (packed, packed + 1)]))
    assert got["sku"] == (True, [prefix_interval("EL-")])  # not a partition attribute: reported all the same
    assert got["amount"] == (False, [(0.0, 10_000.0)]) and got["express"] == (False, [(0.0, 2.0)])


def test_any_of_admits_the_union_and_not_in_the_whole_range():
    got = conditions({"region": "us-east-1", "any_of": [{"amount": {"gte": 500}}, {"amount": [0, 10]}]})
    assert got["amount"] == (True, [(0.0, 10.0), (500.0, 10_000.0)])
    got = conditions({"region": "us-east-1", "any_of": [{"amount": {"gte": 500}}, {"coupon": {"exists": True}}]})
    assert got["amount"] == (True, [(0.0, 10_000.0)]) and got["coupon"] == (True, [(0.0, STRING_TOP)])
    assert conditions({"status": {"not_in": ["paid"]}})["status"] == (True, [(0.0, STRING_TOP)])


def test_a_space_of_numbers_clips_its_ranges():
    space = Space.from_json({"dimensions": [{"name": "x", "min": 0, "max": 10}, {"name": "y", "min": 0, "max": 5}]})
    named, lows, highs = attribute_conditions({"x": [-3, 4]}, space, attribute_spaces(space))
    assert named == [True, False] and lows == [[0.0], [0.0]] and highs == [[4.0], [5.0]]
