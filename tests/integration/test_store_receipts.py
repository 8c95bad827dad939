"""Receipts bound to their queue, on a real Redis: two queues' streams can hold the same entry
id, and a receipt of one acks nothing on the other; a receipt issued before receipts were bound
acks nothing, and its delivery comes back (with a bound receipt) after the visibility timeout."""

from __future__ import annotations

import asyncio
import json

import pytest

from bluedove.store import keys as K
from bluedove.store.client import sync_client
from bluedove.store.store import StoreLimits

pytestmark = pytest.mark.integration

MESSAGE = json.dumps({"id": "m", "attributes": {"x0": 1.5}, "payload": None, "published_at": "2026-11-22T00:00:00Z"})


@pytest.fixture
async def store(make_store):
    """A Store with a 0.3 s visibility timeout on an empty Redis."""
    return make_store(StoreLimits(visibility_timeout_s=0.3))


async def test_a_receipt_of_one_queue_acks_nothing_on_another(store, redis_clean_url):
    """Before: a receipt was the bare entry id, and acking queue A's on queue B acked B's
    delivery of the same id (two streams written in the same millisecond) - lost to B's reader."""
    (a, _), (b, _) = await store.create_queues(2)
    raw = sync_client(redis_clean_url)
    try:
        for q in (a, b):  # the same entry id in both, as one millisecond's writes give
            raw.xadd(K.queue_stream(q), {"m": MESSAGE, "s": '["s"]'}, id="1700000000000-0")
    finally:
        raw.close()
    (da,) = await store.poll(a, 10, 0)
    (db,) = await store.poll(b, 10, 0)
    assert await store.ack(b, [da["receipt"]]) == 0
    assert da["receipt"] != db["receipt"]
    assert await store.queue_depth(b) == 1
    assert await store.ack(b, [db["receipt"]]) == 1 and await store.queue_depth(b) == 0
    assert await store.ack(a, [da["receipt"]]) == 1 and await store.queue_depth(a) == 0


async def test_a_receipt_issued_before_receipts_were_bound_acks_nothing_and_its_delivery_comes_back(store):
    """What an old receipt does (docs/api.md, "Receiving"): the ack is harmless and acks
    nothing; the delivery is handed out again after the visibility timeout, nothing lost."""
    q, _ = await store.create_queue()
    await store.deliver([("m", MESSAGE)], [(q, 0, '["s"]')])
    (d,) = await store.poll(q, 10, 0)
    entry_id, dot, _ = d["receipt"].partition(".")
    assert dot
    assert await store.ack(q, [entry_id]) == 0
    await asyncio.sleep(0.4)
    (again,) = await store.poll(q, 10, 0)
    assert again["receipt"] == d["receipt"]  # the same delivery, its receipt bound
    assert await store.ack(q, [again["receipt"]]) == 1 and await store.queue_depth(q) == 0


async def test_receipts_of_a_waiting_and_of_a_woken_poll_are_the_same(store):
    """A delivery that was waiting and one a parked long-poll was woken for carry the same
    tag, and both ack."""
    q, _ = await store.create_queue()
    await store.deliver([("m0", MESSAGE)], [(q, 0, '["s"]')])
    (first,) = await store.poll(q, 10, 0)
    assert await store.ack(q, [first["receipt"]]) == 1
    waiting = asyncio.create_task(store.poll(q, 10, 3))
    await asyncio.sleep(0.1)
    await store.deliver([("m1", MESSAGE)], [(q, 0, '["s"]')])
    (second,) = await waiting
    assert first["receipt"].partition(".")[2] == second["receipt"].partition(".")[2]
    assert await store.ack(q, [second["receipt"]]) == 1
