"""A typed space over gRPC, the SDK and the CLI (docs/api.md, "gRPC", "Python SDK", "Command
line"), on real processes: messages published over gRPC with typed `values`, subscriptions made
over gRPC with `filter_json` (and over REST), deliveries read by gRPC Poll, gRPC Listen and REST
polls — every (queue, message) pair the oracle names, nothing else, each carrying its attributes
typed as published; the SDK over both transports with keyword filters; the CLI's --where and
--attr; gRPC errors naming the field."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import grpc
import httpx
import pytest

from bluedove.client import Client
from bluedove.client.grpc_transport import delivery_json, message_pb
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import compare, oracle
from tests.integration.test_typed_delivery import EXACT, SPACE_YAML, random_filter, random_order

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def typed(tmp_path_factory):
    """A 2-matcher cluster over test_typed_delivery's orders space."""
    tmp = tmp_path_factory.mktemp("typed_grpc")
    (tmp / "space.yaml").write_text(SPACE_YAML)
    c = start_cluster(tmp, matchers=2, space_file=str(tmp / "space.yaml"))
    yield c
    c.stop()
    assert_no_children(c)


def md(token: str) -> tuple:
    return (("authorization", f"Bearer {token}"),)


def grpc_drain(stub: pb_grpc.PubSubStub, q: str, tok: str) -> list[dict]:
    """Every delivery of queue q by gRPC Poll, acked, until two polls in a row find none."""
    got: list[dict] = []
    empty = 0
    while empty < 2:
        r = stub.Poll(pb.PollRequest(queue=q, max=1000, wait=1), metadata=md(tok), timeout=30)
        if r.messages:
            stub.Ack(pb.AckRequest(queue=q, receipts=[m.receipt for m in r.messages]), metadata=md(tok), timeout=30)
        got += [delivery_json(m) for m in r.messages]
        empty = 0 if r.messages else empty + 1
    return got


def test_grpc_publish_subscribe_poll_and_listen_are_exact_and_typed(typed):
    rng = random.Random(20260601)
    with grpc.insecure_channel(typed.grpc_address) as ch, httpx.Client(base_url=typed.url, timeout=30) as api:
        stub = pb_grpc.PubSubStub(ch)
        queues = {}
        for _ in range(8):
            r = stub.CreateQueue(pb.CreateQueueRequest(), timeout=30)
            queues[r.queue] = r.token
        subs: dict[str, tuple[str, dict]] = {}
        for i in range(80):
            q = rng.choice(list(queues))
            preds = random_filter(rng)
            if i % 4:
                sid = stub.Subscribe(pb.SubscribeRequest(queue=q, filter_json=json.dumps(preds)),
                                     metadata=md(queues[q]), timeout=30).id
                rest = api.get(f"/v1/subscriptions/{sid}", headers={"Authorization": f"Bearer {queues[q]}"})
                info = stub.GetSubscription(pb.SubscriptionRef(id=sid), metadata=md(queues[q]), timeout=30)
                assert json.loads(info.filter_json) == rest.json()["predicates"] == preds
            else:
                r = api.post("/v1/subscriptions", json={"queue": q, "predicates": preds},
                             headers={"Authorization": f"Bearer {queues[q]}"})
                assert r.status_code == 201, r.text
                sid = r.json()["id"]
            subs[sid] = (q, preds)
        orders = {f"g-{i}": random_order(rng) for i in range(300)}
        msgs = [message_pb({"attributes": a, "id": mid, "payload": {"i": mid}}) for mid, a in orders.items()]
        for m in msgs[:50]:
            stub.Publish(m, timeout=30)
        stub.PublishBatch(pb.PublishBatchRequest(messages=msgs[50:200]), timeout=30)
        stub.PublishStream(iter([pb.PublishStreamRequest(messages=msgs[200:280])] +
                                [pb.PublishStreamRequest(attributes=m.attributes, values=m.values, id=m.id,
                                                         payload=m.payload) for m in msgs[280:]]), timeout=30)
        listened = list(queues)[:2]
        got = [(q, m) for q in list(queues)[2:] for m in grpc_drain(stub, q, queues[q])]
        for q in listened:  # Listen until as many arrived as the oracle says, then the queue is empty
            want = sum(1 for (qq, _) in oracle(typed.space, subs, orders) if qq == q)
            call = stub.Listen(pb.ListenRequest(queue=q), metadata=md(queues[q]), timeout=60)
            for n, d in enumerate(call, 1):
                got.append((q, delivery_json(d)))
                stub.Ack(pb.AckRequest(queue=q, receipts=[d.receipt]), metadata=md(queues[q]), timeout=30)
                if n == want:
                    call.cancel()
                    break
            assert not grpc_drain(stub, q, queues[q])
    expected = oracle(typed.space, subs, orders)
    assert len(expected) > 100
    assert compare(expected, got) == EXACT
    for _, m in got:
        sent = orders[m["id"]]
        assert m["attributes"] == sent and m["payload"] == {"i": m["id"]}
        assert {k: type(v) for k, v in m["attributes"].items()} == \
            {k: float if k == "amount" else type(v) for k, v in sent.items()}


