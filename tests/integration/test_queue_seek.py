"""Seeking a queue that keeps acked deliveries (`retain_acked_s`), on real processes: a cluster of
its own (redis-server, matchers, a dispatcher; a visibility timeout of 2 s) over REST, gRPC, the
SDK and the CLI; and the store's scripts alone against a real redis-server (or a Redis Cluster
with --store-kind cluster): its count of what is not yet acked, and its trim of old acked
deliveries."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timezone

import grpc
import httpx
import pytest

from bluedove.client import Client
from bluedove.core.queue_bounds import QueueBounds
from bluedove.store import keys as K
from bluedove.store.client import sync_client
from bluedove.store.store import StoreLimits
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.store_fixtures import message

pytestmark = pytest.mark.integration
ATTRS = {"x0": 120.5, "x1": 7, "x2": 3.25, "x3": 999}
VISIBILITY_S = 2


@pytest.fixture(scope="module")
def seeker(tmp_path_factory):
    """A 2-matcher cluster whose deliveries come back 2 s after they are handed out unacked."""
    c = start_cluster(tmp_path_factory.mktemp("seek"), matchers=2,
                      child_env={"BLUEDOVE_VISIBILITY_TIMEOUT_S": str(VISIBILITY_S)})
    yield c
    c.stop()
    assert_no_children(c)


@pytest.fixture
def api(seeker):
    with httpx.Client(base_url=seeker.url, timeout=30) as client:
        yield client


@pytest.fixture
def raw(seeker):
    """A client of the cluster's store, to read a queue's state as it is."""
    r = sync_client(seeker.store_url)
    yield r
    r.close()


# -- helpers ----------------------------------------------------------------------------------
def queue(api: httpx.Client, body: dict | None = None) -> tuple[str, dict]:
    """A new queue (with `body`'s bounds) subscribed to every message; (id, its auth header)."""
    r = api.post("/v1/queues", json=body) if body is not None else api.post("/v1/queues")
    assert r.status_code == 201, r.text
    q, auth = r.json()["queue"], {"Authorization": f"Bearer {r.json()['token']}"}
    s = api.post("/v1/subscriptions", json={"queue": q, "predicates": {}}, headers=auth)
    assert s.status_code == 201, s.text
    return q, auth


def publish(api: httpx.Client, ids: list[str]) -> list[str]:
    """One message after the other (so stored in this order: a batch's go in parallel)."""
    for i in ids:
        r = api.post("/v1/messages", json={"attributes": ATTRS, "id": i})
        assert r.status_code == 202, r.text
    return ids


def names(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:8]
    return [f"{tag}-{i}" for i in range(n)]


def poll(api: httpx.Client, q: str, auth: dict, most: int = 1000) -> list[dict]:
    r = api.get(f"/v1/queues/{q}/messages", params={"max": most}, headers=auth)
    assert r.status_code == 200, r.text
    return r.json()["messages"]


def ack(api: httpx.Client, q: str, auth: dict, msgs: list[dict]) -> None:
    if msgs:
        r = api.post(f"/v1/queues/{q}/ack", json={"receipts": [m["receipt"] for m in msgs]}, headers=auth)
        assert r.status_code == 204, r.text


def drain(api: httpx.Client, q: str, auth: dict) -> list[str]:
    """Every delivery there now, acked at once (well within the visibility timeout); their ids."""
    out: list[str] = []
    while msgs := poll(api, q, auth):
        ack(api, q, auth, msgs)
        out += [m["id"] for m in msgs]
    return out


def seek(api: httpx.Client, q: str, auth: dict, body) -> httpx.Response:
    return api.post(f"/v1/queues/{q}/seek", json=body, headers=auth)


def redeliverable(api: httpx.Client, q: str, auth: dict, body) -> int:
    r = seek(api, q, auth, body)
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"redeliverable"}
    return int(r.json()["redeliverable"])


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def cut() -> int:
    """A time between what was stored before the call and what is stored after it."""
    time.sleep(0.05)
    at = now_ms()
    time.sleep(0.05)
    return at


def info(api: httpx.Client, q: str, auth: dict) -> dict:
    r = api.get(f"/v1/queues/{q}", headers=auth)
    assert r.status_code == 200, r.text
    return r.json()


