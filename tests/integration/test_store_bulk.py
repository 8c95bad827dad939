"""Store bulk loads (queues, subscriptions) and the poll path's raw form: one POLL script per
poll, the REST body spliced from the stored JSON, deleted entries skipped."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio as aioredis

from bluedove.store.store import Store, StoreLimits, deliveries_json

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(redis_clean_url: str):
    """A Store on an empty Redis with a 0.3 s visibility timeout."""
    s = Store(redis_clean_url, StoreLimits(visibility_timeout_s=0.3))
    yield s
    await s.close()


def body(mid: str, payload=None) -> str:
    return json.dumps({"id": mid, "attributes": {"x0": 1.5}, "payload": payload, "published_at": "2026-11-22T00:00:00Z"})


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
    assert await store.get_subscription("s1234") == subs[1234]
    pos, snapshot = await store.catalogue_snapshot()
    assert len(snapshot) == 1500 and pos != "0-0"
    assert len(await store.catalogue_changes("0-0", count=2000)) == 1500


async def test_add_subscriptions_stops_at_a_missing_queue(store):
    from redis.exceptions import ResponseError

    with pytest.raises(ResponseError, match="NOQUEUE"):
        await store.add_subscriptions([{"id": "s1", "queue": "nope", "predicates": {}}])
    assert await store.get_subscription("s1") is None


async def test_poll_raw_gives_the_stored_texts_and_poll_the_decoded_form(store):
    (q, _), = await store.create_queues(1)
    await store.deliver([("m1", body("m1", {"a": [1, 2]})), ("m2", body("m2"))], [(q, 0, '["s1"]'), (q, 1, '["s1","s2"]')])
    raw = await store.poll_raw(q, 10, 0)
    assert [(json.loads(m)["id"], s) for _, m, s in raw] == [("m1", '["s1"]'), ("m2", '["s1","s2"]')]
    spliced = json.loads(deliveries_json(raw))["messages"]
    assert [m["id"] for m in spliced] == ["m1", "m2"]
    assert spliced[0]["payload"] == {"a": [1, 2]} and spliced[1]["subscriptions"] == ["s1", "s2"]
    assert [m["receipt"] for m in spliced] == [eid for eid, _, _ in raw]
    # Expired, the same deliveries come back through poll (the dict form) exactly as spliced.
    await asyncio.sleep(0.35)
    assert await store.poll(q, 10, 0) == spliced


@pytest.mark.parametrize("message", ['{"id":"m"}', '{}', ' { "id" : "m" } '])
def test_deliveries_json_splices_any_object(message):
    out = json.loads(deliveries_json([("1-0", message, '["s"]')]))
    assert out == {"messages": [{**json.loads(message), "subscriptions": ["s"], "receipt": "1-0"}]}
    assert json.loads(deliveries_json([])) == {"messages": []}


async def test_poll_takes_expired_first_then_new_up_to_max_and_skips_deleted(store, redis_clean_url):
    (q, _), = await store.create_queues(1)
    await store.deliver([(f"m{i}", body(f"m{i}")) for i in range(4)], [(q, i, '["s"]') for i in range(4)])
    first = await store.poll_raw(q, 3, 0)  # m0 m1 m2 handed out
    r = aioredis.from_url(redis_clean_url, decode_responses=True)
    await r.xdel(f"bd:q:{q}:s", first[1][0])  # m1 deleted while pending
    await r.aclose()
    await store.deliver([("m4", body("m4"))], [(q, 0, '["s"]')])
    await asyncio.sleep(0.35)
    again = await store.poll_raw(q, 3, 0)
    assert [json.loads(m)["id"] for _, m, _ in again] == ["m0", "m2", "m3"]
    last = await store.poll_raw(q, 3, 0)
    assert [json.loads(m)["id"] for _, m, _ in last] == ["m4"]


async def test_poll_raw_long_polls_an_empty_queue(store):
    (q, _), = await store.create_queues(1)

    async def later():
        await asyncio.sleep(0.2)
        await store.deliver([("m1", body("m1"))], [(q, 0, '["s"]')])

    task = asyncio.create_task(later())
    got = await store.poll_raw(q, 10, 5)
    await task
    assert [json.loads(m)["id"] for _, m, _ in got] == ["m1"]
