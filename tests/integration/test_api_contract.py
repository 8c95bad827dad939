"""docs/api.md details found by a black-box audit: the dashboard, queue ids that name other store
keys, HTTP's error headers, a long-poll whose queue is deleted, unforeseen errors."""

from __future__ import annotations

import threading
import time

import grpc
import httpx
import pytest

from bluedove.store import keys as K
from bluedove.store.client import sync_client
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.helpers import new_queue

pytestmark = pytest.mark.integration


@pytest.fixture
def store(cluster):
    r = sync_client(cluster.store_url)
    yield r
    r.close()


def test_dashboard_is_the_live_cluster_page(api):
    """The page and its files come from the dispatcher (tests/browser runs it in Chromium)."""
    r = api.get("/dashboard")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    files = {"dashboard.js": "text/javascript", "charts.js": "text/javascript", "dashboard.css": "text/css"}
    code = ""
    for name, kind in files.items():
        # Relative URLs: the page works behind a path prefix too.
        assert f'"dashboard/{name}"' in r.text, name
        f = api.get(f"/dashboard/{name}")
        assert f.status_code == 200 and f.headers["content-type"].startswith(kind), (name, f.status_code)
        code += f.text
    # Only the listed files are served (no path into the package).
    for other in ("dashboard.html.bak", "..%2Fapp.py", "x.js"):
        assert api.get(f"/dashboard/{other}").status_code == 404, other
    # It reads the cluster view and the series, relative, every second, and only fields they have.
    assert '"v1/cluster"' in code and "`v1/cluster?space=${encodeURIComponent(space)}`" in code
    assert "getJSON(path)" in code and "getJSON(`v1/stats?since=${since}`)" in code
    assert "PERIOD_MS = 1000" in code
    member = api.get("/v1/cluster").json()["members"][0]
    for key in ("segments", "labels", "subscriptions", "load", "status", "idle", "cpu", "rss_bytes", "cpu_limit"):
        assert f"m.{key}" in code and key in member, key
    assert {"lambda", "mu", "q", "congestion"} <= set(member["load"]["x0"])
    # Text from the store is never parsed as HTML.
    assert "innerHTML" not in code + r.text and "insertAdjacentHTML" not in code


SUFFIXES = [":s", ":subs", ":x", " ", "\u00e9", "a" * 200]


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_queue_id_naming_another_store_key_is_401_like_a_missing_queue(api, suffix):
    """`<queue>:s` is the key of the queue's stream: looking a token up there failed with
    WRONGTYPE (a 500, and so a way to tell an existing queue from a missing one)."""
    q, auth = new_queue(api)
    assert api.post("/v1/subscriptions", json={"queue": q, "predicates": {}}, headers=auth).status_code == 201
    for headers in (auth, {"Authorization": "Bearer wrong"}, {}):
        answers = []
        for queue in (q + suffix, "no-such-queue" + suffix):
            quoted = httpx.URL(f"/v1/queues/{queue}").raw_path.decode()
            for method, path, body in (("GET", f"{quoted}/messages", None),
                                       ("POST", f"{quoted}/ack", {"receipts": []}),
                                       ("DELETE", quoted, None),
                                       ("POST", "/v1/subscriptions", {"queue": queue, "predicates": {}})):
                r = api.request(method, path, json=body, headers=headers)
                answers.append((r.status_code, r.text))
        assert {status for status, _ in answers} == {401}, answers
        assert len(set(answers)) == 1, answers
    # The queue and its subscription are untouched.
    assert api.get(f"/v1/queues/{q}/messages", headers=auth).status_code == 200


def test_grpc_queue_id_naming_another_store_key_is_unauthenticated(cluster, api):
    q, auth = new_queue(api)
    token = auth["Authorization"].split()[1]
    with grpc.insecure_channel(cluster.grpc_address) as ch:
        stub = pb_grpc.PubSubStub(ch)
        for queue in (q + ":s", "no-such-queue:s"):
            with pytest.raises(grpc.RpcError) as e:
                stub.Poll(pb.PollRequest(queue=queue), metadata=(("authorization", f"Bearer {token}"),), timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, e.value.details()


def test_grpc_payload_nested_too_deeply_is_invalid_argument(cluster):
    with grpc.insecure_channel(cluster.grpc_address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.PubSubStub(ch).Publish(pb.Message(attributes={"x0": 1, "x1": 2, "x2": 3, "x3": 4},
                                                      payload="[" * 50_000 + "]" * 50_000), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert dict(e.value.trailing_metadata())["bluedove-error-field"] == "payload"


def test_http_error_headers(api):
    q, _ = new_queue(api)
    for r in (api.get(f"/v1/queues/{q}/messages"), api.get("/v1/queues/no-such-queue/messages"),
              api.delete(f"/v1/queues/{q}", headers={"Authorization": "Bearer wrong"})):
        assert r.status_code == 401
        # RFC 9110 §11.6.1: a 401 says how to authenticate; the same header for every 401.
        assert r.headers["www-authenticate"] == 'Bearer realm="bluedove"'
    r = api.put("/v1/queues")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert r.headers["allow"] == "POST"  # RFC 9110 §15.5.6


def parked_polls(api) -> int:
    """Long polls parked in the dispatchers now (their `bluedove_parked_polls` gauge)."""
    for line in api.get("/metrics").text.splitlines():
        if line.startswith("bluedove_parked_polls"):
            return int(float(line.split()[-1]))
    return 0


def test_a_long_poll_open_while_its_queue_is_deleted_is_401(api, cluster):
    sub = api.post("/v1/subscriptions", json={"predicates": {}}).json()
    auth = {"Authorization": f"Bearer {sub['token']}"}
    wait = 8.0
    answers = []

    def poll():
        with httpx.Client(base_url=cluster.url, timeout=30) as c:
            r = c.get(f"/v1/queues/{sub['queue']}/messages", params={"wait": wait}, headers=auth)
            answers.append((r, time.monotonic()))

    before = parked_polls(api)
    t = threading.Thread(target=poll)
    started = time.monotonic()
    t.start()
    while parked_polls(api) <= before:  # until the poll waits in the store
        assert time.monotonic() - started < wait / 2 and not answers, "the poll never parked"
        time.sleep(0.01)
    assert not answers  # parked: it has not answered
    assert api.delete(f"/v1/queues/{sub['queue']}", headers=auth).status_code == 204
    t.join(15)
    r, answered = answers[0]
    assert r.status_code == 401, r.text  # was 500 (NOGROUP from the store)
    assert r.json()["error"]["code"] == "unauthorized"
    assert answered - started < wait / 2  # the deletion ended the wait; it did not time out


def test_an_unforeseen_error_still_answers_in_the_error_shape(api, store):
    """A catalogue entry that is not JSON (it cannot happen through the API) makes the
    dispatcher fail; the answer is a 500 in docs/api.md's error shape, not a text page."""
    q, auth = new_queue(api)
    shard = K.catalog_hash(K.shard_of(q))
    store.hset(shard, "audit-broken-entry", "{not json")
    try:
        r = api.get("/v1/subscriptions/audit-broken-entry", headers=auth)
    finally:
        store.hdel(shard, "audit-broken-entry")
    assert r.status_code == 500
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["code"] == "internal" and r.json()["error"]["message"]
