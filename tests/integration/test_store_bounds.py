"""A queue's bounds against a real redis-server (or a Redis Cluster with --store-kind cluster):
the cap on undelivered deliveries, retention, and dead-lettering after max_deliveries."""

from __future__ import annotations

import asyncio
import json

import pytest

from bluedove.core.queue_bounds import QueueBounds
from bluedove.store import keys as K
from bluedove.store.store import StoreLimits
from tests.integration.store_fixtures import message

pytestmark = pytest.mark.integration


async def test_a_full_queue_refuses_new_deliveries_and_counts_them_other_queues_still_get_them(store):
    small, _ = await store.create_queue(QueueBounds(max_undelivered=2))
    big, _ = await store.create_queue()
    msgs = [message(f"m{i}") for i in range(4)]
    deliveries = [(q, i, json.dumps(["s"])) for i in range(4) for q in (small, big)]
    assert await store.deliver(msgs, deliveries) == (4, 6)
    assert await store.queue_depth(small) == 2 and await store.queue_depth(big) == 4
    assert store.dropped == 2
    info = await store.queue_info(small)
    assert info["dropped"] == 2 and info["max_undelivered"] == 2 and info["depth"] == 2
    assert (await store.queue_info(big))["dropped"] == 0
    # the first two are kept (the oldest), the newest were refused
    assert [d["id"] for d in await store.poll(small, 10, 0)] == ["m0", "m1"]
    # the same batch again (a retry): nothing written twice, no refusal counted twice
    assert await store.deliver(msgs, deliveries) == (0, 0)
    assert (await store.queue_info(small))["dropped"] == 2


async def test_delivered_but_unacked_deliveries_count_against_the_cap_and_an_ack_makes_room(store):
    q, _ = await store.create_queue(QueueBounds(max_undelivered=1))
    await store.deliver([message("a")], [(q, 0, '["s"]')])
    got = await store.poll(q, 10, 0)
    assert await store.deliver([message("b")], [(q, 0, '["s"]')]) == (1, 0)  # handed out, not acked: full
    assert await store.ack(q, [got[0]["receipt"]]) == 1
    assert await store.deliver([message("c")], [(q, 0, '["s"]')]) == (1, 1)
    assert [d["id"] for d in await store.poll(q, 10, 0)] == ["c"]


async def test_cap_zero_means_no_cap_and_queues_without_bounds_take_the_store_default(make_store):
    store = make_store(StoreLimits(max_undelivered=3))
    q, _ = await store.create_queue(QueueBounds(max_undelivered=0))
    legacy, _ = await store.create_queue()
    await store.r.hdel(K.queue_hash(legacy), "max_undelivered")  # as created before queues had bounds
    msgs = [message(f"m{i}") for i in range(5)]
    await store.deliver(msgs, [(x, i, '["s"]') for i in range(5) for x in (q, legacy)])
    assert await store.queue_depth(q) == 5
    assert await store.queue_depth(legacy) == 3


async def test_retention_drops_older_deliveries_and_never_hands_them_out(store):
    q, _ = await store.create_queue(QueueBounds(max_undelivered=0, retention_s=1))
    await store.deliver([message("old")], [(q, 0, '["s"]')])
    handed = await store.poll(q, 10, 0)
    assert [d["id"] for d in handed] == ["old"]  # handed out, never acked
    await asyncio.sleep(1.2)
    await store.deliver([message("new")], [(q, 0, '["s"]')])
    got = await store.poll(q, 10, 0)
    assert [d["id"] for d in got] == ["new"]
    info = await store.queue_info(q)
    assert info["expired"] == 1 and info["depth"] == 1 and info["retention_s"] == 1
    # the expired one's receipt no longer acks anything
    assert await store.ack(q, [handed[0]["receipt"]]) == 0


