"""bluedove/core/model.py: subscription, message and batch validation, and match semantics.

Every rejected input must carry docs/api.md's status, code and field; a message is exactly
`low <= value < high` on every constrained dimension.
"""

from __future__ import annotations

import json
import math

import pytest

from bluedove.core.errors import ApiError
from bluedove.core.model import (
    MAX_BATCH,
    MAX_PAYLOAD_BYTES,
    Subscription,
    build_subscription,
    parse_batch,
    parse_message,
    parse_subscription_request,
)
from bluedove.core.space import Dimension, Space, default_space

SPACE = default_space()  # x0..x3 in [0, 1000)


def sub(predicates, space: Space = SPACE) -> Subscription:
    return build_subscription("s1", "q1", predicates, space)


def msg(**overrides) -> dict:
    attrs = {"x0": 1.0, "x1": 2, "x2": 3.5, "x3": 999}
    attrs.update(overrides)
    return {"attributes": attrs}


def assert_api_error(exc: pytest.ExceptionInfo, status: int, code: str, field: str | None) -> None:
    err = exc.value
    assert (err.status, err.code, err.field) == (status, code, field)
    assert err.message  # a human sentence, never empty
    body = err.body()["error"]
    assert body["code"] == code
    if field is None:
        assert "field" not in body
    else:
        assert body["field"] == field


# == subscriptions ===========================================================================


def test_a_subscription_keeps_its_id_queue_and_predicates():
    s = sub({"x0": [100, 350], "x2": [0, 25]})
    assert (s.id, s.queue) == ("s1", "q1")
    assert s.predicates == {"x0": (100.0, 350.0), "x2": (0.0, 25.0)}
    assert s.lows == (100.0, 0.0, 0.0, 0.0)
    assert s.highs == (350.0, 1000.0, 25.0, 1000.0)
    assert not s.void


def test_left_out_dimensions_are_wildcards_over_the_whole_space():
    s = sub({})
    assert s.predicates == {}
    assert s.lows == (0.0,) * 4 and s.highs == (1000.0,) * 4
    assert s.matches((0, 0, 0, 0))
    assert s.matches((999.999, 500, 0.5, 999))


def test_wildcards_take_each_dimensions_own_range():
    space = Space((Dimension("a", -5.0, 5.0), Dimension("b", 100.0, 200.0)))
    s = sub({"b": [150, 160]}, space)
    assert s.lows == (-5.0, 150.0) and s.highs == (5.0, 160.0)


@pytest.mark.parametrize("predicates, name, clipped", [
    ({"x0": [-50, 20]}, "x0", (0.0, 20.0)),
    ({"x1": [990, 5000]}, "x1", (990.0, 1000.0)),
    ({"x2": [-1e300, 1e300]}, "x2", (0.0, 1000.0)),
    ({"x3": [0, 1000]}, "x3", (0.0, 1000.0)),
])
def test_bounds_outside_the_space_are_clipped_not_rejected(predicates, name, clipped):
    s = sub(predicates)
    assert s.predicates[name] == clipped
    i = SPACE.index(name)
    assert (s.lows[i], s.highs[i]) == clipped
    assert not s.void


@pytest.mark.parametrize("predicates", [
    {"x0": [1000, 2000]},  # starts at the space's max, which no value reaches
    {"x0": [2000, 3000]},
    {"x1": [-20, -10]},
    {"x1": [-20, 0]},  # ends at min: [.., 0) holds no value of [0, 1000)
    {"x0": [10, 20], "x3": [1500, 1600]},  # one empty dimension is enough
])
def test_a_range_wholly_outside_the_space_leaves_a_void_subscription(predicates):
    s = sub(predicates)
    assert s.void
    assert not s.matches((15, 500, 500, 500))
    assert not s.matches((0, 0, 0, 0))


def test_bounds_become_floats():
    s = sub({"x0": [1, 2]})
    assert all(isinstance(v, float) for v in s.predicates["x0"] + s.lows + s.highs)