@pytest.mark.parametrize("url_of", [lambda c: c.url, lambda c: f"grpc://{c.grpc_address}"], ids=["rest", "grpc"])
def test_the_sdk_filters_by_keyword_and_reads_typed_values_over_both_transports(typed, url_of):
    other = url_of(typed).startswith("grpc") and typed.url or f"grpc://{typed.grpc_address}"
    p = "g" if url_of(typed).startswith("grpc") else "r"  # ids: a publisher's id is published once
    with Client(url_of(typed)) as c, Client(other) as publisher:
        q = c.create_queue()
        sub = c.subscribe(q, region="eu-west-1", amount=(10, 500), sku={"prefix": "EL-"}, express=True)
        assert sub.predicates == {"region": "eu-west-1", "amount": [10, 500], "sku": {"prefix": "EL-"},
                                  "express": True}
        base = {"status": "paid", "region": "eu-west-1", "sku": "EL-1", "amount": 20, "express": True}
        publisher.publish(base, "yes", id=f"{p}-sdk-1")
        publisher.publish({**base, "express": False}, "no", id=f"{p}-sdk-2")
        c.publish({**base, "sku": "HO-1"}, "no", id=f"{p}-sdk-3")
        c.publish({**base, "coupon": "É"}, "yes", id=f"{p}-sdk-4")
        got = {d.id: d for d in q.deliveries(wait=5, max=100)}
        assert sorted(got) == [f"{p}-sdk-1", f"{p}-sdk-4"]
        assert got[f"{p}-sdk-4"].attributes == {**base, "amount": 20.0, "coupon": "É"}
        assert type(got[f"{p}-sdk-4"].attributes["express"]) is bool
        q.ack(got.values())
        c.update_subscription(sub, {"any_of": [{"sku": {"suffix": "-9"}}, {"coupon": {"exists": True}}]})
        assert c.get_subscription(sub.id, q).predicates == sub.predicates == \
            {"any_of": [{"sku": {"suffix": "-9"}}, {"coupon": {"exists": True}}]}
        publisher.publish({**base, "sku": "ZZ-9"}, id=f"{p}-sdk-5")
        publisher.publish(base, id=f"{p}-sdk-6")
        assert [d.id for d in q.deliveries(wait=5, max=100)] == [f"{p}-sdk-5"]


