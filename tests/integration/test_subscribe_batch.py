"""POST /v1/subscriptions:batch, gRPC SubscribeBatch and the SDK's subscribe_many on a real
4-matcher cluster; and single subscribes under way together (their store writes and matcher
calls are batched: bluedove/dispatcher/subscriber.py) keeping read-your-writes.

Read-your-writes: messages published right after the 201 are delivered exactly as the
brute-force oracle says. All or nothing: a batch refused (a bad item, a token, the limit)
leaves no subscription in the catalogue and creates no queue.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time

import grpc
import httpx
import pytest

from bluedove.client import AsyncClient, Client
from bluedove.client.errors import InvalidSubscription, Unauthorized
from bluedove.core.model import build_subscription
from bluedove.core.partition.segments import SegmentTable
from bluedove.store import keys as K
from bluedove.store.client import sync_client
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.cluster_checks import DIMS, EXACT, match_on_every_candidate, random_predicates
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import catalogue_size, compare, drain, new_queue, oracle

pytestmark = pytest.mark.integration


@pytest.fixture
def catalogue(cluster):
    r = sync_client(cluster.store_url)
    yield r
    r.close()


def state(r) -> tuple:
    """What a refused batch must leave as it was: the catalogue and the queues."""
    return catalogue_size(r), r.scard(K.QUEUES)


def error(r: httpx.Response, status: int, code: str, field: str | None) -> None:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert (err["code"], err.get("field")) == (code, field), err


def random_messages(rng: random.Random, subs: dict, n: int) -> list[dict]:
    """n messages, half of them on a bound of some subscription's predicates."""
    preds = [p for _, p in subs.values() if p]
    out = []
    for i in range(n):
        attrs = {d: rng.uniform(0, 1000) for d in DIMS}
        if preds and i % 2:
            for d, (lo, _) in rng.choice(preds).items():
                if 0 <= lo < 1000:
                    attrs[d] = lo
        out.append({"attributes": attrs, "id": f"m{i}"})
    return out


async def publish_and_drain(url: str, bodies: list[dict], queues: dict) -> list:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for i in range(0, len(bodies), 250):
            r = await client.post("/v1/messages:batch", json={"messages": bodies[i:i + 250]})
            assert r.status_code == 202, r.text
        return await drain(client, queues)


def test_batch_is_read_your_writes_exactly(cluster, api):
    rng = random.Random(20261124)
    queues = dict(new_queue(api) for _ in range(3))
    subs = {}
    for q, auth in queues.items():
        items = [{"queue": q, "predicates": random_predicates(rng)} for _ in range(300)]
        r = api.post("/v1/subscriptions:batch", json={"subscriptions": items}, headers=auth)
        assert r.status_code == 201, r.text
        out = r.json()["subscriptions"]
        assert [o["queue"] for o in out] == [q] * 300 and not any("token" in o for o in out)
        assert len({o["id"] for o in out}) == 300
        subs.update({o["id"]: (q, it["predicates"]) for o, it in zip(out, items)})
    # Items without a queue: each gets one of its own, with its token, in order.
    items = [{"predicates": random_predicates(rng)} for _ in range(40)]
    r = api.post("/v1/subscriptions:batch", json={"subscriptions": items})
    assert r.status_code == 201, r.text
    out = r.json()["subscriptions"]
    assert len({o["queue"] for o in out}) == 40
    for o, it in zip(out, items):
        queues[o["queue"]] = {"Authorization": f"Bearer {o['token']}"}
        subs[o["id"]] = (o["queue"], it["predicates"])
    first = out[0]
    got = api.get(f"/v1/subscriptions/{first['id']}", headers=queues[first["queue"]])
    assert got.status_code == 200 and got.json()["queue"] == first["queue"]
    bodies = random_messages(rng, subs, 1500)
    got = asyncio.run(publish_and_drain(cluster.url, bodies, queues))
    messages = {b["id"]: tuple(b["attributes"][d] for d in DIMS) for b in bodies}
    expected = oracle(cluster.space, subs, messages)
    assert len(expected) > 1000
    assert compare(expected, got) == EXACT and len(got) == len(expected)


