"""No queue or subscription can be read, changed or deleted without its queue's token: 401,
with the same body whether or not the thing exists."""

from __future__ import annotations

import pytest

from tests.integration.helpers import new_queue

pytestmark = pytest.mark.integration

GOOD = {"x0": 1, "x1": 2, "x2": 3, "x3": 4}


@pytest.fixture
def owned(api):
    q, auth = new_queue(api)
    sub = api.post("/v1/subscriptions", json={"queue": q, "predicates": {}}, headers=auth).json()["id"]
    assert api.post("/v1/messages", json={"attributes": GOOD}).status_code == 202
    _, other_auth = new_queue(api)
    return {"q": q, "auth": auth, "sub": sub, "other": other_auth}


def requests_on(q: str, sub: str):
    return [
        ("GET", f"/v1/queues/{q}/messages", None),
        ("POST", f"/v1/queues/{q}/ack", {"receipts": ["1-0"]}),
        ("DELETE", f"/v1/queues/{q}", None),
        ("POST", "/v1/subscriptions", {"queue": q, "predicates": {}}),
        ("GET", f"/v1/subscriptions/{sub}", None),
        ("DELETE", f"/v1/subscriptions/{sub}", None),
    ]


BAD_AUTH = {
    "missing": {},
    "wrong": {"Authorization": "Bearer not-the-token"},
    "not bearer": {"Authorization": "Basic abc"},
    "no token": {"Authorization": "Bearer"},
}


@pytest.mark.parametrize("how", list(BAD_AUTH) + ["other queue's token"])
def test_every_queue_operation_needs_the_token(api, owned, how):
    headers = owned["other"] if how == "other queue's token" else BAD_AUTH[how]
    real = requests_on(owned["q"], owned["sub"])
    fake = requests_on("no-such-queue", "no-such-sub")
    for (method, path, body), (_, fake_path, fake_body) in zip(real, fake):
        r = api.request(method, path, json=body, headers=headers)
        f = api.request(method, fake_path, json=fake_body, headers=headers)
        # A valid token of another queue opens no subscription but its own: 404 for both.
        expected = 404 if how == "other queue's token" and path.startswith("/v1/subscriptions/") else 401
        assert r.status_code == expected, (method, path, r.text)
        # The answer must not reveal whether the queue or subscription exists.
        assert (f.status_code, f.text) == (r.status_code, r.text), (method, path)
    # Nothing changed: the owner still reads its queue and subscription.
    assert api.get(f"/v1/subscriptions/{owned['sub']}", headers=owned["auth"]).status_code == 200
    msgs = api.get(f"/v1/queues/{owned['q']}/messages", params={"wait": 2}, headers=owned["auth"]).json()["messages"]
    assert len(msgs) == 1


@pytest.mark.parametrize("how", list(BAD_AUTH) + ["other queue's token"])
def test_a_bad_token_is_a_401_before_a_bad_parameter_or_body(api, owned, how):
    """Poll and ack check the token inside their store call; an invalid request has it
    checked first, so a wrong token is still a 401 (and the same for a missing queue)."""
    headers = owned["other"] if how == "other queue's token" else BAD_AUTH[how]
    answers = []
    for q in (owned["q"], "no-such-queue"):
        polled = api.get(f"/v1/queues/{q}/messages", params={"max": 0, "wait": 99}, headers=headers)
        acked = api.post(f"/v1/queues/{q}/ack", json={"receipts": ["nope"], "extra": 1}, headers=headers)
        assert polled.status_code == acked.status_code == 401, (polled.text, acked.text)
        answers.append((polled.text, acked.text))
    assert answers[0] == answers[1]


def test_another_queues_token_cannot_see_a_subscription(api, owned):
    r = api.get(f"/v1/subscriptions/{owned['sub']}", headers=owned["other"])
    assert r.status_code == 404
    assert api.delete(f"/v1/subscriptions/{owned['sub']}", headers=owned["other"]).status_code == 404
    assert api.get(f"/v1/subscriptions/{owned['sub']}", headers=owned["auth"]).status_code == 200


def test_subscribe_without_queue_creates_one_with_a_token(api):
    r = api.post("/v1/subscriptions", json={"predicates": {"x0": [0, 10]}})
    assert r.status_code == 201
    body = r.json()
    assert set(body) == {"id", "queue", "token"}
    auth = {"Authorization": f"Bearer {body['token']}"}
    assert api.get(f"/v1/subscriptions/{body['id']}", headers=auth).json()["queue"] == body["queue"]
    # The token is shown once: a subscription to an existing queue does not return it.
    again = api.post("/v1/subscriptions", json={"queue": body["queue"], "predicates": {}}, headers=auth).json()
    assert "token" not in again


def test_delete_queue_removes_everything(api, owned):
    assert api.delete(f"/v1/queues/{owned['q']}", headers=owned["auth"]).status_code == 204
    # The token no longer opens anything, and the subscription is gone.
    assert api.get(f"/v1/queues/{owned['q']}/messages", headers=owned["auth"]).status_code == 401
    assert api.get(f"/v1/subscriptions/{owned['sub']}", headers=owned["auth"]).status_code == 401
    assert api.post("/v1/messages", json={"attributes": GOOD}).status_code == 202


def test_delivery_lifecycle_ack_and_redelivery(api, owned):
    q, auth = owned["q"], owned["auth"]
    first = api.get(f"/v1/queues/{q}/messages", params={"wait": 2}, headers=auth).json()["messages"]
    assert len(first) == 1
    m = first[0]
    assert set(m) == {"id", "attributes", "payload", "subscriptions", "receipt", "published_at"}
    assert m["subscriptions"] == [owned["sub"]] and m["attributes"] == {k: float(v) for k, v in GOOD.items()}
    # Invisible while in flight...
    assert api.get(f"/v1/queues/{q}/messages", params={"wait": 0}, headers=auth).json()["messages"] == []
    assert api.post(f"/v1/queues/{q}/ack", json={"receipts": [m["receipt"]]}, headers=auth).status_code == 204
    # ...and gone once acked (acking twice is harmless).
    assert api.post(f"/v1/queues/{q}/ack", json={"receipts": [m["receipt"]]}, headers=auth).status_code == 204
    assert api.get(f"/v1/queues/{q}/messages", params={"wait": 0}, headers=auth).json()["messages"] == []