# -- REST -------------------------------------------------------------------------------------
def test_after_acking_everything_a_seek_hands_out_exactly_what_was_stored_from_then_on_once(api):
    q, auth = queue(api, {"retain_acked_s": 3600})
    early = publish(api, names(5))
    at = cut()
    late = publish(api, names(5))
    assert sorted(drain(api, q, auth)) == sorted(early + late)
    assert info(api, q, auth)["depth"] == 0
    rfc3339 = datetime.fromtimestamp(at / 1000, timezone.utc).isoformat().replace("+00:00", "Z")
    assert redeliverable(api, q, auth, {"time": rfc3339}) == 5
    assert info(api, q, auth)["depth"] == 5
    assert sorted(drain(api, q, auth)) == sorted(late)  # each once; the earlier ones never
    assert poll(api, q, auth) == []
    # the same by epoch ms, and to a time before all of them
    assert redeliverable(api, q, auth, {"time": at}) == 5
    assert sorted(drain(api, q, auth)) == sorted(late)
    assert redeliverable(api, q, auth, {"time": 0}) == 10
    assert sorted(drain(api, q, auth)) == sorted(early + late)
    # forward again: what is before counts as acked, even the deliveries never handed out since
    assert redeliverable(api, q, auth, {"time": at}) == 5
    assert info(api, q, auth)["depth"] == 5
    assert sorted(drain(api, q, auth)) == sorted(late)


def test_a_seek_by_receipt_starts_at_the_delivery_it_names(api):
    q, auth = queue(api, {"retain_acked_s": 3600})
    ids = publish(api, names(6))
    got = poll(api, q, auth)
    ack(api, q, auth, got)
    assert redeliverable(api, q, auth, {"receipt": got[2]["receipt"]}) == 4
    again = poll(api, q, auth)
    assert [m["id"] for m in again] == ids[2:]
    ack(api, q, auth, again)
    assert poll(api, q, auth) == []


def test_get_shows_retain_acked_s_and_a_queue_without_it_keeps_nothing(api):
    q, auth = queue(api, {"retain_acked_s": 90, "retention_s": 3600})
    assert (info(api, q, auth)["retain_acked_s"], info(api, q, auth)["retention_s"]) == (90, 3600)
    plain, plain_auth = queue(api)
    assert info(api, plain, plain_auth)["retain_acked_s"] == 0
    publish(api, names(2))
    assert len(drain(api, plain, plain_auth)) == 2
    r = seek(api, plain, plain_auth, {"time": 0})
    assert r.status_code == 422 and r.json()["error"]["field"] == "time", r.text
    assert "retain_acked_s" in r.json()["error"]["message"]


def test_a_seek_racing_new_deliveries_loses_none_and_hands_out_none_twice(api, seeker):
    """Messages published without pause while the queue is polled, acked and sought to T again
    and again: after the last seek every one published after T is handed out exactly once,
    those it found written and those written after it alike, and none published before T."""
    q, auth = queue(api, {"retain_acked_s": 3600})
    before = publish(api, names(20))
    drain(api, q, auth)
    at = cut()
    tag, published, stop = uuid.uuid4().hex[:8], [], threading.Event()
    errors: list[str] = []

    def publisher() -> None:
        with httpx.Client(base_url=seeker.url, timeout=30) as c:
            i = 0
            while not stop.is_set():
                ids = [f"{tag}-{i + k}" for k in range(5)]
                r = c.post("/v1/messages:batch", json={"messages": [{"attributes": ATTRS, "id": x} for x in ids]})
                if r.status_code != 202:
                    errors.append(r.text)
                published.extend(ids)
                i += 5

    thread = threading.Thread(target=publisher)
    thread.start()
    try:
        counts = []
        for _ in range(25):
            got = poll(api, q, auth, 50)
            ack(api, q, auth, got[::2])  # half acked, half left handed out
            counts.append(redeliverable(api, q, auth, {"time": at}))
            time.sleep(0.02)
        known = len(published)
        last = redeliverable(api, q, auth, {"time": at})
        time.sleep(0.3)  # more written after the last seek
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors[:3]
    assert last >= known and counts == sorted(counts)
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while len(seen) < len(published) and time.monotonic() < deadline:
        seen += drain(api, q, auth)
        time.sleep(0.05)
    seen += drain(api, q, auth)
    assert Counter(seen) == Counter(published)  # every one once, none of `before`
    assert not set(seen) & set(before)


