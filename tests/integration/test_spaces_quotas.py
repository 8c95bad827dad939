"""A named space's quotas (docs/api.md, "Spaces"): subscriptions, messages and request bytes per
second. Over one: a 429 `quota_exceeded` whose field names the quota, with `Retry-After` for the
rates, storing and publishing nothing; the default space and other spaces are not held back."""

from __future__ import annotations

import pytest

from bluedove.store import keys as K
from bluedove.store.client import sync_client
from tests.integration.test_spaces_lifecycle import wait_gone

pytestmark = pytest.mark.integration

ATTRS = [{"name": "kind", "type": "string"}, {"name": "size", "min": 0, "max": 100}]


@pytest.fixture
def limited(api):
    made = []

    def make(name: str, quotas: dict) -> str:
        r = api.post("/v1/spaces", json={"name": name, "attributes": ATTRS, "partition": ["size"], "quotas": quotas})
        assert r.status_code == 201, r.text
        made.append(name)
        return name

    yield make
    for name in made:
        api.delete(f"/v1/spaces/{name}")
        wait_gone(api, name)


def over(r, field: str, retry: bool) -> None:
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "quota_exceeded" and r.json()["error"]["field"] == field, r.text
    assert ("retry-after" in r.headers) == retry and (not retry or int(r.headers["retry-after"]) >= 1)


def test_a_space_over_its_subscriptions_quota_stores_no_more(api, cluster, limited):
    name = limited("subs-q", {"subscriptions": 5})
    q = api.post("/v1/queues").json()
    auth = {"Authorization": f"Bearer {q['token']}"}
    for i in range(4):
        assert api.post(f"/v1/spaces/{name}/subscriptions", json={"queue": q["queue"], "predicates": {}},
                        headers=auth).status_code == 201
    batch = {"subscriptions": [{"queue": q["queue"], "predicates": {}}] * 2}
    over(api.post(f"/v1/spaces/{name}/subscriptions:batch", json=batch, headers=auth), "quotas.subscriptions", False)
    assert api.post(f"/v1/spaces/{name}/subscriptions", json={"queue": q["queue"], "predicates": {}},
                    headers=auth).status_code == 201
    r = sync_client(cluster.store_url)
    try:
        queues = r.scard(K.QUEUES)
        over(api.post(f"/v1/spaces/{name}/subscriptions", json={"predicates": {}}), "quotas.subscriptions", False)
        assert r.scard(K.QUEUES) == queues  # no queue made for the refused subscription
    finally:
        r.close()
    assert api.get(f"/v1/spaces/{name}").json()["counts"]["subscriptions"] == 5
    assert api.post("/v1/subscriptions", json={"queue": q["queue"], "predicates": {}},
                    headers=auth).status_code == 201  # the default space has no such quota


def test_a_space_over_its_message_or_byte_rate_is_refused_with_retry_after(api, limited):
    msgs = limited("rate-q", {"messages_per_s": 30})
    batch = {"messages": [{"attributes": {"kind": "a", "size": i % 100}} for i in range(150)]}
    # a full bucket takes a batch over its burst, leaving a debt of 4 s: what follows waits it out
    assert api.post(f"/v1/spaces/{msgs}/messages:batch", json=batch).status_code == 202
    over(api.post(f"/v1/spaces/{msgs}/messages:batch", json=batch), "quotas.messages_per_s", True)
    # over its quota, a space refuses before decoding: a body that would not decode is a 429 too
    over(api.post(f"/v1/spaces/{msgs}/messages:batch", content=b'{"messages": [{'), "quotas.messages_per_s", True)
    over(api.post(f"/v1/spaces/{msgs}/messages", json={"attributes": {"kind": "b", "size": 1}}),
         "quotas.messages_per_s", True)
    assert api.post("/v1/messages", json={"attributes": {"x0": 1, "x1": 2, "x2": 3, "x3": 4}}).status_code == 202

    size = limited("bytes-q", {"bytes_per_s": 2000})
    big = {"messages": [{"attributes": {"kind": "k" * 100, "size": i}} for i in range(20)]}  # ~3 kB
    assert api.post(f"/v1/spaces/{size}/messages:batch", json=big).status_code == 202  # a full bucket takes it
    over(api.post(f"/v1/spaces/{size}/messages:batch", json=big), "quotas.bytes_per_s", True)
    assert api.post(f"/v1/spaces/{msgs}/messages", json={"attributes": {"kind": "c", "size": 2}}).status_code in (
        202, 429)  # its own bucket, not the other's
