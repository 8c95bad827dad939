"""The queue side against hostile or careless clients, on real processes (REST and gRPC): a
stored delivery that cannot be rendered never breaks a poll, receipts are validated as stream
ids before they reach Redis, and a receipt acks only on the queue that issued it."""

from __future__ import annotations

import json
import re

import grpc
import httpx
import pytest

from bluedove.store import keys as K
from bluedove.store.client import sync_client
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.helpers import new_queue

pytestmark = pytest.mark.integration

# A message text a dispatcher stored for the payload "a\ud800b" before payloads were strict: a
# lone surrogate written out as UTF-8 bytes, which no UTF-8 decoder takes.
BAD = b'{"id":"bad","attributes":{"x0":1.5},"payload":"a\xed\xa0\x80b","published_at":"2026-11-22T00:00:00Z"}'
# Past what any stream id part holds (2^64 - 1): Redis answers "ERR Invalid stream ID".
HUGE = "99999999999999999999-99999999999999999999"
MAX = "18446744073709551615-18446744073709551615"


def good(mid: str) -> str:
    return json.dumps({"id": mid, "attributes": {"x0": 1.5}, "payload": {"n": mid},
                       "published_at": "2026-11-22T00:00:00Z"})


@pytest.fixture
def raw(cluster):
    """A client of the cluster's store that writes bytes as they are."""
    r = sync_client(cluster.store_url, decode_responses=False)
    yield r
    r.close()


@pytest.fixture(scope="module")
def stub(cluster):
    with grpc.insecure_channel(cluster.grpc_address) as ch:
        yield pb_grpc.PubSubStub(ch)


def md(headers: dict) -> tuple:
    return (("authorization", headers["Authorization"]),)


def poisoned_queue(api: httpx.Client, raw) -> tuple[str, dict]:
    """A queue holding m0, a delivery stored with bytes that are not UTF-8, and m1, written
    straight into its stream as a matcher writes deliveries (an old dispatcher let it through)."""
    q, headers = new_queue(api)
    for m in (good("m0"), BAD, good("m1")):
        raw.xadd(K.queue_stream(q), {"m": m, "s": '["s1"]'})
    return q, headers


def undeliverable(api: httpx.Client) -> float | None:
    """bluedove_undeliverable_total as the dispatcher exposes it (None: not exposed)."""
    found = re.search(r"^bluedove_undeliverable_total (\S+)$", api.get("/metrics").text, re.M)
    return float(found[1]) if found else None


def test_a_rest_poll_answers_the_rest_of_a_batch_holding_an_undeliverable_delivery(api, raw):
    """Before: every poll that would include it answered 500 (UnicodeDecodeError rendering
    it), the batch handed out lost to the client until the visibility timeout, and again
    after every timeout: one bad delivery stopped the queue."""
    q, headers = poisoned_queue(api, raw)
    before = undeliverable(api)
    r = api.get(f"/v1/queues/{q}/messages", params={"max": 10}, headers=headers)
    assert r.status_code == 200, r.text
    got = r.json()["messages"]
    assert [m["id"] for m in got] == ["m0", "m1"]
    assert before is not None and undeliverable(api) == before + 1
    assert api.get(f"/v1/queues/{q}", headers=headers).json()["depth"] == 2  # the bad one is gone
    r = api.post(f"/v1/queues/{q}/ack", json={"receipts": [m["receipt"] for m in got]}, headers=headers)
    assert r.status_code == 204 and api.get(f"/v1/queues/{q}", headers=headers).json()["depth"] == 0


def test_a_grpc_poll_and_a_listen_stream_answer_the_rest(api, raw, stub):
    """Before: Poll answered UNKNOWN, and a Listen stream ended with UNKNOWN at its first read."""
    q, headers = poisoned_queue(api, raw)
    got = stub.Poll(pb.PollRequest(queue=q, max=10), metadata=md(headers), timeout=15)
    assert [d.id for d in got.messages] == ["m0", "m1"]
    q, headers = poisoned_queue(api, raw)
    call = stub.Listen(pb.ListenRequest(queue=q), metadata=md(headers), timeout=15)
    ids = [next(call).id, next(call).id]
    call.cancel()
    assert ids == ["m0", "m1"]


