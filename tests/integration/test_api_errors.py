"""Every docs/api.md error: its status and body, and that it leaves no trace."""

from __future__ import annotations

import json

import pytest

from bluedove.store import keys as K
from bluedove.store.client import sync_client
from tests.integration.helpers import catalogue_size, new_queue

pytestmark = pytest.mark.integration

GOOD = {"x0": 1, "x1": 2, "x2": 3, "x3": 4}


def error(r, status: int, code: str, field: str | None = "absent"):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if field != "absent":
        assert body["error"].get("field") == field


# Written on their own clock by every running process (per-second records, the depth sampler's
# lock, matcher stats, the density sample): they come and go whatever a request does.
BACKGROUND = ("bd:ts:", "bd:depth:lock", "bd:mstats", "bd:density")


def keys(r) -> set[str]:
    """Every key but the background ones. Compared as sets, before and after a request: what
    it added (keys of earlier tests may expire meanwhile)."""
    return {k for k in r.scan_iter(count=1000) if not k.startswith(BACKGROUND)}


@pytest.fixture
def catalogue(cluster):
    r = sync_client(cluster.store_url)
    yield r
    r.close()


BAD_SUBSCRIPTIONS = [
    ({"predicates": {"x9": [0, 1]}}, "predicates.x9"),
    ({"predicates": {"x0": [5, 5]}}, "predicates.x0"),
    ({"predicates": {"x0": [6, 5]}}, "predicates.x0"),
    ({"predicates": {"x0": ["a", 5]}}, "predicates.x0[0]"),
    ({"predicates": {"x0": [0, None]}}, "predicates.x0[1]"),
    ({"predicates": {"x0": [True, 5]}}, "predicates.x0[0]"),
    ({"predicates": {"x0": [0, 1, 2]}}, "predicates.x0"),
    ({"predicates": {"x0": "5"}}, "predicates.x0"),  # (a bare number is equals: valid)
    ({"predicates": [1, 2]}, "predicates"),
    ({"predicates": {"x0": [0, 1]}, "extra": 1}, "extra"),
    ({}, "predicates"),
    ([], None),
    ({"queue": 7, "predicates": {}}, "queue"),
]


@pytest.mark.parametrize("body,field", BAD_SUBSCRIPTIONS)
def test_invalid_subscription_is_422_and_stores_nothing(api, catalogue, body, field):
    q, auth = new_queue(api)
    if isinstance(body, dict) and "queue" not in body:
        body = {"queue": q, **body}
    size, before = catalogue_size(catalogue), keys(catalogue)
    r = api.post("/v1/subscriptions", json=body, headers=auth)
    error(r, 422, "invalid_subscription", field)
    assert catalogue_size(catalogue) == size and not keys(catalogue) - before


def test_non_finite_bound_is_422(api):
    q, auth = new_queue(api)
    raw = '{"queue": "%s", "predicates": {"x0": [0, Infinity]}}' % q
    r = api.post("/v1/subscriptions", content=raw, headers={**auth, "content-type": "application/json"})
    error(r, 422, "invalid_subscription", "predicates.x0[1]")


def test_malformed_json_is_400(api):
    r = api.post("/v1/messages", content=b"{not json", headers={"content-type": "application/json"})
    error(r, 400, "invalid_json")


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages:batch", "/v1/subscriptions"])
def test_json_nested_too_deeply_to_read_is_400(api, everything_queue, path):
    """Python's parser gives up (RecursionError) where JSON does not: that was a 500."""
    deep = "[" * 50_000 + "]" * 50_000
    body = '{"attributes": {"x0": 1, "x1": 2, "x2": 3, "x3": 4}, "payload": %s}' % deep
    if path.endswith(":batch"):
        body = '{"messages": [%s]}' % body
    elif path == "/v1/subscriptions":
        body = '{"predicates": %s}' % deep
    error(api.post(path, content=body, headers={"content-type": "application/json"}), 400, "invalid_json")
    assert_empty(api, everything_queue)


