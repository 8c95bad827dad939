"""Bounds and equals on numbers through a real cluster (docs/api.md, "Subscriptions"): each is
one exact box, so the matchers hold it as any range, and deliveries are exact at the bounds
themselves; a wrong condition is a 422 naming its field, and stores nothing. (Filters of
several boxes and checks after the index: tests/integration/test_exactness.py and
test_takeover.py, with the oracle.)"""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest

from bluedove.store import keys as K
from bluedove.store.client import sync_client
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.helpers import drain, new_queue

pytestmark = pytest.mark.integration

FILTERS = {
    "open-closed": {"x0": {"gt": 100, "lte": 200}},
    "closed-open": {"x0": [100, 200]},
    "at-least": {"x0": {"gte": 100}},
    "below": {"x0": {"lt": 100}},
    "equals": {"x1": 500},
    "equals-op": {"x1": {"eq": 500}, "x0": {"gte": 150, "lt": 151}},
}


def _holds(name: str, x0: float, x1: float) -> bool:
    return {"open-closed": 100 < x0 <= 200, "closed-open": 100 <= x0 < 200, "at-least": x0 >= 100,
            "below": x0 < 100, "equals": x1 == 500, "equals-op": x1 == 500 and 150 <= x0 < 151}[name]


def test_bounds_and_equals_are_exact_at_the_bounds(cluster, api):
    queues, names = {}, {}
    for name, predicates in FILTERS.items():
        q, auth = new_queue(api)
        r = api.post("/v1/subscriptions", json={"queue": q, "predicates": predicates}, headers=auth)
        assert r.status_code == 201, r.text
        assert api.get(f"/v1/subscriptions/{r.json()['id']}", headers=auth).json()["predicates"] == predicates
        queues[q], names[q] = auth, name
    points = [(x0, x1) for x0 in (99.99999999999999, 100, 100.00000000000001, 150, 199.99999999999997, 200, 201)
              for x1 in (499.99999999999994, 500, 500.00000000000006)]
    for i, (x0, x1) in enumerate(points):
        r = api.post("/v1/messages", json={"attributes": {"x0": x0, "x1": x1, "x2": 0, "x3": 0}, "payload": i})
        assert r.status_code == 202, r.text

    async def got() -> list:
        async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
            return await drain(client, queues)

    delivered = sorted((names[q], m["payload"]) for q, m in asyncio.run(got()))
    want = sorted((name, i) for i, (x0, x1) in enumerate(points) for name in FILTERS if _holds(name, x0, x1))
    assert delivered == want


def test_grpc_shows_bounds_and_equals_as_the_range_they_make(cluster, api):
    """gRPC speaks ranges only: a subscription made over REST with bounds is shown as its box."""
    q, auth = new_queue(api)
    r = api.post("/v1/subscriptions", json={"queue": q, "predicates": {"x0": {"gte": 100, "lt": 200}, "x1": 5}},
                 headers=auth)
    assert r.status_code == 201, r.text
    token = auth["Authorization"].removeprefix("Bearer ")
    with grpc.insecure_channel(cluster.grpc_address) as ch:
        got = pb_grpc.PubSubStub(ch).GetSubscription(pb.SubscriptionRef(id=r.json()["id"]),
                                                     metadata=(("authorization", f"Bearer {token}"),))
    assert {k: (v.low, v.high) for k, v in got.predicates.items()} == {"x0": (100, 200), "x1": (5, 5.000000000000001)}


@pytest.mark.parametrize("predicates, field", [
    ({"x0": {"in": []}}, "predicates.x0.in"),
    ({"x0": {"not_in": ["1"]}}, "predicates.x0.not_in[0]"),
    ({"any_of": [{"x0": [0, 1]}, {"any_of": []}]}, "predicates.any_of[1].any_of"),
    ({"x0": {"prefix": "a"}}, "predicates.x0.prefix"),  # not an operator on a number
    ({"x0": {"gt": 1, "gte": 2}}, "predicates.x0.gt"),  # two lower bounds
    ({"x0": {"eq": "500"}}, "predicates.x0.eq"),  # a string for a number
])
def test_a_wrong_condition_is_a_422_naming_the_field_and_stores_nothing(cluster, api, predicates, field):
    q, auth = new_queue(api)
    r = api.post("/v1/subscriptions", json={"queue": q, "predicates": predicates}, headers=auth)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field
    r = api.post("/v1/subscriptions:batch", json={"subscriptions": [{"queue": q, "predicates": {}},
                                                                    {"queue": q, "predicates": predicates}]},
                 headers=auth)
    assert r.status_code == 422 and r.json()["error"]["field"] == f"subscriptions[1].{field}", r.text
    r = sync_client(cluster.store_url)
    try:
        assert r.scard(K.queue_subs(q)) == 0  # nothing stored
    finally:
        r.close()