@pytest.mark.parametrize("receipts, field", [([HUGE], "receipts[0]"), ([MAX, "1-" + "9" * 20], "receipts[1]"),
                                             (["18446744073709551616-0"], "receipts[0]")])
def test_a_receipt_out_of_a_stream_ids_range_is_a_422_naming_it(api, stub, receipts, field):
    """Before: it reached Redis ("ERR Invalid stream ID"): 500 over REST, UNKNOWN with the
    script's text over gRPC."""
    q, headers = new_queue(api)
    r = api.post(f"/v1/queues/{q}/ack", json={"receipts": receipts}, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_ack" and r.json()["error"]["field"] == field
    with pytest.raises(grpc.RpcError) as e:
        stub.Ack(pb.AckRequest(queue=q, receipts=receipts), metadata=md(headers), timeout=15)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert dict(e.value.trailing_metadata())["bluedove-error-field"] == field


def test_the_largest_stream_id_is_a_receipt(api, raw, stub):
    """2^64 - 1 in both parts is a stream id Redis takes: acked (nothing), not refused."""
    q, headers = new_queue(api)
    raw.xadd(K.queue_stream(q), {"m": good("m0"), "s": '["s1"]'})
    (m,) = api.get(f"/v1/queues/{q}/messages", headers=headers).json()["messages"]
    tag = m["receipt"].partition(".")[2]
    receipts = [MAX, f"{MAX}.{tag}" if tag else MAX]
    assert api.post(f"/v1/queues/{q}/ack", json={"receipts": receipts}, headers=headers).status_code == 204
    stub.Ack(pb.AckRequest(queue=q, receipts=receipts), metadata=md(headers), timeout=15)
    assert api.get(f"/v1/queues/{q}", headers=headers).json()["depth"] == 1


@pytest.mark.parametrize("via", ["rest", "grpc"])
def test_a_receipt_of_one_queue_acks_nothing_on_another(api, raw, stub, via):
    """Before: a receipt was the bare stream entry id, and two queues' streams can hold the
    same id (written in the same millisecond): acking queue A's receipt on queue B acked B's
    delivery, which B's reader then never got."""
    a, a_headers = new_queue(api)
    b, b_headers = new_queue(api)
    raw.xadd(K.queue_stream(a), {"m": good("a0"), "s": '["s1"]'})
    (da,) = api.get(f"/v1/queues/{a}/messages", headers=a_headers).json()["messages"]
    entry_id = da["receipt"].partition(".")[0]
    raw.xadd(K.queue_stream(b), {"m": good("b0"), "s": '["s1"]'}, id=entry_id)  # the same id in B
    (db,) = api.get(f"/v1/queues/{b}/messages", headers=b_headers).json()["messages"]
    if via == "rest":
        r = api.post(f"/v1/queues/{b}/ack", json={"receipts": [da["receipt"]]}, headers=b_headers)
        assert r.status_code == 204, r.text  # harmless, as an unknown receipt is
    else:
        stub.Ack(pb.AckRequest(queue=b, receipts=[da["receipt"]]), metadata=md(b_headers), timeout=15)
    assert api.get(f"/v1/queues/{b}", headers=b_headers).json()["depth"] == 1
    assert api.post(f"/v1/queues/{b}/ack", json={"receipts": [db["receipt"]]}, headers=b_headers).status_code == 204
    assert api.get(f"/v1/queues/{b}", headers=b_headers).json()["depth"] == 0


def test_the_dead_letter_401_says_how_the_queue_token_travels(api):
    """With API keys on, the queue token travels in X-Queue-Token, not as the bearer token:
    the message named only the bearer token."""
    dlq, _ = new_queue(api)
    r = api.post("/v1/queues", json={"dead_letter": {"queue": dlq, "max_deliveries": 3}})
    assert r.status_code == 401 and r.json()["error"]["field"] == "dead_letter.queue"
    message = r.json()["error"]["message"]
    assert "Authorization: Bearer" in message and "X-Queue-Token" in message, message
