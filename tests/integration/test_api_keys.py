"""API keys on real processes (`--auth keys`): every public endpoint over REST and gRPC refused
without the right credentials and changing nothing, dedup scoped per key, a revoke refused
within a second by both dispatchers, per-key rate limits, the SDK and the `bluedove keys` CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import grpc
import httpx
import pytest

from bluedove.client import Client, Forbidden, RateLimited, Unauthorized
from bluedove.store import keys as K
from bluedove.store.apikeys import KeyStore
from bluedove.store.client import async_client, sync_client
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import extra_dispatcher

pytestmark = pytest.mark.integration
ATTRS = {"x0": 120.5, "x1": 7, "x2": 3.25, "x3": 999}
REVOKE_DEADLINE_S = 1.0


def add_dispatcher(cluster) -> tuple[str, str]:
    """A second dispatcher with keys on, on ports of its own: (REST URL, gRPC address)."""
    return extra_dispatcher(cluster, "d2", ["--auth", "keys"])


@pytest.fixture(scope="module")
def kc(tmp_path_factory):
    """A 2-matcher cluster with keys on, and a second dispatcher on ports of its own."""
    c = start_cluster(tmp_path_factory.mktemp("keys"), matchers=2, auth="keys")
    try:
        c.d2_url, c.d2_grpc = add_dispatcher(c)
        yield c
    finally:
        c.stop()
    assert_no_children(c)


def ks_call(cluster, fn):
    async def run():
        r = async_client(cluster.store_url)
        try:
            return await fn(KeyStore(r))
        finally:
            await r.aclose()

    return asyncio.run(run())


def make_key(cluster, *scopes: str, **limits) -> str:
    return ks_call(cluster, lambda ks: ks.create(tuple(scopes), "test", **limits))[0]


def revoke(cluster, key: str) -> None:
    assert ks_call(cluster, lambda ks: ks.revoke(key.split("_")[1])) == 1


def bearer(secret: str | None, queue_token: str | None = None) -> dict:
    h = {"Authorization": f"Bearer {secret}"} if secret else {}
    return {**h, **({"X-Queue-Token": queue_token} if queue_token else {})}


@pytest.fixture(scope="module")
def keys(kc):
    admin = make_key(kc, "admin")
    revoked = make_key(kc, "publish", "subscribe")
    revoke(kc, revoked)
    return {"admin": admin, "pub": make_key(kc, "publish"), "sub": make_key(kc, "subscribe"), "revoked": revoked,
            "elsewhere": make_key(kc, "admin", spaces=("orders", "traffic"))}  # not the default space


@pytest.fixture(scope="module")
def api(kc):
    with httpx.Client(base_url=kc.url, timeout=30) as h:
        yield h


# -- the state a refused request must leave alone ---------------------------------------------
class World:
    """A queue Q subscribed to everything (subscription S), one delivery handed out (receipt R,
    pending) and one waiting; and another queue whose token is the "other queue's token"."""

    def __init__(self, api: httpx.Client, admin: str) -> None:
        r = api.post("/v1/subscriptions", json={"predicates": {}}, headers=bearer(admin))
        assert r.status_code == 201, r.text
        self.sub, self.q, self.token = r.json()["id"], r.json()["queue"], r.json()["token"]
        other = api.post("/v1/queues", headers=bearer(admin))
        assert other.status_code == 201, other.text
        self.other_q, self.other_token = other.json()["queue"], other.json()["token"]
        for mid in ("m0", "m1"):
            assert api.post("/v1/messages", json={"attributes": ATTRS, "id": f"{self.q}-{mid}"},
                            headers=bearer(admin)).status_code == 202
        got = api.get(f"/v1/queues/{self.q}/messages", params={"max": 1, "wait": 5}, headers=bearer(self.token))
        assert got.status_code == 200 and len(got.json()["messages"]) == 1, got.text
        self.receipt = got.json()["messages"][0]["receipt"]

    def snapshot(self, r) -> dict:
        """What any of the endpoints could change: queues, Q's subscriptions and catalogue, Q's
        deliveries (stream length: publishes; pending: polls and acks)."""
        return {"queues": r.scard(K.QUEUES), "subs_of_q": sorted(r.smembers(K.queue_subs(self.q))),
                "catalogue": sum(r.hlen(K.catalog_hash(s)) for s in range(K.CATALOG_SHARDS)),
                "stream": r.xlen(K.queue_stream(self.q)), "pending": r.xpending(K.queue_stream(self.q), "g")["pending"],
                "q_exists": r.exists(K.queue_hash(self.q)), "other_exists": r.exists(K.queue_hash(self.other_q))}


def rest_calls(w: World) -> dict:
    """Every public REST endpoint: (method, path, kwargs, needs: publish|subscribe|queue|read)."""
    msg = {"attributes": ATTRS, "id": "refused"}
    return {
        "publish": ("POST", "/v1/messages", {"json": msg}, "publish"),
        "publish batch": ("POST", "/v1/messages:batch", {"json": {"messages": [msg]}}, "publish"),
        "create queue": ("POST", "/v1/queues", {}, "subscribe"),
        "subscribe new queue": ("POST", "/v1/subscriptions", {"json": {"predicates": {}}}, "subscribe"),
        "subscribe to Q": ("POST", "/v1/subscriptions", {"json": {"queue": w.q, "predicates": {}}}, "queue"),
        "subscribe batch": ("POST", "/v1/subscriptions:batch",
                            {"json": {"subscriptions": [{"queue": w.q, "predicates": {}}, {"predicates": {}}]}},
                            "queue"),
        "delete queue": ("DELETE", f"/v1/queues/{w.q}", {}, "queue"),
        "delete subscription": ("DELETE", f"/v1/subscriptions/{w.sub}", {}, "queue"),
        "poll": ("GET", f"/v1/queues/{w.q}/messages", {"params": {"wait": 0}}, "read"),
        "ack": ("POST", f"/v1/queues/{w.q}/ack", {"json": {"receipts": [w.receipt]}}, "read"),
        "get subscription": ("GET", f"/v1/subscriptions/{w.sub}", {}, "read"),
    }


ELSEWHERE = "a key of other spaces"


def bad_credentials(w: World, keys: dict, needs: str, by_sub_id: bool = False,
                    in_space: bool = True) -> list[tuple[str, dict, int]]:
    """(what, headers, expected status) for each wrong way to call an endpoint needing `needs`.
    `by_sub_id`: the endpoint names a subscription, and a valid token of another queue is a 404
    there (no such subscription of that queue: docs/api.md), as without keys. `in_space`: the
    endpoint publishes or subscribes in the default space (a queue's own are in none), so an
    admin key limited to other spaces is a 403 there."""
    wrong_scope = keys["sub"] if needs == "publish" else keys["pub"]
    token = w.token if needs in ("queue", "read") else None
    other = 404 if by_sub_id else 401
    cases = [("no credentials", {}, 401),
             ("another queue's token", bearer(w.other_token, w.other_token), other if needs == "read" else 401),
             ("a revoked key", bearer(keys["revoked"], token), 401)]
    if needs == "read":  # reads take the queue token, never a key
        cases.append(("a key instead of the queue token", bearer(keys["admin"]), 401))
    else:
        cases.append(("a key of the wrong scope", bearer(wrong_scope, token), 403))
        if in_space:
            cases.append((ELSEWHERE, bearer(keys["elsewhere"], token), 403))
    if needs == "queue":  # a good key, but not Q's token
        cases.append(("a good key with another queue's token", bearer(keys["admin"], w.other_token), other))
        cases.append(("a good key without the queue's token", bearer(keys["admin"]), 401))
    return cases


def test_every_rest_endpoint_refuses_wrong_credentials_and_changes_nothing(kc, api, keys):
    w = World(api, keys["admin"])
    r = sync_client(kc.store_url)
    before = w.snapshot(r)
    tried = 0
    for name, (method, path, kw, needs) in rest_calls(w).items():
        for what, headers, status in bad_credentials(w, keys, needs, "subscription" in name and method != "POST",
                                                     name not in ("create queue", "delete queue")):
            got = api.request(method, path, headers=headers, **kw)
            assert got.status_code == status, (name, what, got.text)
            err = got.json()["error"]
            if status == 404:
                assert err["code"] == "not_found", (name, what)
            elif status == 401:
                assert err["code"] == "unauthorized", (name, what)
                assert got.headers["WWW-Authenticate"] == 'Bearer realm="bluedove"', (name, what)
            elif what == ELSEWHERE:
                assert err["code"] == "forbidden" and err["field"] == "space" and "'default'" in err["message"], name
            else:
                assert err["code"] == "forbidden" and err["message"].startswith("insufficient_scope:"), (name, what)
                assert got.headers["WWW-Authenticate"] == ('Bearer error="insufficient_scope", '
                                                           f'scope="{needs if needs == "publish" else "subscribe"}"')
            tried += 1
    assert tried >= 50
    time.sleep(0.3)  # a delivery a refused publish had caused would be stored by now
    assert w.snapshot(r) == before
    # ... and the right credentials do work on the same world (the test can fail)
    assert api.get(f"/v1/subscriptions/{w.sub}", headers=bearer(w.token)).status_code == 200
    ok = api.post("/v1/subscriptions", json={"queue": w.q, "predicates": {}}, headers=bearer(keys["sub"], w.token))
    assert ok.status_code == 201, ok.text
    assert api.delete(f"/v1/subscriptions/{ok.json()['id']}", headers=bearer(keys["sub"], w.token)).status_code == 204
    # a key of other spaces manages queues, which are in none
    made = api.post("/v1/queues", headers=bearer(keys["elsewhere"]))
    assert made.status_code == 201, made.text
    assert api.delete(f"/v1/queues/{made.json()['queue']}",
                      headers=bearer(keys["elsewhere"], made.json()["token"])).status_code == 204
    assert api.delete(f"/v1/queues/{w.q}", headers=bearer(keys["sub"], w.token)).status_code == 204


def grpc_calls(w: World) -> dict:
    msg = pb.Message(attributes=ATTRS, id="refused")
    return {
        "Publish": (lambda s, md: s.Publish(msg, metadata=md), "publish"),
        "PublishBatch": (lambda s, md: s.PublishBatch(pb.PublishBatchRequest(messages=[msg]), metadata=md), "publish"),
        "PublishStream": (lambda s, md: s.PublishStream(iter([pb.PublishStreamRequest(messages=[msg])]), metadata=md),
                          "publish"),
        "CreateQueue": (lambda s, md: s.CreateQueue(pb.CreateQueueRequest(), metadata=md), "subscribe"),
        "Subscribe new queue": (lambda s, md: s.Subscribe(pb.SubscribeRequest(), metadata=md), "subscribe"),
        "Subscribe to Q": (lambda s, md: s.Subscribe(pb.SubscribeRequest(queue=w.q), metadata=md), "queue"),
        "SubscribeBatch": (lambda s, md: s.SubscribeBatch(pb.SubscribeBatchRequest(subscriptions=[
            pb.SubscribeRequest(queue=w.q), pb.SubscribeRequest()]), metadata=md), "queue"),
        "DeleteQueue": (lambda s, md: s.DeleteQueue(pb.DeleteQueueRequest(queue=w.q), metadata=md), "queue"),
        "Unsubscribe": (lambda s, md: s.Unsubscribe(pb.SubscriptionRef(id=w.sub), metadata=md), "queue"),
        "Poll": (lambda s, md: s.Poll(pb.PollRequest(queue=w.q), metadata=md), "read"),
        "Ack": (lambda s, md: s.Ack(pb.AckRequest(queue=w.q, receipts=[w.receipt]), metadata=md), "read"),
        "GetSubscription": (lambda s, md: s.GetSubscription(pb.SubscriptionRef(id=w.sub), metadata=md), "read"),
        "Listen": (lambda s, md: next(iter(s.Listen(pb.ListenRequest(queue=w.q), metadata=md, timeout=10))), "read"),
    }


def test_every_grpc_method_refuses_wrong_credentials_and_changes_nothing(kc, api, keys):
    w = World(api, keys["admin"])
    r = sync_client(kc.store_url)
    before = w.snapshot(r)
    codes = {401: grpc.StatusCode.UNAUTHENTICATED, 403: grpc.StatusCode.PERMISSION_DENIED,
             404: grpc.StatusCode.NOT_FOUND}
    slugs = {401: "unauthorized", 403: "forbidden", 404: "not_found"}
    with grpc.insecure_channel(kc.grpc_address) as ch:
        stub = pb_grpc.PubSubStub(ch)
        for name, (call, needs) in grpc_calls(w).items():
            for what, headers, status in bad_credentials(w, keys, needs, name in ("Unsubscribe", "GetSubscription"),
                                                         name not in ("CreateQueue", "DeleteQueue")):
                md = tuple((k.lower(), v) for k, v in headers.items())
                with pytest.raises(grpc.RpcError) as exc:
                    call(stub, md)
                assert exc.value.code() == codes[status], (name, what, exc.value.details())
                meta = dict(exc.value.trailing_metadata() or ())
                assert meta.get("bluedove-error-code") == slugs[status], (name, what)
        time.sleep(0.3)
        assert w.snapshot(r) == before
        # the right credentials work
        md = (("authorization", f"Bearer {keys['sub']}"), ("x-queue-token", w.token))
        sub = stub.Subscribe(pb.SubscribeRequest(queue=w.q), metadata=md)
        stub.Unsubscribe(pb.SubscriptionRef(id=sub.id), metadata=md)
        assert stub.Publish(pb.Message(attributes=ATTRS), metadata=(("authorization", f"Bearer {keys['pub']}"),)).id


def published_ids(api: httpx.Client, q: str, token: str, want: int) -> list[str]:
    """Every delivery of q until `want` came (or 5 s passed), then half a second more for extras."""
    got: list[str] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        r = api.get(f"/v1/queues/{q}/messages", params={"max": 100, "wait": 0.5},
                    headers=bearer(token))
        assert r.status_code == 200, r.text
        got += [m["id"] for m in r.json()["messages"]]
        if len(got) >= want and not r.json()["messages"]:
            break
    return got


def test_dedup_ids_are_scoped_per_key(kc, api, keys):
    sub = api.post("/v1/subscriptions", json={"predicates": {}}, headers=bearer(keys["admin"])).json()
    k1, k2 = make_key(kc, "publish"), make_key(kc, "publish")
    for k in (k1, k1, k2, k2):  # each key twice, same id
        r = api.post("/v1/messages", json={"attributes": ATTRS, "id": "order-17", "payload": {"k": k[:20]}},
                     headers=bearer(k))
        assert r.status_code == 202 and r.json() == {"id": "order-17"}, r.text
    # a batch repeating it (same key) delivers nothing more
    r = api.post("/v1/messages:batch", json={"messages": [{"attributes": ATTRS, "id": "order-17"}]}, headers=bearer(k1))
    assert r.status_code == 202 and r.json() == {"ids": ["order-17"]}
    got = published_ids(api, sub["queue"], sub["token"], 2)
    assert got == ["order-17", "order-17"]  # once per key, with the publisher's id


def wait_refused(url: str, key: str, deadline_s: float) -> float:
    """Seconds until `url` refuses a publish with `key` (401), polling; fails past deadline_s."""
    t0 = time.monotonic()
    with httpx.Client(base_url=url, timeout=5) as h:
        while True:
            r = h.post("/v1/messages", json={"attributes": ATTRS}, headers=bearer(key))
            took = time.monotonic() - t0
            if r.status_code == 401:
                return took
            assert r.status_code == 202, r.text
            assert took < deadline_s, f"{url} still accepted the revoked key after {took:.2f} s"
            time.sleep(0.02)


@pytest.mark.parametrize("by", ["key", "id"])
def test_a_revoked_key_is_refused_within_a_second_by_both_dispatchers(kc, keys, by):
    key = make_key(kc, "publish")
    for url in (kc.url, kc.d2_url):  # both have it cached
        assert httpx.post(f"{url}/v1/messages", json={"attributes": ATTRS}, headers=bearer(key)).status_code == 202
    out = subprocess.run([sys.executable, "-m", "bluedove", "keys", "revoke", key if by == "key" else key.split("_")[1],
                          "--store", kc.store_url], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "revoked" in out.stdout, out.stderr
    revoked_at = time.monotonic()
    for url in (kc.url, kc.d2_url):
        took = wait_refused(url, key, REVOKE_DEADLINE_S - (time.monotonic() - revoked_at))
        assert took < REVOKE_DEADLINE_S
    # and over gRPC on the second dispatcher
    with grpc.insecure_channel(kc.d2_grpc) as ch, pytest.raises(grpc.RpcError) as exc:
        pb_grpc.PubSubStub(ch).Publish(pb.Message(attributes=ATTRS), metadata=(("authorization", f"Bearer {key}"),))
    assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_new_key_works_at_once_on_both_dispatchers(kc, keys):
    for url in (kc.url, kc.d2_url):  # an unknown id is remembered as unknown until the generation moves
        assert httpx.post(f"{url}/v1/messages", json={"attributes": ATTRS},
                          headers=bearer("bdk_0123456789abcdef_" + "a" * 43)).status_code == 401
    key = make_key(kc, "publish")
    for url in (kc.url, kc.d2_url):
        assert httpx.post(f"{url}/v1/messages", json={"attributes": ATTRS}, headers=bearer(key)).status_code == 202


def test_over_its_rate_a_key_gets_429_with_retry_after_and_nothing_published_then_recovers(kc, api, keys):
    sub = api.post("/v1/subscriptions", json={"predicates": {}}, headers=bearer(keys["admin"])).json()
    key = make_key(kc, "publish", rate_msgs=100)
    batch = {"messages": [{"attributes": ATTRS, "id": f"b{i}"} for i in range(150)]}
    assert api.post("/v1/messages:batch", json=batch, headers=bearer(key)).status_code == 202  # the bucket was full
    r = api.post("/v1/messages:batch", json={"messages": [{"attributes": ATTRS, "id": "late"}]}, headers=bearer(key))
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "rate_limited"
    after = int(r.headers["Retry-After"])
    assert 1 <= after <= 4  # 150 at 100/s shared by 2 dispatchers: at most (150 - 50) / 50 s of debt
    with grpc.insecure_channel(kc.grpc_address) as ch, pytest.raises(grpc.RpcError) as exc:
        pb_grpc.PubSubStub(ch).Publish(pb.Message(attributes=ATTRS, id="late"),
                                       metadata=(("authorization", f"Bearer {key}"),))
    assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert dict(exc.value.trailing_metadata())["bluedove-error-code"] == "rate_limited"
    assert "late" not in published_ids(api, sub["queue"], sub["token"], 150)
    time.sleep(after)
    ok = api.post("/v1/messages", json={"attributes": ATTRS, "id": "late"}, headers=bearer(key))
    assert ok.status_code == 202, ok.text
    assert published_ids(api, sub["queue"], sub["token"], 1) == ["late"]


def test_a_bytes_rate_counts_the_request_body(kc, api):
    key = make_key(kc, "publish", rate_bytes=2000)
    big = {"attributes": ATTRS, "payload": "x" * 3000}
    assert api.post("/v1/messages", json=big, headers=bearer(key)).status_code == 202  # passes when full
    r = api.post("/v1/messages", json={"attributes": ATTRS}, headers=bearer(key))
    assert r.status_code == 429 and "byte" in r.json()["error"]["message"] and int(r.headers["Retry-After"]) >= 1


@pytest.mark.parametrize("via", ["rest", "grpc"])
def test_the_sdk_sends_the_key_with_managing_calls_and_the_token_with_reads(kc, keys, via):
    url = kc.url if via == "rest" else f"grpc://{kc.grpc_address}"
    with Client(url, api_key=keys["admin"]) as c:
        q = c.create_queue()
        sub = c.subscribe(q, x0=(100, 200))
        more = c.subscribe_many([{}, {"x1": (0, 10)}], queue=q)
        c.publish(ATTRS, {"n": 1}, id=f"{via}-1")
        c.publish_many([{"attributes": ATTRS, "id": f"{via}-2"}])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            got += c.poll(q, wait=1)
        assert sorted(d.id for d in got) == [f"{via}-1", f"{via}-2"]
        c.ack(q, got)
        assert c.get_subscription(sub.id, q).id == sub.id
        for s in more:
            c.unsubscribe(s)
        c.delete_queue(q)
    with Client(url) as anon, pytest.raises(Unauthorized):
        anon.create_queue()
    with Client(url, api_key=keys["sub"]) as c, pytest.raises(Forbidden):
        c.publish(ATTRS)
    limited = make_key(kc, "publish", rate_msgs=1)
    with Client(url, api_key=limited, retries=0) as c, pytest.raises(RateLimited):
        for _ in range(5):
            c.publish(ATTRS)


def keys_cli(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bluedove", "keys", *args, "--store", cluster.store_url],
                          capture_output=True, text=True, timeout=60)


def test_the_keys_cli_creates_lists_and_revokes(kc, api):
    out = keys_cli(kc, "create", "--scope", "publish", "--scope", "subscribe", "--name", "billing",
                   "--rate-msgs", "500", "--rate-bytes", "1e6")
    assert out.returncode == 0, out.stderr
    key = out.stdout.rstrip("\n").splitlines()[-1]
    assert key.startswith("bdk_") and " " not in key  # alone on its line
    key_id = key.split("_")[1]
    assert api.post("/v1/queues", headers=bearer(key)).status_code == 201
    listed = keys_cli(kc, "list", "--json")
    rows = {json.loads(line)["id"]: json.loads(line) for line in listed.stdout.splitlines()}
    assert rows[key_id]["name"] == "billing" and rows[key_id]["scopes"] == ["publish", "subscribe"]
    assert rows[key_id]["rate_msgs"] == 500 and rows[key_id]["revoked"] is None
    assert key.split("_", 2)[2] not in listed.stdout and "digest" not in listed.stdout
    table = keys_cli(kc, "list").stdout
    assert key_id in table and "billing" in table and key.split("_", 2)[2] not in table
    assert keys_cli(kc, "revoke", key_id).returncode == 0
    again = keys_cli(kc, "revoke", key)
    assert again.returncode == 0 and "already revoked" in again.stdout
    assert json.loads(next(line for line in keys_cli(kc, "list", "--json").stdout.splitlines()
                           if key_id in line))["revoked"] > 0
    limited = keys_cli(kc, "create", "--scope", "admin", "--spaces", "orders,traffic,orders")
    assert limited.returncode == 0 and "spaces orders, traffic" in limited.stdout, limited.stdout
    limited_id = limited.stdout.rstrip("\n").splitlines()[-1].split("_")[1]
    rows = {json.loads(line)["id"]: json.loads(line) for line in keys_cli(kc, "list", "--json").stdout.splitlines()}
    assert rows[limited_id]["spaces"] == ["orders", "traffic"] and rows[key_id]["spaces"] is None
    bad_space = keys_cli(kc, "create", "--scope", "admin", "--spaces", "Orders")
    assert bad_space.returncode == 2 and "--spaces" in bad_space.stderr and "'Orders'" in bad_space.stderr
    # usage errors name the flag; an unknown key is said
    bad = keys_cli(kc, "create", "--scope", "write")
    assert bad.returncode == 2 and "--scope" in bad.stderr and "'write'" in bad.stderr
    unknown = keys_cli(kc, "revoke", "0123456789abcdef")
    assert unknown.returncode == 1 and "no key 0123456789abcdef" in unknown.stderr


def test_the_pubsub_cli_sends_the_api_key_from_the_flag_or_the_environment(kc, keys):
    def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        import os

        return subprocess.run([sys.executable, "-m", "bluedove", *args, "--url", kc.url], capture_output=True,
                              text=True, timeout=60, env={**os.environ, **(env or {})})

    sub = cli("subscribe", "--api-key", keys["sub"], "--x0", "100:200")
    assert sub.returncode == 0, sub.stderr
    out = json.loads(sub.stdout)
    more = cli("subscribe", "--queue", out["queue"], "--token", out["token"], "--x1", "0:10",
               env={"BLUEDOVE_API_KEY": keys["sub"]})
    assert more.returncode == 0, more.stderr
    refused = cli("publish", "--x0", "120", "--x1", "7", "--x2", "3", "--x3", "999")
    assert refused.returncode == 1 and "unauthorized" in refused.stderr
    pub = cli("publish", "--x0", "120", "--x1", "7", "--x2", "3", "--x3", "999", "--id", "cli-1",
              env={"BLUEDOVE_API_KEY": keys["pub"]})
    assert pub.returncode == 0 and pub.stdout.strip() == "cli-1", pub.stderr
    got = cli("poll", out["queue"], "--token", out["token"], "--wait", "5")  # reads: the token alone
    assert got.returncode == 0 and json.loads(got.stdout.splitlines()[0])["id"] == "cli-1", got.stderr
    gone = cli("delete-queue", out["queue"], "--token", out["token"], "--api-key", keys["sub"])
    assert gone.returncode == 0, gone.stderr


def test_a_stream_over_the_rate_ends_resource_exhausted_with_the_earlier_elements_published(kc, api, keys):
    sub = api.post("/v1/subscriptions", json={"predicates": {}}, headers=bearer(keys["admin"])).json()
    key = make_key(kc, "publish", rate_msgs=100)
    elements = [pb.PublishStreamRequest(messages=[pb.Message(attributes=ATTRS, id=f"s{j}-{i}") for i in range(100)])
                for j in range(3)]
    with grpc.insecure_channel(kc.grpc_address) as ch, pytest.raises(grpc.RpcError) as exc:
        pb_grpc.PubSubStub(ch).PublishStream(iter(elements), metadata=(("authorization", f"Bearer {key}"),))
    assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert int(dict(exc.value.trailing_metadata())["retry-after"]) >= 1
    got = published_ids(api, sub["queue"], sub["token"], 100)
    assert sorted(got) == sorted(f"s0-{i}" for i in range(100))  # the first element only
