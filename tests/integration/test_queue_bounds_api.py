"""POST /v1/queues with bounds, GET /v1/queues/{queue}, and the cap refusing deliveries for one
queue only, on a real cluster (redis-server, matchers, a dispatcher)."""

from __future__ import annotations

import time

import pytest

from tests.integration.test_api_errors import catalogue, error  # noqa: F401 - a fixture, and a helper

pytestmark = pytest.mark.integration


def _queue(api, body=None, headers=None) -> tuple[str, dict]:
    r = api.post("/v1/queues", json=body, headers=headers) if body is not None else api.post("/v1/queues")
    assert r.status_code == 201, r.text
    return r.json()["queue"], {"Authorization": f"Bearer {r.json()['token']}"}


def test_a_queue_created_without_a_body_answers_as_before_and_has_the_default_bounds(api):
    r = api.post("/v1/queues")
    assert r.status_code == 201 and set(r.json()) == {"queue", "token"}
    q, auth = r.json()["queue"], {"Authorization": f"Bearer {r.json()['token']}"}
    info = api.get(f"/v1/queues/{q}", headers=auth)
    assert info.status_code == 200, info.text
    assert info.json() == {"queue": q, "depth": 0, "max_undelivered": 100_000, "retention_s": 0, "retain_acked_s": 0,
                           "dead_letter": None, "dropped": 0, "expired": 0, "dead_lettered": 0}


def test_reading_a_queue_needs_its_token(api):
    q, _ = _queue(api)
    other, other_auth = _queue(api)
    error(api.get(f"/v1/queues/{q}"), 401, "unauthorized")
    error(api.get(f"/v1/queues/{q}", headers=other_auth), 401, "unauthorized")
    error(api.get("/v1/queues/nosuchqueue", headers=other_auth), 401, "unauthorized")


BAD_BODIES = [
    ({"max_undelivered": 0}, "max_undelivered"),
    ({"max_undelivered": 1_000_001}, "max_undelivered"),
    ({"max_undelivered": "10"}, "max_undelivered"),
    ({"max_undelivered": True}, "max_undelivered"),
    ({"max_undelivered": 2.5}, "max_undelivered"),
    ({"retention_s": -1}, "retention_s"),
    ({"retention_s": 10**9}, "retention_s"),
    ({"dead_letter": "q"}, "dead_letter"),
    ({"dead_letter": {"max_deliveries": 3}}, "dead_letter.queue"),
    ({"dead_letter": {"queue": "a" * 32}}, "dead_letter.max_deliveries"),
    ({"dead_letter": {"queue": "a" * 32, "max_deliveries": 0}}, "dead_letter.max_deliveries"),
    ({"dead_letter": {"queue": "a" * 32, "max_deliveries": 3, "x": 1}}, "dead_letter.x"),
    ({"cap": 5}, "cap"),
    ([1], "body"),
]


@pytest.mark.parametrize("body,field", BAD_BODIES)
def test_a_bad_bound_is_422_naming_the_field_and_creates_nothing(api, catalogue, body, field):
    before = catalogue.scard("bd:queues")
    error(api.post("/v1/queues", json=body), 422, "invalid_request", field)
    assert catalogue.scard("bd:queues") == before


def test_a_dead_letter_queue_must_be_one_the_bearer_token_opens(api, catalogue):
    dlq, dl_auth = _queue(api)
    _, other_auth = _queue(api)
    before = catalogue.scard("bd:queues")
    body = {"dead_letter": {"queue": dlq, "max_deliveries": 3}}
    error(api.post("/v1/queues", json=body), 401, "unauthorized", "dead_letter.queue")
    error(api.post("/v1/queues", json=body, headers=other_auth), 401, "unauthorized", "dead_letter.queue")
    assert catalogue.scard("bd:queues") == before
    q, auth = _queue(api, {"max_undelivered": 50, "retention_s": 3600, **body}, dl_auth)
    info = api.get(f"/v1/queues/{q}", headers=auth).json()
    assert info["dead_letter"] == {"queue": dlq, "max_deliveries": 3}
    assert (info["max_undelivered"], info["retention_s"]) == (50, 3600)


def test_a_full_queue_drops_new_deliveries_for_itself_only_and_the_publish_succeeds(api):
    small, small_auth = _queue(api, {"max_undelivered": 3})
    big, big_auth = _queue(api)
    for q, auth in ((small, small_auth), (big, big_auth)):
        r = api.post("/v1/subscriptions", json={"queue": q, "predicates": {"x0": [500, 501]}}, headers=auth)
        assert r.status_code == 201, r.text
    time.sleep(0.2)
    for i in range(5):
        r = api.post("/v1/messages", json={"id": f"cap-{small}-{i}", "attributes": {"x0": 500.5, "x1": 1, "x2": 2,
                                                                                     "x3": 3}})
        assert r.status_code == 202, r.text
    small_info = api.get(f"/v1/queues/{small}", headers=small_auth).json()
    big_info = api.get(f"/v1/queues/{big}", headers=big_auth).json()
    assert (small_info["depth"], small_info["dropped"]) == (3, 2)
    assert (big_info["depth"], big_info["dropped"]) == (5, 0)
    got = api.get(f"/v1/queues/{small}/messages", params={"max": 10}, headers=small_auth).json()["messages"]
    assert [m["id"] for m in got] == [f"cap-{small}-{i}" for i in range(3)]  # the oldest kept
    # acked, they make room again
    r = api.post(f"/v1/queues/{small}/ack", json={"receipts": [m["receipt"] for m in got]}, headers=small_auth)
    assert r.status_code == 204
    r = api.post("/v1/messages", json={"id": f"cap-{small}-late", "attributes": {"x0": 500.5, "x1": 1, "x2": 2,
                                                                                  "x3": 3}})
    assert r.status_code == 202
    assert api.get(f"/v1/queues/{small}", headers=small_auth).json()["depth"] == 1