def test_concurrent_single_subscribes_are_read_your_writes(cluster, api):
    """64 subscribes under way together; each publishes, right after its 201, a message inside
    its own predicates: every such message reaches its subscription, nothing else arrives."""
    rng = random.Random(7)
    queues = dict(new_queue(api) for _ in range(8))
    subs, probes = {}, {}

    async def one(client: httpx.AsyncClient, i: int) -> None:
        q = list(queues)[i % len(queues)]
        preds = {d: [lo, lo + 5] for d in DIMS if (lo := rng.randrange(0, 990)) is not None and rng.random() < 0.7}
        r = await client.post("/v1/subscriptions", json={"queue": q, "predicates": preds}, headers=queues[q])
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        subs[sid] = (q, preds)
        attrs = {d: preds[d][0] + 2.5 if d in preds else rng.uniform(0, 1000) for d in DIMS}
        p = await client.post("/v1/messages", json={"attributes": attrs, "id": f"probe{i}"})
        assert p.status_code == 202, p.text
        probes[f"probe{i}"] = (q, sid, tuple(attrs[d] for d in DIMS))

    async def run() -> list:
        async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
            await asyncio.gather(*(one(client, i) for i in range(64)))
            return await drain(client, queues)

    got = asyncio.run(run())
    delivered = {(q, m["id"]): set(m["subscriptions"]) for q, m in got}
    for mid, (q, sid, _) in probes.items():
        assert sid in delivered.get((q, mid), set()), f"{mid} did not reach {sid}"
    # Nothing beyond what matches (subscriptions made after a probe may or may not see it).
    full = oracle(cluster.space, subs, {mid: p for mid, (_, _, p) in probes.items()})
    for key, ids in delivered.items():
        assert ids <= full.get(key, set()), key


BAD_ITEMS = [
    ({"predicates": {"x2": [0, "high"]}}, "subscriptions[3].predicates.x2[1]"),
    ({"predicates": {"x9": [0, 1]}}, "subscriptions[3].predicates.x9"),
    ({"predicates": {"x0": [5, 5]}}, "subscriptions[3].predicates.x0"),
    ({"predicates": {}, "extra": 1}, "subscriptions[3].extra"),
    ({"queue": 5, "predicates": {}}, "subscriptions[3].queue"),
    ({}, "subscriptions[3].predicates"),
    ("not an object", "subscriptions[3]"),
]


@pytest.mark.parametrize("bad,field", BAD_ITEMS)
def test_one_bad_item_refuses_the_whole_batch(api, catalogue, bad, field):
    q, auth = new_queue(api)
    items = [{"queue": q, "predicates": {"x0": [1, 2]}}, {"predicates": {}}, {"queue": q, "predicates": {}}, bad,
             {"predicates": {"x1": [3, 4]}}]
    before = state(catalogue)
    error(api.post("/v1/subscriptions:batch", json={"subscriptions": items}, headers=auth), 422,
          "invalid_subscription", field)
    assert state(catalogue) == before


@pytest.mark.parametrize("body,field", [({"subscriptions": []}, "subscriptions"),
                                        ({"subscriptions": [{"predicates": {}}] * 1001}, "subscriptions"),
                                        ({"subscriptions": {}}, "subscriptions"), ([], "subscriptions"),
                                        ({"subscriptions": [{"predicates": {}}], "queue": "q"}, "queue")])
def test_batch_shape_is_checked(api, catalogue, body, field):
    before = state(catalogue)
    error(api.post("/v1/subscriptions:batch", json=body), 422, "invalid_subscription", field)
    assert state(catalogue) == before


def test_batch_tokens(api, catalogue):
    q1, auth1 = new_queue(api)
    q2, auth2 = new_queue(api)
    before = state(catalogue)
    one_queue = {"subscriptions": [{"queue": q1, "predicates": {}}, {"predicates": {}}]}
    error(api.post("/v1/subscriptions:batch", json=one_queue), 401, "unauthorized", None)
    error(api.post("/v1/subscriptions:batch", json=one_queue, headers=auth2), 401, "unauthorized", None)
    two_queues = {"subscriptions": [{"queue": q1, "predicates": {}}, {"queue": q2, "predicates": {}}]}
    error(api.post("/v1/subscriptions:batch", json=two_queues, headers=auth1), 401, "unauthorized",
          "subscriptions[1].queue")
    assert state(catalogue) == before
    r = api.post("/v1/subscriptions:batch", json=one_queue, headers=auth1)
    assert r.status_code == 201, r.text
    a, b = r.json()["subscriptions"]
    assert a["queue"] == q1 and "token" not in a and b["queue"] not in (q1, q2) and b["token"]


