"""The gRPC API's conversions (bluedove/dispatcher/grpc_messages.py): a delivery's attributes
in `values` typed and its numbers in `attributes`; a filter from `Range`s or `filter_json`, both
refused naming `filter_json`; a SubscriptionInfo holds the stored filter as JSON text and, when it
is one box, its ranges."""

from __future__ import annotations

import json

import pytest

from bluedove.core.errors import ApiError
from bluedove.core.space import Space, default_space
from bluedove.dispatcher.grpc_messages import delivery_pb, filter_of, subscription_info, subscription_json
from bluedove.v1 import pubsub_pb2 as pb

TYPED = Space.from_json({"attributes": [{"name": "sku", "type": "string"},
                                        {"name": "amount", "type": "number", "min": 0, "max": 100},
                                        {"name": "express", "type": "boolean", "optional": True}],
                         "partition": ["amount", "sku"]})


def test_a_delivery_carries_every_attribute_typed_and_the_numbers_as_before():
    d = delivery_pb({"id": "m", "attributes": {"sku": "A", "amount": 5.0, "express": False}, "payload": {"a": 1},
                     "subscriptions": ["s"], "receipt": "r", "published_at": "t"})
    assert dict(d.attributes) == {"amount": 5.0}
    assert dict(d.values) == {"sku": pb.Value(text="A"), "amount": pb.Value(number=5.0),
                              "express": pb.Value(flag=False)}
    assert (d.payload, list(d.subscriptions), d.receipt, d.published_at) == ('{"a":1}', ["s"], "r", "t")


def test_a_filter_comes_from_ranges_or_json_text_not_both():
    ranges = {"x0": pb.Range(low=1, high=2)}
    assert filter_of(ranges, "") == {"x0": [1.0, 2.0]}
    assert filter_of({}, '{"sku": {"prefix": "A"}}') == {"sku": {"prefix": "A"}}
    req = pb.SubscribeRequest(queue="q", filter_json='{"sku": "A"}')
    assert subscription_json(req) == {"queue": "q", "predicates": {"sku": "A"}}
    for preds, text, where, words in ((ranges, "{}", "", "not both"), ({}, "{", "subscriptions[2].", "JSON text"),
                                      ({}, "[1]", "", "JSON object"), ({}, "[" * 100000, "", "JSON text")):
        with pytest.raises(ApiError) as e:
            filter_of(preds, text, where)
        assert (e.value.status, e.value.code, e.value.field) == (422, "invalid_subscription", f"{where}filter_json")
        assert words in e.value.message


def test_subscription_info_holds_the_stored_filter_and_its_one_box():
    one = subscription_info({"id": "s", "queue": "q", "predicates": {"x0": [1.0, 2.0]}}, default_space())
    assert (dict(one.predicates), json.loads(one.filter_json)) == ({"x0": pb.Range(low=1, high=2)}, {"x0": [1, 2]})
    many = {"id": "s", "queue": "q", "predicates": {"sku": {"in": ["é", "B"]}, "any_of": [{"amount": 1}]}}
    info = subscription_info(many, TYPED)
    assert (dict(info.predicates), json.loads(info.filter_json)) == ({}, many["predicates"])
    assert '"é"' in info.filter_json
