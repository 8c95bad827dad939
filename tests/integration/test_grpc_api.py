"""The gRPC API on real processes: REST and gRPC interchangeable, every error mapping, health
and reflection, and a slow listener that stalls nothing."""

from __future__ import annotations

import json
import time

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from bluedove.store.client import sync_client
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import catalogue_size

pytestmark = pytest.mark.integration
ATTRS = {"x0": 120.5, "x1": 7, "x2": 3.25, "x3": 999}


@pytest.fixture(scope="module")
def channel(cluster):
    with grpc.insecure_channel(cluster.grpc_address) as ch:
        yield ch


@pytest.fixture
def stub(channel):
    return pb_grpc.PubSubStub(channel)


def md(token: str) -> tuple:
    return (("authorization", f"Bearer {token}"),)


# -- REST and gRPC interchangeable ------------------------------------------------------------
def subscribe(api: httpx.Client, stub, via: str, predicates: dict) -> tuple[str, str, str]:
    """(subscription id, queue, token) made over `via`."""
    if via == "rest":
        r = api.post("/v1/subscriptions", json={"predicates": predicates})
        assert r.status_code == 201, r.text
        body = r.json()
        return body["id"], body["queue"], body["token"]
    rep = stub.Subscribe(pb.SubscribeRequest(predicates={k: pb.Range(low=lo, high=hi)
                                                         for k, (lo, hi) in predicates.items()}))
    return rep.id, rep.queue, rep.token


def publish(api: httpx.Client, stub, via: str, attrs: dict, payload) -> str:
    if via == "rest":
        r = api.post("/v1/messages", json={"attributes": attrs, "payload": payload})
        assert r.status_code == 202, r.text
        return r.json()["id"]
    return stub.Publish(pb.Message(attributes=attrs, payload=json.dumps(payload))).id


def receive(api: httpx.Client, stub, via: str, queue: str, token: str, n: int) -> list[dict]:
    """n deliveries over REST poll or the gRPC Listen stream, acked, as REST-shaped dicts."""
    got: list[dict] = []
    if via == "poll":
        deadline = time.monotonic() + 10
        while len(got) < n and time.monotonic() < deadline:
            r = api.get(f"/v1/queues/{queue}/messages", params={"max": 100, "wait": 2},
                        headers={"Authorization": f"Bearer {token}"})
            got += r.json()["messages"]
        api.post(f"/v1/queues/{queue}/ack", json={"receipts": [m["receipt"] for m in got]},
                 headers={"Authorization": f"Bearer {token}"})
        return got
    call = stub.Listen(pb.ListenRequest(queue=queue), metadata=md(token), timeout=15)
    for d in call:
        got.append({"id": d.id, "attributes": dict(d.attributes), "payload": json.loads(d.payload),
                    "subscriptions": list(d.subscriptions), "receipt": d.receipt})
        stub.Ack(pb.AckRequest(queue=queue, receipts=[d.receipt]), metadata=md(token))
        if len(got) == n:
            break
    call.cancel()
    return got


@pytest.mark.parametrize("sub_via,pub_via", [("rest", "grpc"), ("grpc", "rest")])
@pytest.mark.parametrize("recv_via", ["poll", "listen"])
def test_rest_and_grpc_are_interchangeable(api, stub, sub_via, pub_via, recv_via):
    sid, queue, token = subscribe(api, stub, sub_via, {"x0": (100, 350), "x2": (0, 25)})
    inside = publish(api, stub, pub_via, ATTRS, {"n": 1, "s": "é"})
    publish(api, stub, pub_via, {**ATTRS, "x0": 350}, {"n": 2})  # x0 = 350 is outside [100, 350)
    last = publish(api, stub, pub_via, {**ATTRS, "x2": 0}, [1, None])
    got = receive(api, stub, recv_via, queue, token, 2)
    assert [(m["id"], m["payload"], m["subscriptions"]) for m in got] == [
        (inside, {"n": 1, "s": "é"}, [sid]), (last, [1, None], [sid])]
    assert got[0]["attributes"] == {"x0": 120.5, "x1": 7, "x2": 3.25, "x3": 999}
    # Nothing else was delivered, and what was received was acked.
    auth = {"Authorization": f"Bearer {token}"}
    assert api.get(f"/v1/queues/{queue}/messages", params={"wait": 1}, headers=auth).json()["messages"] == []