def test_batch_limit_is_all_or_nothing(api, catalogue):
    q, auth = new_queue(api)
    catalogue.sadd(K.queue_subs(q), *[f"fake{i}" for i in range(9_998)])  # 2 places left
    before = state(catalogue)
    items = [{"predicates": {}}, {"queue": q, "predicates": {}}, {"queue": q, "predicates": {}},
             {"queue": q, "predicates": {}}]
    error(api.post("/v1/subscriptions:batch", json={"subscriptions": items}, headers=auth), 429,
          "limit_exceeded", "subscriptions[1].queue")
    assert state(catalogue) == before
    r = api.post("/v1/subscriptions:batch", json={"subscriptions": items[:3]}, headers=auth)
    assert r.status_code == 201, r.text
    error(api.post("/v1/subscriptions", json={"queue": q, "predicates": {}}, headers=auth), 429,
          "limit_exceeded", "queue")


def test_grpc_subscribe_batch(cluster, catalogue):
    with grpc.insecure_channel(cluster.grpc_address) as ch:
        stub = pb_grpc.PubSubStub(ch)
        q = stub.CreateQueue(pb.CreateQueueRequest())
        md = (("authorization", f"Bearer {q.token}"),)
        req = pb.SubscribeBatchRequest(subscriptions=[
            pb.SubscribeRequest(queue=q.queue, predicates={"x0": pb.Range(low=10, high=20)}),
            pb.SubscribeRequest(predicates={"x1": pb.Range(low=0, high=500)})])
        out = stub.SubscribeBatch(req, metadata=md).subscriptions
        assert out[0].queue == q.queue and not out[0].token and out[1].queue != q.queue and out[1].token
        stub.Publish(pb.Message(attributes={"x0": 15, "x1": 100, "x2": 1, "x3": 1}, id="g1"))
        got = stub.Poll(pb.PollRequest(queue=q.queue, max=10), metadata=md).messages
        assert [(m.id, list(m.subscriptions)) for m in got] == [("g1", [out[0].id])]
        before = state(catalogue)
        bad = pb.SubscribeBatchRequest(subscriptions=[
            pb.SubscribeRequest(queue=q.queue), pb.SubscribeRequest(predicates={"x1": pb.Range(low=5, high=1)})])
        with pytest.raises(grpc.RpcError) as exc:
            stub.SubscribeBatch(bad, metadata=md)
        meta = dict(exc.value.trailing_metadata())
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (meta["bluedove-error-code"], meta["bluedove-error-field"]) == ("invalid_subscription",
                                                                             "subscriptions[1].predicates.x1")
        with pytest.raises(grpc.RpcError) as exc:
            stub.SubscribeBatch(pb.SubscribeBatchRequest(subscriptions=[pb.SubscribeRequest(queue=q.queue)]))
        assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert state(catalogue) == before


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_sdk_subscribe_many(cluster, scheme):
    url = cluster.url if scheme == "http" else f"grpc://{cluster.grpc_address}"
    with Client(url) as c:
        q = c.create_queue()
        subs = c.subscribe_many([{"x0": (0, 100)}, {"x0": (50, 150)}, {"x1": (0, 1)}], queue=q)
        assert [s.queue.id for s in subs] == [q.id] * 3 and subs[1].predicates == {"x0": [50, 150]}
        own = c.subscribe_many([{"x2": (0, 10)}])
        assert own[0].queue.id != q.id and own[0].queue.token
        c.publish({"x0": 60, "x1": 500, "x2": 5, "x3": 5}, id=f"sdk-{scheme}")
        (d,) = q.deliveries(wait=5)
        assert sorted(d.subscriptions) == sorted([subs[0].id, subs[1].id])
        assert [x.id for x in own[0].queue.deliveries(wait=5)] == [f"sdk-{scheme}"]
        with pytest.raises(InvalidSubscription) as exc:
            c.subscribe_many([{"x0": (0, 1)}, {"x0": (2, 1)}], queue=q)
        assert exc.value.field == "subscriptions[1].predicates.x0"
        with pytest.raises(Unauthorized):
            c.subscribe_many([{}], queue=c.queue(q.id, "wrong"))


