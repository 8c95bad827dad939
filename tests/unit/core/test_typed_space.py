"""Typed spaces, messages and subscriptions in the core (docs/design.md, "Typed attributes"):
the space's two forms, a message's attributes checked by type, and which filters are one box."""

from __future__ import annotations

import json

import pytest

from bluedove.core.attributes import STRING_TOP, encode
from bluedove.core.errors import ApiError
from bluedove.core.model import build_subscription, parse_message
from bluedove.core.space import Space, SpaceError, default_space, load_space

ORDERS = {"attributes": [{"name": "status", "type": "string"}, {"name": "amount", "type": "number", "min": 0,
                                                                 "max": 10000},
                         {"name": "coupon", "type": "string", "optional": True}, {"name": "vip", "type": "boolean"}],
          "partition": ["status", "amount"]}


def test_a_typed_space_cuts_its_partition_attributes_and_round_trips():
    space = Space.from_json(ORDERS)
    assert space.typed and space.names == ("status", "amount")
    assert [(d.min, d.max) for d in space.dimensions] == [(0.0, STRING_TOP), (0.0, 10000.0)]
    assert Space.from_json(space.to_json()) == space
    assert Space.from_json(space.api_json()) == space  # GET /v1/space's form loads back


def test_the_numeric_forms_are_one_space():
    old = {"dimensions": [{"name": "x", "min": 0, "max": 10}, {"name": "y", "min": -1, "max": 1}]}
    new = {"attributes": [{"name": "x", "min": 0, "max": 10}, {"name": "y", "type": "number", "min": -1, "max": 1}]}
    assert Space.from_json(old) == Space.from_json(new) and not Space.from_json(new).typed
    assert Space.from_json(old).to_json() == old  # stored tables and seeds keep their form
    assert default_space().api_json()["partition"] == ["x0", "x1", "x2", "x3"]


@pytest.mark.parametrize("change, message", [
    ({"partition": ["nope"]}, "partition[0]"),
    ({"partition": None}, "partition: required"),
    ({"partition": ["amount", "amount"]}, "named twice"),
    ({"attributes": [{"name": "s", "type": "text"}]}, "attributes[0].type"),
    ({"attributes": [{"name": "s", "type": "string", "min": 0}]}, "attributes[0].min"),
    ({"attributes": [{"name": "n", "min": 5, "max": 5}]}, "attributes[0]: min"),
    ({"attributes": [{"name": "n", "min": 0, "max": 1, "optional": "yes"}]}, "attributes[0].optional"),
    ({"dimensions": [{"name": "status", "min": 0, "max": 1}]}, "dimensions: not those"),
    ({"colour": "red"}, "colour: unknown key"),
])
def test_a_wrong_space_is_refused_naming_the_key(change, message):
    data = {**ORDERS, **change}
    if data.get("partition") is None and "partition" in change:
        del data["partition"]
    with pytest.raises(SpaceError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Space.from_json(data)


def test_a_typed_space_file_loads_as_yaml_or_json_and_its_processes_file_round_trips(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("attributes:\n- {name: status, type: string}\n- {name: amount, min: 0, max: 10000}\n"
                    "- {name: coupon, type: string, optional: true}\n- {name: vip, type: boolean}\n"
                    "partition: [status, amount]\n")
    assert load_space(path) == Space.from_json(ORDERS)
    path.write_text(json.dumps(ORDERS))
    assert load_space(path) == Space.from_json(ORDERS)
    path.write_text(json.dumps(Space.from_json(ORDERS).to_json()))  # what matchers and dispatchers are given
    assert load_space(path) == Space.from_json(ORDERS)


ORDER = {"status": "shipped", "amount": 129.9, "vip": False}


@pytest.mark.parametrize("attrs, field", [
    ({**ORDER, "status": 5}, "attributes.status"),
    ({**ORDER, "status": "é" * 129}, "attributes.status"),  # 258 bytes
    ({**ORDER, "status": "a\ud800"}, "attributes.status"),
    ({**ORDER, "amount": 10000}, "attributes.amount"),
    ({**ORDER, "vip": 1}, "attributes.vip"),
    ({**ORDER, "coupon": None}, "attributes.coupon"),
    ({k: v for k, v in ORDER.items() if k != "vip"}, "attributes.vip"),
    ({**ORDER, "colour": "red"}, "attributes.colour"),
])
def test_a_message_s_attributes_are_checked_by_type_naming_the_field(attrs, field):
    with pytest.raises(ApiError) as exc:
        parse_message({"attributes": attrs}, Space.from_json(ORDERS))
    assert (exc.value.status, exc.value.code, exc.value.field) == (422, "invalid_message", field)


def test_a_message_s_point_is_its_partition_attributes_coordinates():
    space = Space.from_json(ORDERS)
    _, point, _ = parse_message({"attributes": {**ORDER, "coupon": "X"}}, space)
    assert point == (encode("shipped"), 129.9)
    assert parse_message({"attributes": {**ORDER, "status": ""}}, space)[1] == (0.0, 129.9)


def test_exact_filters_of_one_box_are_plain_subscriptions_and_others_carry_their_filter():
    space = default_space()
    one = build_subscription("s", "q", {"x0": {"gt": 1, "lte": 2}, "x1": 7}, space)
    assert one.filter is None and len(one.boxes) == 1
    assert one.predicates_as_ranges(space) == {"x0": [1.0000000000000002, 2.0000000000000004],
                                               "x1": [7.0, 7.000000000000001]}
    assert one.to_json()["predicates"] == {"x0": {"gt": 1, "lte": 2}, "x1": 7}  # shown as given
    two = build_subscription("s", "q", {"x0": {"in": [1, 5]}}, space)
    assert two.filter is not None and len(two.boxes) == 2 and (two.lows[0], two.highs[0]) == (1.0, 5.000000000000001)
    with pytest.raises(ValueError):
        two.predicates_as_ranges(space)
    none = build_subscription("s", "q", {"x0": {"in": [-5, 2000]}}, space)
    assert none.void and none.boxes == () and none.predicates_as_ranges(space) == {"x0": [0.0, 0.0]}
    legacy = build_subscription("s", "q", {"x0": [-5, 2000]}, space)
    assert legacy.filter is None and legacy.to_json()["predicates"] == {"x0": [0.0, 1000.0]}  # clipped, as before