def test_a_seek_wakes_the_polls_parked_on_the_queue(api, seeker):
    q, auth = queue(api, {"retain_acked_s": 3600})
    ids = publish(api, names(2))
    drain(api, q, auth)
    out: dict = {}

    def parked() -> None:
        with httpx.Client(base_url=seeker.url, timeout=30) as c:
            t0 = time.monotonic()
            r = c.get(f"/v1/queues/{q}/messages", params={"wait": 15}, headers=auth)
            out.update(took=time.monotonic() - t0, ids=[m["id"] for m in r.json()["messages"]])

    thread = threading.Thread(target=parked)
    thread.start()
    time.sleep(0.5)
    assert redeliverable(api, q, auth, {"time": 0}) == 2
    thread.join(20)
    assert sorted(out["ids"]) == sorted(ids) and out["took"] < 5, out


def test_a_delivery_handed_out_and_unacked_at_the_seek_comes_back_once(api):
    q, auth = queue(api, {"retain_acked_s": 3600})
    at = cut()
    ids = publish(api, names(3))
    assert sorted(m["id"] for m in poll(api, q, auth)) == sorted(ids)  # handed out, never acked
    assert redeliverable(api, q, auth, {"time": at}) == 3
    time.sleep(VISIBILITY_S + 0.5)  # the first hand-out's visibility timeout passes
    assert sorted(m["id"] for m in poll(api, q, auth)) == sorted(ids)  # once each, not twice
    # handed out again by the seek and acked: the first hand-out never comes back either
    assert poll(api, q, auth) == []
    assert redeliverable(api, q, auth, {"time": at}) == 3
    ack(api, q, auth, poll(api, q, auth))
    time.sleep(VISIBILITY_S + 0.5)
    assert poll(api, q, auth) == []
    assert info(api, q, auth)["depth"] == 0


def test_the_cap_counts_only_the_deliveries_not_yet_acked_on_a_queue_that_keeps_acked_ones(api):
    q, auth = queue(api, {"max_undelivered": 3, "retain_acked_s": 3600})
    a = publish(api, names(4))
    assert (info(api, q, auth)["depth"], info(api, q, auth)["dropped"]) == (3, 1)
    got = poll(api, q, auth)
    assert [m["id"] for m in got] == a[:3]
    ack(api, q, auth, got[:2])  # kept, but no longer counted
    assert info(api, q, auth)["depth"] == 1
    b = publish(api, names(3))
    state = info(api, q, auth)
    assert (state["depth"], state["dropped"]) == (3, 2)  # two taken, the third refused
    assert [m["id"] for m in poll(api, q, auth)] == b[:2]
    # sought back, the acked ones count again: 5 not acked, over the cap, so the next is refused
    assert redeliverable(api, q, auth, {"time": 0}) == 5
    publish(api, names(1))
    assert (info(api, q, auth)["depth"], info(api, q, auth)["dropped"]) == (5, 3)
    assert sorted(drain(api, q, auth)) == sorted(a[:3] + b[:2])
    assert info(api, q, auth)["depth"] == 0
    publish(api, names(3))
    assert info(api, q, auth)["depth"] == 3


def test_acked_deliveries_older_than_retain_acked_s_are_gone(api):
    q, auth = queue(api, {"retain_acked_s": 1})
    old = publish(api, names(3))
    drain(api, q, auth)
    unacked = publish(api, names(1))  # never handed out: kept until acked, however old
    time.sleep(1.3)
    assert redeliverable(api, q, auth, {"time": 0}) == 1  # the seek itself drops the old acked ones
    assert sorted(drain(api, q, auth)) == sorted(unacked)
    # and a write trims them without any seek: only what is younger than 1 s comes back
    more = publish(api, names(2))
    drain(api, q, auth)
    time.sleep(1.3)
    fresh = publish(api, names(1))
    drain(api, q, auth)
    assert redeliverable(api, q, auth, {"time": 0}) == 1
    assert sorted(drain(api, q, auth)) == sorted(fresh)
    assert not set(old + more) & set(fresh)