def test_bounds_outside_the_space_are_clipped(api):
    q, auth = new_queue(api)
    r = api.post("/v1/subscriptions", json={"queue": q, "predicates": {"x0": [-50, 2000], "x1": [10, 20]}},
                 headers=auth)
    assert r.status_code == 201, r.text
    got = api.get(f"/v1/subscriptions/{r.json()['id']}", headers=auth).json()
    assert got["predicates"] == {"x0": [0.0, 1000.0], "x1": [10, 20]}


BAD_MESSAGES = [
    ({"attributes": {"x0": 1, "x1": 2, "x2": 3}}, "attributes.x3", 422, "invalid_message"),
    ({"attributes": {**GOOD, "x9": 1}}, "attributes.x9", 422, "invalid_message"),
    ({"attributes": {**GOOD, "x2": "3"}}, "attributes.x2", 422, "invalid_message"),
    ({"attributes": {**GOOD, "x2": None}}, "attributes.x2", 422, "invalid_message"),
    ({"attributes": {**GOOD, "x2": 1000}}, "attributes.x2", 422, "invalid_message"),
    ({"attributes": {**GOOD, "x2": -0.001}}, "attributes.x2", 422, "invalid_message"),
    ({"attributes": [1, 2, 3, 4]}, "attributes", 422, "invalid_message"),
    ({"attributes": GOOD, "id": ""}, "id", 422, "invalid_message"),
    ({"attributes": GOOD, "id": "a b"}, "id", 422, "invalid_message"),
    ({"attributes": GOOD, "color": "red"}, "color", 422, "invalid_message"),
    ({"attributes": GOOD, "payload": "x" * (256 * 1024)}, "payload", 413, "payload_too_large"),
]


@pytest.fixture
def everything_queue(api):
    """A queue subscribed to the whole space: any stored delivery would show up here."""
    q, auth = new_queue(api)
    assert api.post("/v1/subscriptions", json={"queue": q, "predicates": {}}, headers=auth).status_code == 201
    return q, auth


def assert_empty(api, queue):
    q, auth = queue
    r = api.get(f"/v1/queues/{q}/messages", params={"wait": 0.5, "max": 100}, headers=auth)
    assert r.status_code == 200 and r.json()["messages"] == []


@pytest.mark.parametrize("body,field,status,code", BAD_MESSAGES)
def test_invalid_message_is_rejected_and_delivers_nothing(api, everything_queue, body, field, status, code):
    error(api.post("/v1/messages", json=body), status, code, field)
    assert_empty(api, everything_queue)


def test_non_finite_value_is_422(api):
    raw = '{"attributes": {"x0": NaN, "x1": 1, "x2": 1, "x3": 1}}'
    error(api.post("/v1/messages", content=raw, headers={"content-type": "application/json"}),
          422, "invalid_message", "attributes.x0")


def test_payload_just_under_the_limit_is_accepted(api):
    payload = "x" * (256 * 1024 - 2)  # 2 bytes of JSON quotes
    assert api.post("/v1/messages", json={"attributes": GOOD, "payload": payload}).status_code == 202


def test_batch_with_one_bad_message_publishes_nothing(api, everything_queue):
    batch = [{"attributes": GOOD, "payload": i} for i in range(10)]
    batch[7] = {"attributes": {**GOOD, "x2": 5000}}
    error(api.post("/v1/messages:batch", json={"messages": batch}), 422, "invalid_message", "messages[7].attributes.x2")
    assert_empty(api, everything_queue)


@pytest.mark.parametrize("body,field", [
    ({"messages": []}, "messages"),
    ({"messages": [{"attributes": GOOD}] * 1001}, "messages"),
    ({"messages": {}}, "messages"),
    ({}, "messages"),
    ({"messages": [{"attributes": GOOD}, 5]}, "messages[1]"),
    # An unknown field is refused as in a single message, not silently dropped.
    ({"messages": [{"attributes": GOOD}], "extra": 1}, "extra"),
])
def test_batch_shape_errors(api, everything_queue, body, field):
    error(api.post("/v1/messages:batch", json=body), 422, "invalid_message", field)
    assert_empty(api, everything_queue)