@pytest.mark.parametrize("point, expected", [
    ((100, 0, 0, 0), True),  # exactly low: inside
    ((349.999, 0, 0, 0), True),
    ((350, 0, 0, 0), False),  # exactly high: outside
    ((99.999, 0, 0, 0), False),
    ((math.nextafter(350, 0), 0, 0, 0), True),
    ((200, 0, 0, 24.999), True),
    ((200, 0, 0, 25), False),
    ((200, 999.999, 0, 0), True),  # wildcard x1
])
def test_matches_is_low_inclusive_high_exclusive(point, expected):
    s = sub({"x0": [100, 350], "x3": [0, 25]})
    assert s.matches(point) is expected


def test_to_json_and_from_json_round_trip():
    s = sub({"x0": [-5, 10.5], "x2": [7, 9000]})
    data = json.loads(json.dumps(s.to_json()))  # through real JSON
    assert data == {"id": "s1", "queue": "q1", "predicates": {"x0": [0, 10.5], "x2": [7, 1000]}}
    assert Subscription.from_json(data, SPACE) == s


# -- rejected subscriptions --------------------------------------------------------------------


@pytest.mark.parametrize("predicates, field", [
    # not a mapping
    ([["x0", 1, 2]], "predicates"),
    ("x0", "predicates"),
    (None, "predicates"),
    # unknown dimension
    ({"x4": [0, 1]}, "predicates.x4"),
    ({"X0": [0, 1]}, "predicates.X0"),
    ({"x0": [0, 1], "": [0, 1]}, "predicates."),
    # wrong shape (a bare number is a condition of its own: equals)
    ({"x0": [5]}, "predicates.x0"),
    ({"x0": [1, 2, 3]}, "predicates.x0"),
    ({"x0": []}, "predicates.x0"),
    ({"x0": {"low": 1, "high": 2}}, "predicates.x0.low"),
    ({"x0": "1,2"}, "predicates.x0"),
    # bounds that are not finite numbers
    ({"x0": [math.nan, 5]}, "predicates.x0[0]"),
    ({"x0": [0, math.nan]}, "predicates.x0[1]"),
    ({"x0": [-math.inf, 5]}, "predicates.x0[0]"),
    ({"x0": [0, math.inf]}, "predicates.x0[1]"),
    ({"x0": [False, 5]}, "predicates.x0[0]"),
    ({"x0": [0, True]}, "predicates.x0[1]"),
    ({"x0": ["1", 5]}, "predicates.x0[0]"),
    ({"x0": [0, "5"]}, "predicates.x0[1]"),
    ({"x0": [None, 5]}, "predicates.x0[0]"),
    ({"x0": [[0], 5]}, "predicates.x0[0]"),
    # a JSON integer too big for a double is not a usable finite number either
    ({"x0": [0, 10**400]}, "predicates.x0[1]"),
    ({"x0": [-(10**400), 5]}, "predicates.x0[0]"),
    # low >= high (before clipping)
    ({"x0": [5, 5]}, "predicates.x0"),
    ({"x0": [6, 5]}, "predicates.x0"),
    ({"x0": [2000, 1500]}, "predicates.x0"),
    ({"x1": [0, 1], "x3": [10, -10]}, "predicates.x3"),
])
def test_invalid_subscriptions_are_422_naming_the_field(predicates, field):
    with pytest.raises(ApiError) as exc:
        sub(predicates)
    assert_api_error(exc, 422, "invalid_subscription", field)


def test_a_bound_from_a_huge_json_integer_is_rejected_not_crashed():
    # json.loads gives a Python int here; float() of it would overflow.
    predicates = json.loads('{"x0": [0, 1' + "0" * 400 + "]}")
    with pytest.raises(ApiError) as exc:
        sub(predicates)
    assert_api_error(exc, 422, "invalid_subscription", "predicates.x0[1]")


# -- the request body ---------------------------------------------------------------------------


