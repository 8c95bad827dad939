"""Store bulk loads (queues, subscriptions) and the poll path: one POLL script per poll, the
REST body spliced from the stored JSON, deleted entries skipped; poll and ack checking the
queue token in their one call."""

from __future__ import annotations

import asyncio
import json

import pytest

from bluedove.store import keys as K
from bluedove.store.client import async_client
from bluedove.store.ids import receipt_tag
from bluedove.store.store import BadToken, QueueMissing, Store, StoreLimits
from bluedove.store.wire import deliveries_json

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(redis_clean_url: str):
    """A Store on an empty Redis with a 0.3 s visibility timeout."""
    s = Store(redis_clean_url, StoreLimits(visibility_timeout_s=0.3))
    yield s
    await s.close()


def body(mid: str, payload=None) -> str:
    return json.dumps({"id": mid, "attributes": {"x0": 1.5}, "payload": payload,
                       "published_at": "2026-11-22T00:00:00Z"})


async def test_create_queues_makes_working_queues_and_tokens(store):
    made = await store.create_queues(2500, chunk=1000)
    assert len(made) == 2500 and len({q for q, _ in made}) == 2500
    for q, tok in made[::500]:
        assert await store.check_token(q, tok)
        assert await store.queue_for_token(tok) == q
        assert await store.queue_depth(q) == 0  # the stream and its group exist
    assert not await store.check_token(made[0][0], made[1][1])


async def test_add_subscriptions_is_the_same_as_one_by_one(store):
    (q, _), = await store.create_queues(1)
    subs = [{"id": f"s{i}", "queue": q, "predicates": {"x0": [i, i + 1]}} for i in range(1500)]
    assert await store.add_subscriptions(subs, chunk=400) == 1500
    assert await store.get_subscription("s1234", q) == subs[1234]
    pos, snapshot = await store.catalogue_snapshot()
    assert len(snapshot) == 1500 and pos == await store.catalogue_position() != "0-0"
    assert len((await store.catalogue_changes("0-0", count=2000))[1]) == 1500


async def test_add_subscriptions_to_a_missing_queue_stores_nothing(store):
    (q, _), = await store.create_queues(1)
    with pytest.raises(QueueMissing):
        await store.add_subscriptions([{"id": "s0", "queue": q, "predicates": {}},
                                       {"id": "s1", "queue": "nope", "predicates": {}}])
    assert await store.get_subscription("s0", q) is None and await store.get_subscription("s1", "nope") is None


def ids(body: str) -> list[str]:
    return [m["id"] for m in json.loads(body)["messages"]]


async def test_poll_json_gives_the_rest_body_and_poll_the_decoded_form(store):
    (q, _), = await store.create_queues(1)
    await store.deliver([("m1", body("m1", {"a": [1, 2]})), ("m2", body("m2"))],
                        [(q, 0, '["s1"]'), (q, 1, '["s1","s2"]')])
    n, text = await store.poll_json(q, 10, 0)
    spliced = json.loads(text)["messages"]
    assert n == 2 and [m["id"] for m in spliced] == ["m1", "m2"]
    assert spliced[0]["payload"] == {"a": [1, 2]} and spliced[1]["subscriptions"] == ["s1", "s2"]
    stored = json.loads(body("m1", {"a": [1, 2]}))
    assert spliced[0] == {**stored, "subscriptions": ["s1"], "receipt": spliced[0]["receipt"]}
    receipts = [m["receipt"] for m in spliced]
    assert receipts[0] < receipts[1] and all(r.count("-") == 1 for r in receipts)
    # Expired, the same deliveries come back through poll (the dict form) exactly as spliced.
    await asyncio.sleep(0.35)
    assert await store.poll(q, 10, 0) == spliced
    assert await store.poll_json(q, 10, 0) == (0, '{"messages":[]}')


@pytest.mark.parametrize("message", ['{"id":"m"}', '{}', ' { "id" : "m" } ', '{ }', '{"id":"m","payload":{"a":{}}}'])
async def test_the_poll_script_splices_any_object_as_deliveries_json_does(store, message):
    (q, _), = await store.create_queues(1)
    await store.deliver([("m", message)], [(q, 0, '["s"]')])
    n, text = await store.poll_json(q, 10, 0)
    (receipt,) = [m["receipt"] for m in json.loads(text)["messages"]]
    entry_id, tag = receipt.split(".")
    assert "." + tag == receipt_tag(q)
    assert n == 1 and json.loads(text) == json.loads(deliveries_json([(entry_id, message, '["s"]')], receipt_tag(q)))


@pytest.mark.parametrize("message", ['{"id":"m"}', '{}', ' { "id" : "m" } '])
def test_deliveries_json_splices_any_object(message):
    out = json.loads(deliveries_json([("1-0", message, '["s"]')], ".0123456789ab"))
    assert out == {"messages": [{**json.loads(message), "subscriptions": ["s"], "receipt": "1-0.0123456789ab"}]}
    assert json.loads(deliveries_json([], ".0123456789ab")) == {"messages": []}