def test_batch_is_published_whole(api, everything_queue):
    r = api.post("/v1/messages:batch", json={"messages": [{"attributes": GOOD, "payload": i} for i in range(5)]})
    assert r.status_code == 202 and len(r.json()["ids"]) == 5
    q, auth = everything_queue
    got = api.get(f"/v1/queues/{q}/messages", params={"wait": 2, "max": 100}, headers=auth).json()["messages"]
    assert sorted(m["payload"] for m in got) == [0, 1, 2, 3, 4]


def test_same_id_twice_delivers_once(api, everything_queue):
    for _ in range(2):
        r = api.post("/v1/messages", json={"attributes": GOOD, "id": "idem-1", "payload": "p"})
        assert r.status_code == 202 and r.json() == {"id": "idem-1"}
    q, auth = everything_queue
    got = api.get(f"/v1/queues/{q}/messages", params={"wait": 1, "max": 100}, headers=auth).json()["messages"]
    assert [m["id"] for m in got] == ["idem-1"]


@pytest.mark.parametrize("params,field", [({"max": 0}, "max"), ({"max": 1001}, "max"), ({"wait": 21}, "wait"),
                                          ({"wait": -1}, "wait"), ({"max": "many"}, "max")])
def test_poll_parameters_are_checked(api, params, field):
    q, auth = new_queue(api)
    error(api.get(f"/v1/queues/{q}/messages", params=params, headers=auth), 422, "invalid_parameter", field)


@pytest.mark.parametrize("body,field", [({}, "receipts"), ({"receipts": "x"}, "receipts"),
                                        ({"receipts": ["nope"]}, "receipts[0]"),
                                        ({"receipts": [], "extra": 1}, "extra")])
def test_ack_body_is_checked(api, body, field):
    q, auth = new_queue(api)
    error(api.post(f"/v1/queues/{q}/ack", json=body, headers=auth), 422, "invalid_ack", field)


def test_subscription_limit_per_queue(cluster, api, catalogue):
    q, auth = new_queue(api)
    catalogue.sadd(K.queue_subs(q), *[f"fake{i}" for i in range(10_000)])  # fill to the limit cheaply
    before = catalogue_size(catalogue)
    error(api.post("/v1/subscriptions", json={"queue": q, "predicates": {}}, headers=auth), 429, "limit_exceeded")
    assert catalogue_size(catalogue) == before


def test_unknown_route_and_subscription(api):
    error(api.get("/v1/nothing"), 404, "not_found")
    q, auth = new_queue(api)
    error(api.get("/v1/subscriptions/nope", headers=auth), 404, "not_found")
    error(api.delete("/v1/subscriptions/nope", headers=auth), 404, "not_found")


def test_openapi_and_ops_endpoints(api):
    assert api.get("/healthz").status_code == 200
    assert api.get("/readyz").json()["status"] == "ready"
    metrics = api.get("/metrics").text
    assert "bluedove_messages_published_total " in metrics and "bluedove_forward_failovers_total " in metrics
    assert api.get("/openapi.json").status_code == 200
    space = api.get("/v1/space").json()
    assert [d["name"] for d in space["dimensions"]] == ["x0", "x1", "x2", "x3"]
    c = api.get("/v1/cluster").json()
    assert len(c["members"]) == 4 and all(m["status"] == "alive" for m in c["members"])
    assert json.dumps(c["members"][0]["segments"]["x0"]) == "[0.0, 250.0]"


def test_dedup_marks_last_the_window_for_publisher_ids_only(api, catalogue):
    """A publisher's id is an idempotency key for the whole window: the message and each of
    its deliveries are marked for 10 minutes. An id the dispatcher made is only reused by its
    own failover: only its deliveries are marked, and far shorter (a smaller store)."""
    q, auth = new_queue(api)
    assert api.post("/v1/subscriptions", json={"queue": q, "predicates": {}}, headers=auth).status_code == 201
    mine = api.post("/v1/messages", json={"attributes": GOOD, "id": "keep-me"}).json()["id"]
    made = api.post("/v1/messages", json={"attributes": GOOD}).json()["id"]
    assert 590 <= catalogue.ttl(K.message_mark(mine)) <= 600
    assert 590 <= catalogue.ttl(K.delivery_mark(q, mine)) <= 600
    assert catalogue.exists(K.message_mark(made)) == 0
    assert 0 < catalogue.ttl(K.delivery_mark(q, made)) <= 120
