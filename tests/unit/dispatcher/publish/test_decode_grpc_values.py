"""gRPC messages with typed `values` (docs/api.md, "gRPC"): a message published over gRPC is
accepted or refused as the same message over REST (the same field named), and when accepted its
stored body is REST's byte for byte; `attributes` and `values` may be mixed, a name in both is
refused by name, a Value with no kind is refused by name, and a space of numbers takes `values`
too."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bluedove.core.errors import ApiError
from bluedove.core.space import default_space
from bluedove.dispatcher.publish.decode import Batch, Decoder
from bluedove.v1 import pubsub_pb2 as pb
from tests.unit.dispatcher.publish.test_decode_typed import ORDER, SPACE, message, outcome


def value(v: object) -> pb.Value:
    if v is None:
        return pb.Value()  # no kind: what a client sends for a null
    if isinstance(v, bool):
        return pb.Value(flag=v)
    if isinstance(v, str):
        return pb.Value(text=v)
    assert isinstance(v, (int, float))
    return pb.Value(number=v)


def representable(v: object) -> bool:
    """Whether a JSON attribute value has a gRPC Value (a string valid UTF-8, a number a double)."""
    if isinstance(v, str):
        try:
            v.encode()
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return math.isfinite(float(v)) and float(v) == v
    return v is None or isinstance(v, bool)


def pb_message(body: dict, numbers_in_attributes: bool) -> pb.Message:
    """`body` (REST) as a gRPC Message: strings and booleans in `values`, numbers in either map."""
    attrs, values = {}, {}
    for k, v in body["attributes"].items():
        if numbers_in_attributes and isinstance(v, (int, float)) and not isinstance(v, bool):
            attrs[k] = float(v)
        else:
            values[k] = value(v)
    payload = json.dumps(body["payload"]) if body.get("payload") is not None else ""
    return pb.Message(attributes=attrs, values=values, payload=payload, id=body.get("id") or "")


def stored(b: Batch) -> tuple:
    return b.ids, b.points.tolist(), [json.loads(p) for p in b.payloads], b.attributes


@settings(max_examples=300, deadline=None)
@given(st.lists(message(), min_size=1, max_size=5), st.booleans())
def test_grpc_values_are_taken_and_refused_as_rest_bodies_are(msgs, numbers_in_attributes):
    assume(all(representable(v) and m.get("id") != "" for m in msgs for v in m["attributes"].values()))
    d = Decoder(SPACE, 5)
    want = outcome(lambda: stored(d.batch(json.dumps({"messages": msgs}).encode())))
    got = outcome(lambda: stored(d.pb_batch([pb_message(m, numbers_in_attributes) for m in msgs])))
    assert got[0] == want[0], (got, want)
    if got[0] == "ok":
        assert got == want
    else:
        assert got[1][:2] == want[1][:2] and got[1][2].startswith("messages[") and want[1][2].startswith("messages[")


@pytest.mark.parametrize("msg, field, words", [
    (pb.Message(values={"amount": value(1)}), "attributes.status", "missing attribute 'status'"),
    (pb.Message(attributes={"amount": 5}, values={"status": value("a"), "amount": value(5)}), "attributes.amount",
     "given in both attributes and values"),
    (pb.Message(values={"status": value("a"), "amount": value(5), "express": pb.Value()}), "attributes.express",
     "a Value needs one of number, text or flag"),
    (pb.Message(values={"status": value(True), "amount": value(5)}), "attributes.status", "status is a string"),
    (pb.Message(values={"status": value("a"), "amount": value("5")}), "attributes.amount", "amount is a number"),
    (pb.Message(attributes={"amount": 5, "status": 1}), "attributes.status", "status is a string"),
])
def test_a_bad_grpc_message_is_refused_naming_its_attribute(msg, field, words):
    d = Decoder(SPACE)
    with pytest.raises(ApiError) as one:
        d.messages([msg], None)
    assert (one.value.status, one.value.code, one.value.field, words in one.value.message) == \
        (422, "invalid_message", field, True), one.value.message
    good = pb.Message(values={k: value(v) for k, v in ORDER.items()})
    with pytest.raises(ApiError) as batch:
        d.messages([good, msg], "messages", 5)
    assert batch.value.field == f"messages[6].{field}"


def test_a_typed_grpc_message_is_stored_as_its_rest_twin():
    d = Decoder(SPACE)
    rest = d.one(json.dumps({"attributes": {"coupon": "", "amount": 7, "status": "日本\x00", "express": False},
                             "payload": {"a": 1}, "id": "o-1"}, ensure_ascii=False).encode())
    grpc = d.messages([pb.Message(attributes={"amount": 7}, values={
        "coupon": value(""), "status": value("日本\x00"), "express": value(False)}, payload='{"a": 1}',
        id="o-1")], None)
    assert stored(grpc) == stored(rest)
    assert grpc.attributes == [b'{"status":"\xe6\x97\xa5\xe6\x9c\xac\\u0000","amount":7.0,"express":false,"coupon":""}']


def test_a_space_of_numbers_takes_values_and_stores_what_rest_stores():
    space = default_space()
    d = Decoder(space)
    rest = d.one(b'{"attributes": {"x0": 1.5, "x1": 0, "x2": 999, "x3": 4}, "id": "n-1"}')
    grpc = d.messages([pb.Message(attributes={"x0": 1.5, "x1": 0}, values={"x2": value(999), "x3": value(4)},
                                  id="n-1")], None)
    assert stored(grpc) == stored(rest) and grpc.attributes is None
    with pytest.raises(ApiError) as e:
        d.messages([pb.Message(attributes={"x0": 1.5, "x1": 0, "x2": 9}, values={"x3": value("4")})], "messages")
    assert e.value.field == "messages[0].attributes.x3"
    stream = pb.PublishStreamRequest(attributes={"x0": 1.5, "x1": 0}, values={"x2": value(999), "x3": value(4)},
                                     id="n-1")
    assert stored(d.messages([stream], "messages")) == stored(rest)