def test_sdk_async_subscribe_many(cluster):
    async def run() -> None:
        async with AsyncClient(cluster.url) as c:
            q = await c.create_queue()
            subs = await c.subscribe_many([{"x3": (0, 1000)}] * 1500, queue=q)  # two calls
            assert len({s.id for s in subs}) == 1500
            await c.publish({"x0": 1, "x1": 1, "x2": 1, "x3": 1}, id="sdk-async")
            (d,) = await q.deliveries(wait=5)
            assert set(d.subscriptions) == {s.id for s in subs}

    asyncio.run(run())


def test_subscriptions_of_a_batch_are_as_built(cluster, api):
    """The catalogue holds each item as a single subscribe would store it (clipped to the space)."""
    q, auth = new_queue(api)
    items = [{"queue": q, "predicates": {"x0": [-50, 20.5]}}, {"queue": q, "predicates": {"x3": [999, 5000]}}]
    out = api.post("/v1/subscriptions:batch", json={"subscriptions": items}, headers=auth).json()["subscriptions"]
    for o, it in zip(out, items):
        got = api.get(f"/v1/subscriptions/{o['id']}", headers=auth).json()
        want = build_subscription(o["id"], q, it["predicates"], cluster.space).to_json()
        assert got == want


# -- a matcher that stops answering ------------------------------------------------------------
@pytest.fixture(scope="module")
def stalled(tmp_path_factory):
    """2 matchers; a subscription call to a matcher is given up on after 1 s."""
    c = start_cluster(tmp_path_factory.mktemp("stalled"), matchers=2, child_env={"BLUEDOVE_SUBSCRIBE_TIMEOUT_S": "1"})
    yield c
    c.stop()
    assert_no_children(c)


def test_a_stopped_matcher_delays_subscribes_only_until_gossip_declares_it_dead(stalled):
    """Singles and a batch under way while a matcher is stopped (SIGSTOP: it takes the bytes and
    never answers) are sent to it again until gossip declares it dead (at most MISSED_RETRY_S),
    then all answer 201: the matcher gets them from the catalogue log once it runs again (or a
    takeover moves its segments), and then every candidate matches exactly."""
    rng = random.Random(3)
    m1 = next(c for c in stalled.children if c.role == "matcher")
    with httpx.Client(base_url=stalled.url, timeout=30) as api:
        queues = dict(new_queue(api) for _ in range(4))
    subs = {}

    async def one(client: httpx.AsyncClient, i: int) -> None:
        q = list(queues)[i % 4]
        preds = random_predicates(rng)
        r = await client.post("/v1/subscriptions", json={"queue": q, "predicates": preds}, headers=queues[q])
        assert r.status_code == 201, r.text
        subs[r.json()["id"]] = (q, preds)

    async def batch(client: httpx.AsyncClient) -> None:
        q = list(queues)[0]
        items = [{"queue": q, "predicates": random_predicates(rng)} for _ in range(100)]
        r = await client.post("/v1/subscriptions:batch", json={"subscriptions": items}, headers=queues[q])
        assert r.status_code == 201, r.text
        subs.update({o["id"]: (q, it["predicates"]) for o, it in zip(r.json()["subscriptions"], items)})

    async def run() -> None:
        async with httpx.AsyncClient(base_url=stalled.url, timeout=30) as client:
            await asyncio.gather(batch(client), *(one(client, i) for i in range(24)))

    os.kill(m1.pid, signal.SIGSTOP)
    try:
        asyncio.run(run())
    finally:
        os.kill(m1.pid, signal.SIGCONT)
    assert len(subs) == 124
    r = sync_client(stalled.store_url)
    for attempt in range(40):  # until the stopped matcher has read the catalogue log (or, if gossip
        # declared it dead meanwhile, until the takeover's table is the one checked)
        table = SegmentTable.from_json(json.loads(r.get(K.TABLE)))
        try:
            assert asyncio.run(match_on_every_candidate(table, random.Random(attempt), subs, 50)) > 0
            break
        except AssertionError:
            if attempt == 39:
                raise
            time.sleep(0.5)
    r.close()