@pytest.mark.parametrize("body, expected", [
    ({"predicates": {}}, (None, {})),
    ({"queue": "q7", "predicates": {"x0": [1, 2]}}, ("q7", {"x0": [1, 2]})),
    ({"queue": None, "predicates": {"x0": [1, 2]}}, (None, {"x0": [1, 2]})),
])
def test_subscription_request_bodies(body, expected):
    assert parse_subscription_request(body) == expected


@pytest.mark.parametrize("body, field", [
    ([], None),
    ("predicates", None),
    ({"queue": "q"}, "predicates"),
    ({"predicates": {}, "id": "mine"}, "id"),
    ({"predicates": {}, "queue": 5}, "queue"),
    ({"predicates": {}, "queue": ["q"]}, "queue"),
])
def test_invalid_subscription_request_bodies(body, field):
    with pytest.raises(ApiError) as exc:
        parse_subscription_request(body)
    assert_api_error(exc, 422, "invalid_subscription", field)


# == messages =====================================================================================


def test_a_message_gives_its_point_in_space_order():
    body = {"attributes": {"x3": 4, "x1": 2.5, "x0": 1, "x2": 3}, "payload": {"any": ["json", 1]}, "id": "m-1"}
    msg_id, point, payload = parse_message(body, SPACE)
    assert msg_id == "m-1"
    assert point == (1.0, 2.5, 3.0, 4.0)
    assert all(isinstance(v, float) for v in point)
    assert payload == {"any": ["json", 1]}


def test_id_and_payload_are_optional():
    assert parse_message(msg(), SPACE) == (None, (1.0, 2.0, 3.5, 999.0), None)


@pytest.mark.parametrize("name, value", [
    ("x0", 0),  # exactly min: accepted
    ("x0", 0.0),
    ("x1", 999.9999),
    ("x2", math.nextafter(1000, 0)),  # the largest double below max
])
def test_values_on_the_edge_of_the_space_are_accepted(name, value):
    _, point, _ = parse_message(msg(**{name: value}), SPACE)
    assert point[SPACE.index(name)] == value


@pytest.mark.parametrize("attributes, field", [
    # missing or unknown dimensions
    ({"x0": 1, "x1": 1, "x2": 1}, "attributes.x3"),
    ({"x1": 1, "x2": 1, "x3": 1}, "attributes.x0"),
    ({}, "attributes.x0"),
    ({"x0": 1, "x1": 1, "x2": 1, "x3": 1, "x4": 1}, "attributes.x4"),
    ({"x0": 1, "x1": 1, "x2": 1, "y": 1}, "attributes.y"),  # unknown is named before missing
    # not finite numbers
    ({"x0": 1, "x1": math.nan, "x2": 1, "x3": 1}, "attributes.x1"),
    ({"x0": 1, "x1": 1, "x2": math.inf, "x3": 1}, "attributes.x2"),
    ({"x0": -math.inf, "x1": 1, "x2": 1, "x3": 1}, "attributes.x0"),
    ({"x0": 1, "x1": 1, "x2": 1, "x3": True}, "attributes.x3"),
    ({"x0": 1, "x1": 1, "x2": 1, "x3": False}, "attributes.x3"),
    ({"x0": "1", "x1": 1, "x2": 1, "x3": 1}, "attributes.x0"),
    ({"x0": None, "x1": 1, "x2": 1, "x3": 1}, "attributes.x0"),
    ({"x0": [1], "x1": 1, "x2": 1, "x3": 1}, "attributes.x0"),
    ({"x0": 10**400, "x1": 1, "x2": 1, "x3": 1}, "attributes.x0"),
    # outside the space
    ({"x0": 1000, "x1": 1, "x2": 1, "x3": 1}, "attributes.x0"),  # exactly max: rejected
    ({"x0": 1, "x1": 1000.0, "x2": 1, "x3": 1}, "attributes.x1"),
    ({"x0": 1, "x1": 1, "x2": -1e-9, "x3": 1}, "attributes.x2"),
    ({"x0": 1, "x1": 1, "x2": 1, "x3": 1e9}, "attributes.x3"),
])
def test_invalid_attributes_are_422_naming_the_dimension(attributes, field):
    with pytest.raises(ApiError) as exc:
        parse_message({"attributes": attributes}, SPACE)
    assert_api_error(exc, 422, "invalid_message", field)