def _state(raw, q: str) -> tuple:
    """Everything a seek could change: the stream, its group and pending list, the hash."""
    s = K.queue_stream(q)
    pending = [(p["message_id"], p["times_delivered"]) for p in raw.xpending_range(s, "g", "-", "+", 100)]
    return raw.xrange(s), raw.xinfo_groups(s), pending, raw.hgetall(K.queue_hash(q))


BAD_SEEKS = [
    ({}, "time"),
    (None, "time"),
    ({"time": "yesterday"}, "time"),
    ({"time": "2026-11-27"}, "time"),
    ({"time": "2026-11-27T09:00:00"}, "time"),  # no zone
    ({"time": 1.5}, "time"),
    ({"time": True}, "time"),
    ({"time": None}, "time"),
    ({"time": "2999-01-01T00:00:00Z"}, "time"),  # the future
    ({"time": 10**15}, "time"),
    ({"receipt": "nope"}, "receipt"),
    ({"receipt": "1-0"}, "receipt"),  # untagged: no queue's
    ({"receipt": 5}, "receipt"),
    ({"time": 0, "receipt": "1-0"}, "receipt"),
    ({"time": 0, "at": 1}, "at"),
    ([0], "body"),
]


@pytest.mark.parametrize("body,field", BAD_SEEKS)
def test_a_bad_seek_is_a_422_naming_the_field_and_changes_nothing(api, raw, body, field):
    q, auth = queue(api, {"retain_acked_s": 3600})
    publish(api, names(3))
    got = poll(api, q, auth, 2)
    ack(api, q, auth, got[:1])  # one acked, one handed out, one waiting
    before = _state(raw, q)
    r = api.post(f"/v1/queues/{q}/seek", headers=auth,
                 **({"content": b""} if body is None else {"json": body}))
    assert r.status_code == 422, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["field"]) == ("invalid_request", field)
    assert _state(raw, q) == before


def test_another_queues_receipt_a_future_one_and_a_queue_keeping_nothing_are_422(api, raw):
    q, auth = queue(api, {"retain_acked_s": 3600})
    other, other_auth = queue(api, {"retain_acked_s": 3600})
    plain, plain_auth = queue(api)
    publish(api, names(1))
    mine, theirs = poll(api, q, auth)[0]["receipt"], poll(api, other, other_auth)[0]["receipt"]
    ms, tag = mine.split("-")[0], mine.split(".")[1]
    before = _state(raw, q)
    for body, field in (({"receipt": theirs}, "receipt"), ({"receipt": f"{int(ms) + 10**9}-0.{tag}"}, "receipt")):
        r = seek(api, q, auth, body)
        assert (r.status_code, r.json()["error"]["field"]) == (422, field), r.text
    assert _state(raw, q) == before
    plain_receipt = poll(api, plain, plain_auth)[0]["receipt"]
    for body, field in (({"time": 0}, "time"), ({"receipt": plain_receipt}, "receipt")):
        r = seek(api, plain, plain_auth, body)
        assert (r.status_code, r.json()["error"]["field"]) == (422, field), r.text
        assert "keeps no acked deliveries" in r.json()["error"]["message"]


def test_a_seek_needs_the_queues_token_whatever_else_is_wrong(api):
    q, auth = queue(api, {"retain_acked_s": 3600})
    _, other_auth = queue(api, {"retain_acked_s": 3600})
    for body in ({"time": 0}, {"time": "nope"}, {}):
        for headers in ({}, {"Authorization": "Bearer wrong"}, other_auth):
            r = seek(api, q, headers, body)
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", r.text
        assert seek(api, "no-such-queue", auth, body).status_code == 401


@pytest.mark.parametrize("value", [-1, 31_622_401, "60", True, 1.5])
def test_a_bad_retain_acked_s_is_a_422_naming_it_and_creates_nothing(api, raw, value):
    before = raw.scard(K.QUEUES)
    r = api.post("/v1/queues", json={"retain_acked_s": value})
    assert r.status_code == 422, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["field"]) == ("invalid_request", "retain_acked_s")
    assert raw.scard(K.QUEUES) == before