def test_queue_and_subscription_lifecycle_over_grpc(api, stub):
    q = stub.CreateQueue(pb.CreateQueueRequest())
    sub = stub.Subscribe(pb.SubscribeRequest(queue=q.queue, predicates={"x1": pb.Range(low=-5, high=50)}),
                         metadata=md(q.token))
    assert sub.queue == q.queue and sub.token == ""
    got = stub.GetSubscription(pb.SubscriptionRef(id=sub.id), metadata=md(q.token))
    assert (got.id, got.queue, got.predicates["x1"].low, got.predicates["x1"].high) == (sub.id, q.queue, 0, 50)
    # The same subscription over REST.
    rest = api.get(f"/v1/subscriptions/{sub.id}", headers={"Authorization": f"Bearer {q.token}"}).json()
    assert rest == {"id": sub.id, "queue": q.queue, "predicates": {"x1": [0, 50]}}
    ids = stub.PublishBatch(pb.PublishBatchRequest(messages=[pb.Message(attributes={**ATTRS, "x1": v})
                                                             for v in (1, 60, 2)])).ids
    stream_ids = stub.PublishStream(iter([pb.Message(attributes={**ATTRS, "x1": v}, id=f"s-{v}-{q.queue}")
                                          for v in (3, 70)])).ids
    assert len(ids) == 3 and list(stream_ids) == [f"s-3-{q.queue}", f"s-70-{q.queue}"]
    polled = stub.Poll(pb.PollRequest(queue=q.queue, max=10, wait=2), metadata=md(q.token)).messages
    assert sorted(m.id for m in polled) == sorted([ids[0], ids[2], stream_ids[0]])
    assert all(m.payload == "" for m in polled)  # no payload: null
    stub.Unsubscribe(pb.SubscriptionRef(id=sub.id), metadata=md(q.token))
    stub.DeleteQueue(pb.DeleteQueueRequest(queue=q.queue), metadata=md(q.token))
    with pytest.raises(grpc.RpcError) as e:
        stub.Poll(pb.PollRequest(queue=q.queue), metadata=md(q.token))
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_publish_stream_many_messages_in_order(stub):
    n = 2500
    ids = stub.PublishStream(iter([pb.Message(attributes=ATTRS, id=f"ps-{time.time_ns()}-{i}") for i in range(n)]),
                             timeout=60).ids
    assert len(ids) == n and len(set(ids)) == n and ids[0].endswith("-0") and ids[-1].endswith(f"-{n - 1}")


# -- errors ------------------------------------------------------------------------------------
def rpc_error(fn, *args, **kw) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        fn(*args, **kw)
    return e.value


def check(err: grpc.RpcError, status: grpc.StatusCode, code: str, field: str | None = None) -> None:
    assert err.code() == status, err.details()
    meta = dict(err.trailing_metadata())
    assert meta["bluedove-error-code"] == code
    assert meta.get("bluedove-error-field") == field
    if field:
        assert err.details().startswith(f"{field}: ")


@pytest.fixture(scope="module")
def catalogue(cluster):
    r = sync_client(cluster.store_url)
    yield r
    r.close()


@pytest.fixture
def queue(stub):
    q = stub.CreateQueue(pb.CreateQueueRequest())
    return q.queue, q.token


BAD_SUBSCRIBE = [
    ({"x9": (0, 1)}, "predicates.x9"),
    ({"x0": (5, 5)}, "predicates.x0"),
    ({"x0": (float("nan"), 5)}, "predicates.x0[0]"),
    ({"x0": (0, float("inf"))}, "predicates.x0[1]"),
]


@pytest.mark.parametrize("preds,field", BAD_SUBSCRIBE)
def test_invalid_subscription_is_invalid_argument_and_stores_nothing(stub, catalogue, queue, preds, field):
    q, token = queue
    before = catalogue_size(catalogue)
    req = pb.SubscribeRequest(queue=q, predicates={k: pb.Range(low=lo, high=hi) for k, (lo, hi) in preds.items()})
    check(rpc_error(stub.Subscribe, req, metadata=md(token)), grpc.StatusCode.INVALID_ARGUMENT,
          "invalid_subscription", field)
    assert catalogue_size(catalogue) == before


BAD_MESSAGES = [
    (pb.Message(attributes={**ATTRS, "x2": 3000}), "invalid_message", "attributes.x2"),
    (pb.Message(attributes={k: v for k, v in ATTRS.items() if k != "x3"}), "invalid_message", "attributes.x3"),
    (pb.Message(attributes={**ATTRS, "y": 1}), "invalid_message", "attributes.y"),
    (pb.Message(attributes={**ATTRS, "x0": float("nan")}), "invalid_message", "attributes.x0"),
    (pb.Message(attributes=ATTRS, payload="{not json"), "invalid_message", "payload"),
    (pb.Message(attributes=ATTRS, id="bad id"), "invalid_message", "id"),
    (pb.Message(attributes=ATTRS, payload=json.dumps("x" * 300_000)), "payload_too_large", "payload"),
]