async def test_poll_takes_expired_first_then_new_up_to_max_and_skips_deleted(store, redis_clean_url):
    (q, _), = await store.create_queues(1)
    await store.deliver([(f"m{i}", body(f"m{i}")) for i in range(4)], [(q, i, '["s"]') for i in range(4)])
    first = await store.poll(q, 3, 0)  # m0 m1 m2 handed out
    r = async_client(redis_clean_url)
    await r.xdel(K.queue_stream(q), first[1]["receipt"].split(".")[0])  # m1 deleted while pending
    await r.aclose()
    await store.deliver([("m4", body("m4"))], [(q, 0, '["s"]')])
    await asyncio.sleep(0.35)
    n, again = await store.poll_json(q, 3, 0)
    assert (n, ids(again)) == (3, ["m0", "m2", "m3"])
    n, last = await store.poll_json(q, 3, 0)
    assert (n, ids(last)) == (1, ["m4"])


async def test_poll_json_long_polls_an_empty_queue(store):
    (q, tok), = await store.create_queues(1)

    async def later():
        await asyncio.sleep(0.2)
        await store.deliver([("m1", body("m1", {"x": 1}))], [(q, 0, '["s"]')])

    task = asyncio.create_task(later())
    n, got = await store.poll_json(q, 10, 5, token=tok)
    await task
    assert n == 1 and ids(got) == ["m1"] and json.loads(got)["messages"][0]["payload"] == {"x": 1}


async def test_a_stopped_long_poll_returns_empty(store):
    (q, tok), = await store.create_queues(1)
    stop = asyncio.Event()
    stop.set()
    assert await store.poll_json(q, 10, 5, stop=stop, token=tok) == (0, '{"messages":[]}')


# -- the token, checked inside the poll and ack calls ---------------------------------------------
async def test_poll_and_ack_with_the_queue_token(store):
    (q, tok), = await store.create_queues(1)
    await store.deliver([(f"m{i}", body(f"m{i}")) for i in range(3)], [(q, i, '["s"]') for i in range(3)])
    got = await store.poll(q, 10, 0, token=tok)
    assert [m["id"] for m in got] == ["m0", "m1", "m2"]
    assert await store.ack(q, [m["receipt"] for m in got[:2]], token=tok) == 2
    assert await store.queue_depth(q) == 1
    assert await store.ack(q, [], token=tok) == 0


@pytest.mark.parametrize("how", ["other queue's token", "made-up token", "queue id with a colon", "no such queue"])
async def test_a_poll_or_ack_with_a_wrong_token_raises_and_changes_nothing(store, how):
    (q, tok), (other, other_tok) = await store.create_queues(2)
    await store.deliver([("m0", body("m0"))], [(q, 0, '["s"]')])
    queue, token = {"other queue's token": (q, other_tok), "made-up token": (q, "x" * 43),
                    "queue id with a colon": (f"{q}:s", tok), "no such queue": ("f" * 32, tok)}[how]
    with pytest.raises(BadToken):
        await store.poll_json(queue, 10, 0, token=token)
    with pytest.raises(BadToken):
        await store.poll_json(queue, 10, 1, token=token)  # a long-poll is refused before it waits
    (d,) = await store.poll(q, 10, 0, token=tok)  # nothing was handed out by the refused polls
    with pytest.raises(BadToken):
        await store.ack(queue, [d["receipt"]], token=token)
    with pytest.raises(BadToken):
        await store.ack(queue, [], token=token)
    assert await store.queue_depth(q) == 1  # nor acked or deleted
    assert await store.ack(q, [d["receipt"]], token=tok) == 1


async def test_a_deleted_queue_refuses_its_token(store):
    q, tok = await store.create_queue()
    await store.deliver([("m0", body("m0"))], [(q, 0, '["s"]')])
    (d,) = await store.poll(q, 10, 0, token=tok)
    await store.delete_queue(q)
    with pytest.raises(BadToken):
        await store.poll_json(q, 10, 0, token=tok)
    with pytest.raises(BadToken):
        await store.ack(q, [d["receipt"]], token=tok)


async def test_ack_takes_more_receipts_than_lua_can_unpack_at_once(redis_clean_url):
    # A long visibility timeout: nine polls of 1,000 on a loaded machine can outlast the
    # fixture's 0.3 s, and a delivery handed out twice is not what this checks.
    store = Store(redis_clean_url, StoreLimits(visibility_timeout_s=60))
    try:
        (q, tok), = await store.create_queues(1)
        n = 8500
        await store.deliver([(f"m{i}", body(f"m{i}")) for i in range(n)], [(q, i, '["s"]') for i in range(n)])
        got = await store.poll(q, 1000, 0, token=tok)
        for _ in range(8):
            got += await store.poll(q, 1000, 0, token=tok)
        assert len(got) == n
        assert await store.ack(q, [m["receipt"] for m in got] + ["1-0"], token=tok) == n
        assert await store.queue_depth(q) == 0
    finally:
        await store.close()