# -- gRPC, the SDK, the CLI -------------------------------------------------------------------
def _grpc_error(call, *args, **kw) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        call(*args, **kw)
    return e.value


def test_grpc_create_queue_and_seek(api, seeker):
    with grpc.insecure_channel(seeker.grpc_address) as ch:
        stub = pb_grpc.PubSubStub(ch)
        made = stub.CreateQueue(pb.CreateQueueRequest(retain_acked_s=600))
        md = (("authorization", f"Bearer {made.token}"),)
        auth = {"Authorization": f"Bearer {made.token}"}
        assert info(api, made.queue, auth)["retain_acked_s"] == 600
        api.post("/v1/subscriptions", json={"queue": made.queue, "predicates": {}}, headers=auth)
        ids = publish(api, names(3))
        got = stub.Poll(pb.PollRequest(queue=made.queue, max=10), metadata=md).messages
        stub.Ack(pb.AckRequest(queue=made.queue, receipts=[m.receipt for m in got]), metadata=md)
        assert stub.Seek(pb.SeekRequest(queue=made.queue, receipt=got[1].receipt), metadata=md).redeliverable == 2
        assert stub.Seek(pb.SeekRequest(queue=made.queue, time_ms=0), metadata=md).redeliverable == 3
        assert stub.Seek(pb.SeekRequest(queue=made.queue, time="2000-01-01T00:00:00Z"),
                         metadata=md).redeliverable == 3
        assert sorted(drain(api, made.queue, auth)) == sorted(ids)
        for req, field in ((pb.SeekRequest(queue=made.queue), "time"),
                           (pb.SeekRequest(queue=made.queue, time="later"), "time"),
                           (pb.SeekRequest(queue=made.queue, receipt="1-0"), "receipt")):
            err = _grpc_error(stub.Seek, req, metadata=md)
            meta = dict(err.trailing_metadata())
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
            assert (meta["bluedove-error-code"], meta["bluedove-error-field"]) == ("invalid_request", field)
        err = _grpc_error(stub.Seek, pb.SeekRequest(queue=made.queue, time_ms=0))
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
        err = _grpc_error(stub.CreateQueue, pb.CreateQueueRequest(retain_acked_s=-5))
        assert dict(err.trailing_metadata())["bluedove-error-field"] == "retain_acked_s"


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_the_sdk_seeks_by_datetime_epoch_ms_and_receipt(seeker, transport):
    url = seeker.url if transport == "rest" else f"grpc://{seeker.grpc_address}"
    with Client(url) as client:
        q = client.create_queue(retain_acked_s=600)
        q.subscribe({})
        early = [client.publish(ATTRS, i, id=x) for i, x in enumerate(names(2))]
        at = cut()
        late = [client.publish(ATTRS, i, id=x) for i, x in enumerate(names(2))]
        got = q.deliveries()
        assert [d.id for d in got] == early + late
        q.ack(got)
        assert q.seek(datetime.fromtimestamp(at / 1000, timezone.utc)) == 2
        assert [d.id for d in q.deliveries()] == late
        assert q.seek(0) == 4
        again = q.deliveries()
        q.ack(again)
        assert q.seek(receipt=again[1]) == 3
        assert [d.id for d in q.deliveries()] == (early + late)[1:]


async def test_the_async_sdk_seeks(seeker):
    from bluedove.client import AsyncClient

    async with AsyncClient(f"grpc://{seeker.grpc_address}") as client:
        q = await client.create_queue(retain_acked_s=60)
        await q.subscribe({})
        ids = [await client.publish(ATTRS, id=x) for x in names(2)]
        await q.ack(await q.deliveries())
        assert await q.seek("1970-01-01T00:00:00Z") == 2
        assert [d.id for d in await q.deliveries()] == ids