@pytest.mark.parametrize("msg,code,field", BAD_MESSAGES)
def test_invalid_message_is_invalid_argument(stub, msg, code, field):
    check(rpc_error(stub.Publish, msg), grpc.StatusCode.INVALID_ARGUMENT, code, field)
    check(rpc_error(stub.PublishBatch, pb.PublishBatchRequest(messages=[pb.Message(attributes=ATTRS), msg])),
          grpc.StatusCode.INVALID_ARGUMENT, code, f"messages[1].{field}")
    check(rpc_error(stub.PublishStream, iter([pb.Message(attributes=ATTRS), pb.Message(attributes=ATTRS), msg])),
          grpc.StatusCode.INVALID_ARGUMENT, code, f"messages[2].{field}")


def test_rejected_batch_publishes_nothing(stub, queue):
    q, token = queue
    stub.Subscribe(pb.SubscribeRequest(queue=q), metadata=md(token))
    bad = pb.PublishBatchRequest(messages=[pb.Message(attributes=ATTRS), pb.Message(attributes={**ATTRS, "x1": -1})])
    check(rpc_error(stub.PublishBatch, bad), grpc.StatusCode.INVALID_ARGUMENT, "invalid_message",
          "messages[1].attributes.x1")
    check(rpc_error(stub.PublishBatch, pb.PublishBatchRequest()), grpc.StatusCode.INVALID_ARGUMENT,
          "invalid_message", "messages")
    assert stub.Poll(pb.PollRequest(queue=q, wait=1), metadata=md(token)).messages == []


def test_bad_parameters_are_invalid_argument(stub, queue):
    q, token = queue
    for req, field in ((pb.PollRequest(queue=q, max=1001), "max"), (pb.PollRequest(queue=q, wait=21), "wait"),
                       (pb.PollRequest(queue=q, wait=-1), "wait")):
        check(rpc_error(stub.Poll, req, metadata=md(token)), grpc.StatusCode.INVALID_ARGUMENT,
              "invalid_parameter", field)
    check(rpc_error(stub.Ack, pb.AckRequest(queue=q, receipts=["1-0", "x"]), metadata=md(token)),
          grpc.StatusCode.INVALID_ARGUMENT, "invalid_ack", "receipts[1]")
    call = stub.Listen(pb.ListenRequest(queue=q, max=5000), metadata=md(token))
    check(rpc_error(lambda: next(call)), grpc.StatusCode.INVALID_ARGUMENT, "invalid_parameter", "max")


def test_tokens_are_unauthenticated_alike_for_missing_queues(stub, queue):
    q, token = queue
    for meta in ((), md("wrong"), (("authorization", f"Basic {token}"),)):
        for fn, req in ((stub.Poll, pb.PollRequest(queue=q)), (stub.Ack, pb.AckRequest(queue=q, receipts=["1-0"])),
                        (stub.DeleteQueue, pb.DeleteQueueRequest(queue=q)),
                        (stub.Subscribe, pb.SubscribeRequest(queue=q)),
                        (stub.GetSubscription, pb.SubscriptionRef(id="x")),
                        (stub.Unsubscribe, pb.SubscriptionRef(id="x"))):
            check(rpc_error(fn, req, metadata=meta), grpc.StatusCode.UNAUTHENTICATED, "unauthorized")
    missing = rpc_error(stub.Poll, pb.PollRequest(queue="no-such-queue"), metadata=md(token))
    wrong = rpc_error(stub.Poll, pb.PollRequest(queue=q), metadata=md("wrong"))
    assert (missing.code(), missing.details()) == (wrong.code(), wrong.details())
    call = stub.Listen(pb.ListenRequest(queue=q), metadata=md("wrong"))
    check(rpc_error(lambda: next(call)), grpc.StatusCode.UNAUTHENTICATED, "unauthorized")


def test_unknown_subscription_is_not_found(stub, queue):
    q, token = queue
    check(rpc_error(stub.GetSubscription, pb.SubscriptionRef(id="nope"), metadata=md(token)),
          grpc.StatusCode.NOT_FOUND, "not_found")
    check(rpc_error(stub.Unsubscribe, pb.SubscriptionRef(id="nope"), metadata=md(token)),
          grpc.StatusCode.NOT_FOUND, "not_found")