@pytest.mark.parametrize("body, field", [
    ([], None),  # the body itself is at fault: no field
    ("m", None),
    ({}, "attributes"),
    ({"attributes": None}, "attributes"),
    ({"attributes": [1, 2, 3, 4]}, "attributes"),
    ({**msg(), "extra": 1}, "extra"),
    ({**msg(), "subscriptions": []}, "subscriptions"),
])
def test_invalid_message_bodies(body, field):
    with pytest.raises(ApiError) as exc:
        parse_message(body, SPACE)
    assert_api_error(exc, 422, "invalid_message", field)


@pytest.mark.parametrize("msg_id", [
    "a", "0", "m-1", "order:2024.06.01_7~b", "A" * 128, "f47ac10b-58cc-4372-a567-0e02b2c3d479",
])
def test_valid_message_ids(msg_id):
    assert parse_message({**msg(), "id": msg_id}, SPACE)[0] == msg_id


@pytest.mark.parametrize("msg_id", [
    "",
    "A" * 129,  # longer than 128
    "has space",
    "slash/ed",
    "star*",
    "é",
    "abc\n",  # a trailing newline must not slip past the pattern's end anchor
    "\nabc",
    "ab\ncd",
    5,
    1.5,
    ["m1"],
])
def test_invalid_message_ids(msg_id):
    with pytest.raises(ApiError) as exc:
        parse_message({**msg(), "id": msg_id}, SPACE)
    assert_api_error(exc, 422, "invalid_message", "id")


def test_a_null_id_means_no_id():
    assert parse_message({**msg(), "id": None}, SPACE)[0] is None


# -- payload size --------------------------------------------------------------------------------


def string_payload_of(size: int) -> str:
    """A string payload whose compact JSON form is exactly `size` bytes (quotes included)."""
    return "a" * (size - 2)


def test_payload_limit_is_256_kib():
    assert MAX_PAYLOAD_BYTES == 256 * 1024


def test_a_payload_of_exactly_the_limit_is_accepted():
    payload = string_payload_of(MAX_PAYLOAD_BYTES)
    assert parse_message({**msg(), "payload": payload}, SPACE)[2] == payload


def test_a_payload_one_byte_over_the_limit_is_413():
    with pytest.raises(ApiError) as exc:
        parse_message({**msg(), "payload": string_payload_of(MAX_PAYLOAD_BYTES + 1)}, SPACE)
    assert_api_error(exc, 413, "payload_too_large", "payload")


def test_a_structured_payload_over_the_limit_is_413():
    payload = {"rows": [{"k": "v" * 1000} for _ in range(300)]}
    with pytest.raises(ApiError) as exc:
        parse_message({**msg(), "payload": payload}, SPACE)
    assert_api_error(exc, 413, "payload_too_large", "payload")


@pytest.mark.parametrize("char", ["é", "€", "😀"])
def test_payload_size_counts_utf8_bytes_not_escaped_ascii(char):
    # 200,000 bytes of UTF-8 text is under the limit, though its \\u-escaped form is not.
    n = 200_000 // len(char.encode())
    payload = char * n
    assert len(json.dumps(payload, ensure_ascii=False).encode()) <= MAX_PAYLOAD_BYTES
    assert parse_message({**msg(), "payload": payload}, SPACE)[2] == payload


def test_a_payload_with_a_lone_surrogate_is_refused_naming_it():
    """Before: accepted and stored as bytes that are not UTF-8, which then broke every poll of the queue."""
    payload = json.loads('{"text": "\\ud800 half a pair"}')
    with pytest.raises(ApiError) as exc:
        parse_message({**msg(), "payload": payload}, SPACE, "messages[3].")
    assert_api_error(exc, 422, "invalid_message", "messages[3].payload")


