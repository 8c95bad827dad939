"""The command line's --where and --attr syntax (bluedove/client/where.py): every operator,
values read as JSON or as written, several conditions on one name merged, bad input refused."""

from __future__ import annotations

import pytest

from bluedove.client.where import WhereError, attributes, scalar, where


@pytest.mark.parametrize("text, value", [
    ("Paris", "Paris"), ('"02134"', "02134"), ("5", 5), ("-2.5", -2.5), ("true", True), ("false", False),
    ("null", "null"), ("NaN", "NaN"), ("1e400", "1e400"), ("[1]", "[1]"), ("", ""), ("a b", "a b"),
])
def test_a_value_is_json_when_it_is_a_number_a_boolean_or_a_quoted_string(text, value):
    assert scalar(text) == value and type(scalar(text)) is type(value)


@pytest.mark.parametrize("conds, predicates", [
    (["city=Paris"], {"city": "Paris"}),
    (["amount=5"], {"amount": 5}),
    (["express=true"], {"express": True}),
    (['zip="02134"'], {"zip": "02134"}),
    (["amount=0:100"], {"amount": [0.0, 100.0]}),
    (["lon=-73.9:-73.8"], {"lon": [-73.9, -73.8]}),
    (["time=10:3x"], {"time": "10:3x"}),
    (['time="10:30"'], {"time": "10:30"}),
    (["city=Paris|Lyon|5"], {"city": {"in": ["Paris", "Lyon", 5]}}),
    (["city!=Paris"], {"city": {"not_in": ["Paris"]}}),
    (["city!=Paris|Lyon"], {"city": {"not_in": ["Paris", "Lyon"]}}),
    (["sku^=AB"], {"sku": {"prefix": "AB"}}), (["sku^=12"], {"sku": {"prefix": "12"}}),
    (["sku$=-42"], {"sku": {"suffix": "-42"}}), (["sku^="], {"sku": {"prefix": ""}}),
    (["coupon?"], {"coupon": {"exists": True}}), (["coupon!?"], {"coupon": {"exists": False}}),
    (["amount>=10", "amount<100"], {"amount": {"gte": 10, "lt": 100}}),
    (["amount>1", "amount<=2"], {"amount": {"gt": 1, "lte": 2}}),
    (["region>=us"], {"region": {"gte": "us"}}),
    (["sku^=EL-", "sku!=EL-0042"], {"sku": {"prefix": "EL-", "not_in": ["EL-0042"]}}),
    (["amount=0:100", "amount!=50"], {"amount": {"gte": 0.0, "lt": 100.0, "not_in": [50]}}),
    (["a=1", "b=x"], {"a": 1, "b": "x"}),
])
def test_conditions_become_the_filter_language(conds, predicates):
    assert where(conds) == predicates


@pytest.mark.parametrize("conds, words", [
    (["=5"], "expected NAME=VALUE"), (["city"], "expected NAME=VALUE"), (["9a=1"], "expected NAME=VALUE"),
    (["city?x"], "takes no value"), (["amount>=1", "amount>=2"], "has a condition 'gte' already"),
    (["amount=0:1", "amount=2:3"], "already"),
])
def test_bad_conditions_are_refused(conds, words):
    with pytest.raises(WhereError, match=words):
        where(conds)


def test_attributes_are_name_value_pairs():
    assert attributes(["city=Paris", "amount=12.5", "express=true", 'zip="02134"', "note=a=b"]) == \
        {"city": "Paris", "amount": 12.5, "express": True, "zip": "02134", "note": "a=b"}
    for bad, words in ((["city"], "expected NAME=VALUE"), (["=1"], "expected"), (["a=1", "a=2"], "twice")):
        with pytest.raises(WhereError, match=words):
            attributes(bad)