def test_health_and_reflection(channel):
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "bluedove.v1.PubSub"):
        assert (health.Check(health_pb2.HealthCheckRequest(service=service)).status
                == health_pb2.HealthCheckResponse.SERVING)
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    reply = next(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    names = {s.name for s in reply.list_services_response.service}
    assert {"bluedove.v1.PubSub", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= names


# -- a cluster of its own: two dispatchers on one gRPC port, small limits ----------------------
@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """2 matchers, 2 dispatchers sharing the ports; visibility 2 s, 3 subscriptions per queue."""
    mp = pytest.MonkeyPatch()
    mp.setenv("BLUEDOVE_VISIBILITY_TIMEOUT_S", "2")
    mp.setenv("BLUEDOVE_MAX_SUBSCRIPTIONS_PER_QUEUE", "3")
    try:
        c = start_cluster(tmp_path_factory.mktemp("small"), matchers=2, dispatchers=2)
    finally:
        mp.undo()
    yield c
    c.stop()
    assert_no_children(c)


def test_subscription_limit_is_resource_exhausted(small):
    with grpc.insecure_channel(small.grpc_address) as ch:
        stub = pb_grpc.PubSubStub(ch)
        q = stub.CreateQueue(pb.CreateQueueRequest())
        for _ in range(3):
            stub.Subscribe(pb.SubscribeRequest(queue=q.queue), metadata=md(q.token))
        check(rpc_error(stub.Subscribe, pb.SubscribeRequest(queue=q.queue), metadata=md(q.token)),
              grpc.StatusCode.RESOURCE_EXHAUSTED, "limit_exceeded", "queue")


def test_slow_listener_stalls_nothing_and_keeps_what_it_cannot_take(small):
    """A listener that reads one delivery and stops: publishing goes on at full pace, another
    queue gets everything, and every delivery the listener did not ack is still there."""
    n = 3000
    with grpc.insecure_channel(small.grpc_address) as ch, httpx.Client(base_url=small.url, timeout=30) as api:
        stub = pb_grpc.PubSubStub(ch)
        slow = stub.Subscribe(pb.SubscribeRequest())
        other = stub.Subscribe(pb.SubscribeRequest())
        listener = stub.Listen(pb.ListenRequest(queue=slow.queue, max=10), metadata=md(slow.token))
        stub.Publish(pb.Message(attributes=ATTRS, payload=json.dumps("first")))
        first = next(listener)  # ...and never reads again
        t0 = time.monotonic()
        payload = json.dumps("p" * 200)
        for start in range(0, n, 1000):
            stub.PublishBatch(pb.PublishBatchRequest(messages=[pb.Message(attributes=ATTRS, payload=payload)
                                                              for _ in range(1000)]), timeout=30)
        publish_s = time.monotonic() - t0
        got = receive(api, stub, "poll", other.queue, other.token, n + 1)
        assert len({m["id"] for m in got}) == n + 1
        assert publish_s < 20, f"publishing {n} took {publish_s:.1f}s behind a stalled listener"
        members = api.get("/v1/cluster").json()["members"]
        assert all(m["status"] == "alive" for m in members)
        listener.cancel()
        # Unacked (including what sat in the stalled stream) comes back after the visibility timeout.
        time.sleep(2.5)
        left: set[str] = set()
        auth = {"Authorization": f"Bearer {slow.token}"}
        while True:
            msgs = api.get(f"/v1/queues/{slow.queue}/messages", params={"max": 1000, "wait": 1},
                           headers=auth).json()["messages"]
            if not msgs:
                break
            left |= {m["id"] for m in msgs}
            api.post(f"/v1/queues/{slow.queue}/ack", json={"receipts": [m["receipt"] for m in msgs]}, headers=auth)
        assert first.id in left and len(left) == n + 1


def test_dispatchers_share_the_grpc_port(small):
    """Both dispatchers serve gRPC on the cluster's one port (SO_REUSEPORT); calls work."""
    for name in ("d1", "d2"):
        assert small.child(name).alive()
        assert f"gRPC API on {small.grpc_address}" in small.child(name).log_path.read_text()
    for _ in range(6):
        with grpc.insecure_channel(small.grpc_address) as ch:
            assert pb_grpc.PubSubStub(ch).CreateQueue(pb.CreateQueueRequest()).token