async def test_a_delivery_handed_out_max_deliveries_times_moves_to_the_dead_letter_queue(make_store):
    store = make_store(StoreLimits(visibility_timeout_s=0.3))
    dlq, _ = await store.create_queue()
    q, _ = await store.create_queue(QueueBounds(max_undelivered=10, dead_letter_queue=dlq, max_deliveries=2))
    await store.deliver([message("bad"), message("good")], [(q, 0, '["s1"]'), (q, 1, '["s1"]')])
    first = await store.poll(q, 10, 0)
    assert [d["id"] for d in first] == ["bad", "good"]
    await store.ack(q, [first[1]["receipt"]])
    await asyncio.sleep(0.4)
    assert [d["id"] for d in await store.poll(q, 10, 0)] == ["bad"]  # the second time
    await asyncio.sleep(0.4)
    assert await store.poll(q, 10, 0) == []  # came back twice: dead-lettered, not handed out
    moved = await store.poll(dlq, 10, 0)
    assert [d["id"] for d in moved] == ["bad"] and moved[0]["subscriptions"] == ["s1"]
    assert moved[0]["payload"] == {"n": "bad"}
    info = await store.queue_info(q)
    assert info["dead_lettered"] == 1 and info["depth"] == 0
    assert info["dead_letter"] == {"queue": dlq, "max_deliveries": 2}
    assert await store.r.xlen(K.dead_outbox(q)) == 0


async def test_step_two_of_a_dead_letter_move_repeated_after_a_crash_writes_nothing_twice(make_store):
    store = make_store(StoreLimits(visibility_timeout_s=0.2))
    dlq, _ = await store.create_queue()
    q, _ = await store.create_queue(QueueBounds(max_undelivered=10, dead_letter_queue=dlq, max_deliveries=1))
    await store.deliver([message("x")], [(q, 0, '["s"]')])
    await store.poll(q, 10, 0)
    await asyncio.sleep(0.3)
    # a crash after step two wrote but before the outbox entry was removed: replay it by hand
    fields = None
    orig = store.move_dead_letters

    async def crash_after_write(queue, dead_queue, count=100):
        nonlocal fields
        fields = await store.r.xrange(K.dead_outbox(queue))
        await orig(queue, dead_queue, count)
        raise ConnectionError("crashed before the outbox entry was removed")

    store.move_dead_letters = crash_after_write
    assert await store.poll(q, 10, 0) == []  # the poll still answers; the move waits in the outbox
    store.move_dead_letters = orig
    assert fields and len(fields) == 1
    await store.r.xadd(K.dead_outbox(q), fields[0][1])  # the entry the crash left behind
    assert await store.move_dead_letters(q, dlq) == 0  # marked: not written again
    assert [d["id"] for d in await store.poll(dlq, 10, 0)] == ["x"]


async def test_a_full_dead_letter_queue_refuses_the_move_and_counts_it(make_store):
    store = make_store(StoreLimits(visibility_timeout_s=0.2))
    dlq, _ = await store.create_queue(QueueBounds(max_undelivered=1))
    q, _ = await store.create_queue(QueueBounds(max_undelivered=10, dead_letter_queue=dlq, max_deliveries=1))
    await store.deliver([message("a"), message("b")], [(q, 0, '["s"]'), (q, 1, '["s"]')])
    await store.poll(q, 10, 0)
    await asyncio.sleep(0.3)
    assert await store.poll(q, 10, 0) == []
    assert await store.queue_depth(dlq) == 1
    assert (await store.queue_info(dlq))["dropped"] == 1
    assert (await store.queue_info(q))["dead_lettered"] == 2


async def test_deleting_a_queue_removes_its_dead_letter_outbox(store):
    q, _ = await store.create_queue(QueueBounds(max_undelivered=1, dead_letter_queue="f" * 32, max_deliveries=1))
    await store.r.xadd(K.dead_outbox(q), {"src": "1-1", "m": "{}", "s": "[]"})
    await store.delete_queue(q)
    assert await store.r.exists(K.dead_outbox(q)) == 0


async def test_a_write_to_a_queue_with_a_retention_deletes_and_acks_what_expired(store):
    q, _ = await store.create_queue(QueueBounds(max_undelivered=0, retention_s=1))
    await store.deliver([message("a"), message("b")], [(q, 0, '["s"]'), (q, 1, '["s"]')])
    await store.poll(q, 1, 0)  # "a" handed out, never acked
    await asyncio.sleep(1.2)
    await store.deliver([message("c")], [(q, 0, '["s"]')])  # the write expires both, before any poll
    assert await store.queue_depth(q) == 1
    assert (await store.queue_info(q))["expired"] == 2
    pending = await store.r.xpending(K.queue_stream(q), "g")
    assert pending["pending"] == 0  # nothing left behind in the pending list