def bluedove(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "bluedove", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_the_cli_subscribes_with_where_and_publishes_with_attr(typed, scheme):
    url = typed.url if scheme == "http" else f"grpc://{typed.grpc_address}"
    sub = json.loads(bluedove("subscribe", "--url", url, "--where", "region=eu-west-1", "--where", "amount=0:100",
                              "--where", "sku^=AB", "--where", "coupon!?", "--where", "status=paid|placed"))
    attrs = ["--attr", "region=eu-west-1", "--attr", "sku=AB-7", "--attr", "status=paid", "--attr", "express=true"]
    bluedove("publish", "--url", url, *attrs, "--attr", "amount=50", "--id", f"cli-{scheme}-1")
    bluedove("publish", "--url", url, *attrs, "--attr", "amount=150", "--id", f"cli-{scheme}-2")
    bluedove("publish", "--url", url, *attrs, "--attr", "amount=5", "--attr", "coupon=X", "--id", f"cli-{scheme}-3")
    out = bluedove("poll", sub["queue"], "--url", url, "--token", sub["token"], "--wait", "5", "--ack")
    [line] = out.splitlines()
    assert json.loads(line)["id"] == f"cli-{scheme}-1"
    assert json.loads(line)["attributes"] == {"status": "paid", "region": "eu-west-1", "sku": "AB-7", "amount": 50.0,
                                              "express": True}
    out = bluedove("resubscribe", sub["id"], "--url", url, "--token", sub["token"], "--where", "express=true",
                   "--where", "amount>=100")
    assert json.loads(out)["predicates"] == {"express": True, "amount": {"gte": 100}}


def test_grpc_errors_name_the_field(typed):
    good = {"status": "paid", "region": "r", "sku": "s", "amount": 1}
    cases = [
        ("Publish", pb.Message(values={**message_pb({"attributes": good}).values, "amount": pb.Value(text="1")}),
         "attributes.amount"),
        ("Publish", pb.Message(attributes={"amount": 1}, values={**message_pb({"attributes": good}).values,
                                                                 "amount": pb.Value(number=1)}), "attributes.amount"),
        ("PublishBatch", pb.PublishBatchRequest(messages=[message_pb({"attributes": good}),
                                                          pb.Message(values={"express": pb.Value()})]),
         "messages[1].attributes.express"),
        ("Subscribe", pb.SubscribeRequest(predicates={"amount": pb.Range(low=0, high=1)}, filter_json="{}"),
         "filter_json"),
        ("Subscribe", pb.SubscribeRequest(filter_json='{"express": {"in": [true]}}'), "predicates.express.in"),
        ("Subscribe", pb.SubscribeRequest(filter_json='{"sku": '), "filter_json"),
        ("SubscribeBatch", pb.SubscribeBatchRequest(subscriptions=[pb.SubscribeRequest(filter_json="{}"),
                                                                   pb.SubscribeRequest(filter_json="[]")]),
         "subscriptions[1].filter_json"),
    ]
    with grpc.insecure_channel(typed.grpc_address) as ch:
        stub = pb_grpc.PubSubStub(ch)
        for method, req, field in cases:
            with pytest.raises(grpc.RpcError) as e:
                getattr(stub, method)(req, timeout=30)
            meta = dict(e.value.trailing_metadata())
            assert (e.value.code(), meta["bluedove-error-field"]) == (grpc.StatusCode.INVALID_ARGUMENT, field), \
                (method, e.value.details())
            assert e.value.details().startswith(f"{field}: ")


def test_get_space_answers_the_typed_schema_as_rest_does(typed):
    with grpc.insecure_channel(typed.grpc_address) as ch, httpx.Client(base_url=typed.url, timeout=30) as api:
        got = pb_grpc.PubSubStub(ch).GetSpace(pb.GetSpaceRequest(), timeout=30)
        rest = api.get("/v1/space").json()
    assert list(got.partition) == rest["partition"]
    assert [d.name for d in got.dimensions] == [d["name"] for d in rest["dimensions"]]
    attrs = [{"name": a.name, "type": a.type, **({"min": a.min, "max": a.max} if a.type == "number" else {}),
              **({"optional": True} if a.optional else {})} for a in got.attributes]
    assert attrs == rest["attributes"]


def test_the_openapi_describes_predicates_by_the_space_s_schema(typed):
    import jsonschema

    doc = httpx.get(f"{typed.url}/openapi.json", timeout=30).json()
    schema = doc["components"]["schemas"]["Predicates"]
    body = doc["paths"]["/v1/subscriptions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["predicates"] == {"$ref": "#/components/schemas/Predicates"}
    put = doc["paths"]["/v1/subscriptions/{sub_id}"]["put"]["requestBody"]["content"]["application/json"]["schema"]
    assert put["properties"]["predicates"] == {"$ref": "#/components/schemas/Predicates"}
    space = httpx.get(f"{typed.url}/v1/space", timeout=30).json()
    assert set(schema["properties"]) == {a["name"] for a in space["attributes"]} | {"any_of"}
    check = jsonschema.Draft202012Validator(schema)
    rng = random.Random(7)
    for _ in range(50):  # filters the server accepts fit; a shape it refuses does not
        assert check.is_valid(random_filter(rng))
    assert not check.is_valid({"no_such_attribute": 1})
