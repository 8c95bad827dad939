"""The SDK's typed filters and values (docs/api.md, "Python SDK"): keyword conditions become the
filter language, and over gRPC a filter of ranges travels as `Range`s (what every server reads),
any other as `filter_json`; messages carry numbers in `attributes`, strings and booleans in
`values`; deliveries and subscriptions read back typed."""

from __future__ import annotations

import json

import pytest

from bluedove.client.errors import InvalidMessage
from bluedove.client.grpc_transport import delivery_json, message_pb, subscribe_pb, subscription_json, update_pb
from bluedove.client.objects import predicates_of
from bluedove.v1 import pubsub_pb2 as pb


def test_keywords_are_ranges_conditions_or_equals_and_old_calls_read_the_same():
    assert predicates_of(None, {"city": "Paris", "amount": (0, 100), "sku": {"prefix": "AB"}, "express": True,
                                "n": 5}) == \
        {"city": "Paris", "amount": [0, 100], "sku": {"prefix": "AB"}, "express": True, "n": 5}
    assert predicates_of({"x0": (1, 2)}, {"x1": range(3, 5)}) == {"x0": [1, 2], "x1": [3, 4]}
    assert predicates_of({"any_of": [{"a": (1, 2)}, {"b": "x"}], "c": {"in": ["p", "q"]}}, {"x0": [0, 1]}) == \
        {"any_of": [{"a": [1, 2]}, {"b": "x"}], "c": {"in": ["p", "q"]}, "x0": [0, 1]}
    assert predicates_of({"x0": (1, 2)}, {"x0": (3, 4)}) == {"x0": [3, 4]}  # a keyword wins


def test_over_grpc_ranges_stay_ranges_and_other_filters_are_json_text():
    r = subscribe_pb({"queue": "q", "predicates": {"x0": [1, 2.5]}})
    assert (dict(r.predicates), r.filter_json) == ({"x0": pb.Range(low=1, high=2.5)}, "")
    for preds in ({"city": "Paris"}, {"x0": [1, 2], "sku": {"prefix": "AB"}}, {"any_of": [{"x0": [1, 2]}]},
                  {"x0": [True, 2]}, {"x0": ["a", "b"]}):
        r = subscribe_pb({"predicates": preds})
        assert (dict(r.predicates), json.loads(r.filter_json)) == ({}, preds)
    u = update_pb("s1", {"predicates": {"express": True}})
    assert (u.id, dict(u.predicates), json.loads(u.filter_json)) == ("s1", {}, {"express": True})
    assert subscribe_pb({"predicates": {}}) == pb.SubscribeRequest()


def test_messages_carry_numbers_as_attributes_and_the_rest_as_values():
    m = message_pb({"attributes": {"amount": 5, "city": "Paris", "express": False}, "payload": {"a": 1}, "id": "i"})
    assert dict(m.attributes) == {"amount": 5.0}
    assert dict(m.values) == {"city": pb.Value(text="Paris"), "express": pb.Value(flag=False)}
    assert (m.payload, m.id) == ('{"a":1}', "i")
    with pytest.raises(InvalidMessage) as e:
        message_pb({"attributes": {"coupon": None}}, "messages[3].")
    assert e.value.field == "messages[3].attributes.coupon"


def test_deliveries_and_subscriptions_read_back_typed():
    d = pb.Delivery(id="m", attributes={"amount": 5.0}, values={"amount": pb.Value(number=5.0),
                                                                 "city": pb.Value(text="P"), "ok": pb.Value(flag=True)})
    assert delivery_json(d)["attributes"] == {"amount": 5.0, "city": "P", "ok": True}
    old = pb.Delivery(id="m", attributes={"x0": 1.0})  # a server that fills attributes alone
    assert delivery_json(old)["attributes"] == {"x0": 1.0}
    s = pb.SubscriptionInfo(id="s", queue="q", filter_json='{"sku":{"prefix":"AB"}}')
    assert subscription_json(s)["predicates"] == {"sku": {"prefix": "AB"}}
    s = pb.SubscriptionInfo(id="s", queue="q", predicates={"x0": pb.Range(low=1, high=2)})
    assert subscription_json(s)["predicates"] == {"x0": [1.0, 2.0]}