def test_multibyte_payload_over_the_limit_in_utf8_is_413():
    payload = "é" * (MAX_PAYLOAD_BYTES // 2)  # 2 bytes each: just over with the quotes
    with pytest.raises(ApiError) as exc:
        parse_message({**msg(), "payload": payload}, SPACE)
    assert_api_error(exc, 413, "payload_too_large", "payload")


# == batches ======================================================================================


def test_a_batch_gives_one_parsed_message_per_entry_in_order():
    body = {"messages": [{**msg(x0=i), "id": f"m{i}"} for i in range(5)]}
    out = parse_batch(body, SPACE)
    assert [m[0] for m in out] == [f"m{i}" for i in range(5)]
    assert [m[1][0] for m in out] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_batch_limit_default_is_1000():
    assert MAX_BATCH == 1000


def test_a_batch_of_exactly_the_limit_is_accepted():
    assert len(parse_batch({"messages": [msg()] * MAX_BATCH}, SPACE)) == MAX_BATCH
    assert len(parse_batch({"messages": [msg()] * 3}, SPACE, max_batch=3)) == 3


@pytest.mark.parametrize("body, max_batch", [
    ({"messages": [msg()] * (MAX_BATCH + 1)}, MAX_BATCH),
    ({"messages": [msg()] * 4}, 3),
    ({"messages": []}, MAX_BATCH),
    ({}, MAX_BATCH),
    ({"messages": {"0": msg()}}, MAX_BATCH),
    ([msg()], MAX_BATCH),
])
def test_batch_shape_and_size_errors_name_messages(body, max_batch):
    with pytest.raises(ApiError) as exc:
        parse_batch(body, SPACE, max_batch=max_batch)
    assert_api_error(exc, 422, "invalid_message", "messages")


@pytest.mark.parametrize("bad, status, code, field", [
    (msg(x2=math.nan), 422, "invalid_message", "messages[7].attributes.x2"),
    (msg(x2=1000), 422, "invalid_message", "messages[7].attributes.x2"),
    ({"attributes": {"x0": 1, "x1": 1, "x3": 1}}, 422, "invalid_message", "messages[7].attributes.x2"),
    ({**msg(), "id": "no spaces"}, 422, "invalid_message", "messages[7].id"),
    ({**msg(), "bogus": 1}, 422, "invalid_message", "messages[7].bogus"),
    ({"payload": 1}, 422, "invalid_message", "messages[7].attributes"),
    ("not an object", 422, "invalid_message", "messages[7]"),
    ({**msg(), "payload": string_payload_of(MAX_PAYLOAD_BYTES + 1)}, 413, "payload_too_large", "messages[7].payload"),
])
def test_a_bad_message_in_a_batch_is_named_by_index(bad, status, code, field):
    messages = [msg() for _ in range(10)]
    messages[7] = bad
    with pytest.raises(ApiError) as exc:
        parse_batch({"messages": messages}, SPACE)
    assert_api_error(exc, status, code, field)


def test_the_first_bad_message_of_a_batch_is_the_one_named():
    messages = [msg(), msg(x0=-1), msg(x1=-1)]
    with pytest.raises(ApiError) as exc:
        parse_batch({"messages": messages}, SPACE)
    assert exc.value.field == "messages[1].attributes.x0"


def test_payload_limit_is_configurable():
    small = {**msg(), "payload": "x" * 100}
    parse_message(small, SPACE, max_payload=102)
    with pytest.raises(ApiError) as exc:
        parse_message(small, SPACE, max_payload=101)
    assert_api_error(exc, 413, "payload_too_large", "payload")
    with pytest.raises(ApiError) as exc:
        parse_batch({"messages": [msg(), small]}, SPACE, max_payload=50)
    assert_api_error(exc, 413, "payload_too_large", "messages[1].payload")