def test_cli_poll_from_seeks_then_polls(api, seeker):
    q, auth = queue(api, {"retain_acked_s": 3600})
    ids = publish(api, names(3))
    drain(api, q, auth)
    token = auth["Authorization"].split()[1]
    for since in ("1h", "2000-01-01T00:00:00Z"):
        r = subprocess.run([sys.executable, "-m", "bluedove", "poll", q, "--url", seeker.url, "--token", token,
                            "--from", since, "--wait", "0", "--ack"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert [json.loads(x)["id"] for x in r.stdout.splitlines()] == ids
    plain, plain_auth = queue(api)
    r = subprocess.run([sys.executable, "-m", "bluedove", "poll", plain, "--url", seeker.url, "--token",
                        plain_auth["Authorization"].split()[1], "--from", "1h"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "(time)" in r.stderr, r.stderr


# -- the store alone (a Redis Cluster too, with --store-kind cluster) --------------------------
async def test_kept_counts_the_acked_entries_through_expiry_and_seeks(make_store):
    """Retention deletes acked, handed-out and waiting entries alike: only the acked ones leave
    `kept`, so the depth stays the deliveries not yet acked."""
    store = make_store()
    q, token = await store.create_queue(QueueBounds(max_undelivered=0, retention_s=1, retain_acked_s=3600))
    for mid in ("acked", "handed", "waiting"):
        await store.deliver([message(mid)], [(q, 0, '["s"]')])
    got = await store.poll(q, 2, 0)
    assert await store.ack(q, [got[0]["receipt"]]) == 1
    assert (await store.queue_info(q))["depth"] == 2
    assert await store.r.hget(K.queue_hash(q), "kept") == "1"
    await asyncio.sleep(1.2)
    await store.deliver([message("new")], [(q, 0, '["s"]')])
    assert await store.r.xlen(K.queue_stream(q)) == 1
    assert (await store.queue_info(q))["depth"] == 1 and (await store.queue_info(q))["expired"] == 3
    assert await store.r.hget(K.queue_hash(q), "kept") == "0"
    assert await store.seek(q, 0, token=token) == 1
    assert await store.queue_depth(q) == 1 and await store.backlog([q]) == 1


async def test_a_poll_deletes_the_acked_deliveries_kept_long_enough(store):
    q, _ = await store.create_queue(QueueBounds(max_undelivered=0, retain_acked_s=1))
    await store.deliver([message(f"m{i}") for i in range(3)], [(q, i, '["s"]') for i in range(3)])
    got = await store.poll(q, 10, 0)
    await store.ack(q, [d["receipt"] for d in got[:2]])
    assert await store.r.xlen(K.queue_stream(q)) == 3  # acked, kept
    await asyncio.sleep(1.2)
    assert await store.poll(q, 10, 0) == []
    assert await store.r.xlen(K.queue_stream(q)) == 1  # the one handed out and not acked stays
    assert await store.r.hget(K.queue_hash(q), "kept") == "0"
    assert (await store.queue_info(q))["depth"] == 1


async def test_old_entries_still_handed_out_never_hold_up_the_trim(make_store):
    """The trim looks at 100 old entries a write, from where it stopped: 120 old deliveries
    handed out and never acked come first, the 5 acked ones after them still go."""
    store = make_store(StoreLimits(visibility_timeout_s=3600))
    q, _ = await store.create_queue(QueueBounds(max_undelivered=0, retain_acked_s=1))
    msgs = [message(f"m{i}") for i in range(125)]
    await store.deliver(msgs[:120], [(q, i, '["s"]') for i in range(120)])
    assert len(await store.poll(q, 1000, 0)) == 120
    await store.deliver(msgs[120:], [(q, i, '["s"]') for i in range(5)])
    assert await store.ack(q, [d["receipt"] for d in await store.poll(q, 1000, 0)]) == 5
    await asyncio.sleep(1.2)
    for i in range(2):
        await store.deliver([message(f"w{i}")], [(q, 0, '["s"]')])
    assert await store.r.xlen(K.queue_stream(q)) == 122
    assert await store.r.hget(K.queue_hash(q), "kept") == "0"
    assert (await store.queue_info(q))["depth"] == 122


async def test_setting_aside_a_delivery_acked_meanwhile_takes_it_out_of_kept(store):
    """A poll's slow path sets aside what it handed out that cannot be rendered; one of them
    may have been acked meanwhile: on a queue that keeps acked deliveries, it leaves `kept`."""
    q, _ = await store.create_queue(QueueBounds(max_undelivered=0, retain_acked_s=3600))
    await store.deliver([message("a"), message("b")], [(q, 0, '["s"]'), (q, 1, '["s"]')])
    got = await store.poll(q, 10, 0)
    await store.ack(q, [got[0]["receipt"]])
    ids = [d["receipt"].split(".")[0] for d in got]
    removed, moved, _, _ = await store._set_aside(keys=[K.queue_stream(q), K.queue_hash(q), K.dead_outbox(q)],
                                                  args=["g", *ids])
    assert (removed, moved) == (2, 0)
    assert await store.r.hget(K.queue_hash(q), "kept") == "0"
    assert (await store.queue_info(q))["depth"] == 0


async def test_a_dead_letter_queue_that_keeps_acked_deliveries_counts_its_cap_by_what_is_not_acked(make_store):
    store = make_store(StoreLimits(visibility_timeout_s=0.2))
    dlq, _ = await store.create_queue(QueueBounds(max_undelivered=1, retain_acked_s=3600))
    q, _ = await store.create_queue(QueueBounds(max_undelivered=10, dead_letter_queue=dlq, max_deliveries=1))
    await store.deliver([message("first")], [(dlq, 0, '["s"]')])
    await store.ack(dlq, [d["receipt"] for d in await store.poll(dlq, 10, 0)])  # kept, not counted
    await store.deliver([message("bad")], [(q, 0, '["s"]')])
    assert [d["id"] for d in await store.poll(q, 10, 0)] == ["bad"]
    await asyncio.sleep(0.3)
    assert await store.poll(q, 10, 0) == []  # moved to dlq, which takes it
    assert [d["id"] for d in await store.poll(dlq, 10, 0)] == ["bad"]
    assert (await store.queue_info(dlq))["dropped"] == 0


async def test_a_seek_counts_exactly_from_either_side_of_its_point(store):
    """350 deliveries, read 100 a slice: the count ends from whichever side of the point ends
    first, at slice boundaries too, and the deliveries from the point on come back in order."""
    q, token = await store.create_queue(QueueBounds(max_undelivered=0, retain_acked_s=3600))
    await store.deliver([message(f"m{i:03}") for i in range(350)], [(q, i, '["s"]') for i in range(350)])
    got = await store.poll(q, 1000, 0)
    await store.ack(q, [d["receipt"] for d in got])
    entries = [d["receipt"].split(".")[0] for d in got]
    for k in (0, 1, 99, 100, 101, 200, 249, 250, 251, 300, 349):
        ms, seq = map(int, entries[k].split("-"))
        assert await store.seek(q, ms, seq, token=token) == 350 - k, k
        assert (await store.queue_info(q))["depth"] == 350 - k
        again = await store.poll(q, 1000, 0)
        assert [d["id"] for d in again] == [d["id"] for d in got[k:]]
        await store.ack(q, [d["receipt"] for d in again])
    last_ms = int(entries[-1].split("-")[0])
    assert await store.seek(q, last_ms + 1, token=token) == 0  # after the last: all acked
    assert await store.poll(q, 1000, 0) == [] and (await store.queue_info(q))["depth"] == 0


async def test_a_seek_does_not_count_what_is_past_the_queues_retention(store):
    """150 deliveries past the retention, and a write that deleted 100 of them: the seek counts
    neither the 50 left nor hands them out; the next poll deletes them."""
    q, token = await store.create_queue(QueueBounds(max_undelivered=0, retention_s=1, retain_acked_s=3600))
    await store.deliver([message(f"m{i:03}") for i in range(150)], [(q, i, '["s"]') for i in range(150)])
    await store.ack(q, [d["receipt"] for d in await store.poll(q, 1000, 0)])
    await asyncio.sleep(1.2)
    await store.deliver([message("new")], [(q, 0, '["s"]')])
    assert await store.r.xlen(K.queue_stream(q)) == 51
    assert await store.seek(q, 0, token=token) == 1
    got = await store.poll(q, 1000, 0)
    assert [d["id"] for d in got] == ["new"]
    await store.ack(q, [got[0]["receipt"]])
    info = await store.queue_info(q)
    assert (info["depth"], info["expired"]) == (0, 150)
