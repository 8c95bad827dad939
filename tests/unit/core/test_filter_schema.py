"""bluedove/core/filter_schema.py: the OpenAPI's JSON Schema of `predicates` accepts every filter
the server accepts (random typed spaces and filters), and refuses the shapes a schema can tell
are wrong (an unknown attribute or operator, a range on a string, nested any_of, too many values)."""

from __future__ import annotations

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.core.attributes import BOOLEAN, NUMBER, STRING, Attribute
from bluedove.core.errors import ApiError
from bluedove.core.filter_schema import filter_schema
from bluedove.core.filters import parse_filter
from bluedove.core.space import Space, default_space
from tests.unit.core.test_filters import filters, spaces

ORDERS = Space.of((Attribute("region", STRING), Attribute("amount", NUMBER, False, 0.0, 1e6),
                   Attribute("express", BOOLEAN, True)), ("region", "amount"))


def valid(space: Space, predicates) -> bool:
    return jsonschema.Draft202012Validator(filter_schema(space)).is_valid(predicates)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_filter_the_server_accepts_fits_the_schema(data):
    space = data.draw(spaces())
    predicates = data.draw(filters(space))
    try:
        parse_filter(predicates, space)
    except ApiError:
        return  # the server refuses it (a rule beyond the shape): the schema may go either way
    assert valid(space, predicates), predicates


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(filter_schema(ORDERS))
    jsonschema.Draft202012Validator.check_schema(filter_schema(default_space()))


@pytest.mark.parametrize("predicates", [
    {"city": "Paris"},  # no such attribute
    {"region": {"starts": "eu"}},  # no such operator
    {"region": ["a", "b"]},  # [low, high] is a range of numbers
    {"amount": {"prefix": "1"}},  # prefix is a string's
    {"express": {"in": [True]}},  # a boolean has eq and exists only
    {"amount": {"in": list(range(101))}},  # at most 100 values
    {"any_of": [{"any_of": [{"region": "x"}]}]},  # any_of does not nest
    {"any_of": []},
    {"amount": [1]},
    {"region": {}},
])
def test_shapes_the_server_refuses_the_schema_refuses_too(predicates):
    with pytest.raises(ApiError):
        parse_filter(predicates, ORDERS)
    assert not valid(ORDERS, predicates)


def test_a_typical_filter_fits():
    assert valid(ORDERS, {"region": {"in": ["eu-west-1", "us-east-1"]}, "amount": [0, 100],
                          "any_of": [{"express": True}, {"region": {"prefix": "eu"}}]})
