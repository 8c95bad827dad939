"""Parked long polls against a real redis-server: woken by the delivery writes that concern
them, on one subscription instead of a connection each (bluedove/store/wakeups.py)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from bluedove.store import keys as K
from bluedove.store.client import sync_client
from bluedove.store.queues import CALL_MOST, POLL_CALLS
from bluedove.store.store import StoreLimits

pytestmark = pytest.mark.integration

MESSAGE = json.dumps({"id": "m", "attributes": {"x0": 1}, "payload": None, "published_at": "2026-11-26T00:00:00Z"})


def _clients(url: str) -> int:
    r = sync_client(url)
    try:
        return sum(int(node.get("connected_clients", 0)) for node in _infos(r))
    finally:
        r.close()


def _infos(r) -> list[dict]:
    info = r.info("clients")
    return list(info.values()) if all(isinstance(v, dict) for v in info.values()) else [info]


async def _until(check, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_parked_poll_answers_as_soon_as_its_queue_gets_a_delivery(store):
    q, _ = await store.create_queue()
    other, _ = await store.create_queue()
    parked = asyncio.create_task(store.poll(q, 10, 30))
    await _until(lambda: store.wakeups.live and store.wakeups.parked == 1)
    await store.deliver([("m0", MESSAGE)], [(other, 0, '["s"]')])  # another queue's: not woken
    await asyncio.sleep(0.2)
    assert not parked.done()
    started = time.monotonic()
    await store.deliver([("m1", MESSAGE)], [(q, 0, '["s"]')])
    got = await asyncio.wait_for(parked, 10)
    assert len(got) == 1 and time.monotonic() - started < 10  # woken, not at the end of its 30 s
    assert store.wakeups.parked == 0


async def test_many_parked_polls_share_a_few_connections_and_give_them_back(store, redis_clean_url):
    queues = [q for q, _ in await store.create_queues(300)]
    await store.poll(queues[0], 1, 0)  # the subscription and the pool's first connections
    idle = _clients(redis_clean_url)
    polls = [asyncio.create_task(store.poll(q, 10, 20)) for q in queues]
    await _until(lambda: store.wakeups.parked == len(queues))
    parked = _clients(redis_clean_url)
    # A connection each would be 300 more; polls share at most POLL_CALLS for their calls.
    assert parked - idle <= 10, (idle, parked)
    await store.deliver([(f"m{i}", MESSAGE) for i in range(len(queues))],
                        [(q, i, '["s"]') for i, q in enumerate(queues)])
    answers = await asyncio.wait_for(asyncio.gather(*polls), 15)
    assert [len(a) for a in answers] == [1] * len(queues)  # each woken by its own delivery
    assert _clients(redis_clean_url) - idle <= 10


async def test_polls_woken_together_look_in_a_few_pipelined_calls(store):
    """Their looks go through one lane (bluedove/store/queues.py): at most POLL_CALLS calls in
    flight, each carrying up to CALL_MOST looks that queued up meanwhile, not a call each."""
    queues = [q for q, _ in await store.create_queues(300)]
    lane, sizes, inflight = store._calls, [], [0, 0]  # (under way, most at once)
    handle = lane.handle

    async def counted(items):
        sizes.append(len(items))
        inflight[0] += 1
        inflight[1] = max(inflight)
        try:
            return await handle(items)
        finally:
            inflight[0] -= 1

    lane.handle = counted
    polls = [asyncio.create_task(store.poll(q, 10, 20)) for q in queues]
    await _until(lambda: store.wakeups.parked == len(queues))
    sizes.clear()
    await store.deliver([(f"m{i}", MESSAGE) for i in range(len(queues))],
                        [(q, i, '["s"]') for i, q in enumerate(queues)])
    answers = await asyncio.wait_for(asyncio.gather(*polls), 15)
    assert [len(a) for a in answers] == [1] * len(queues)
    assert inflight[1] <= POLL_CALLS and max(sizes) <= CALL_MOST, (inflight, sizes)
    assert len(sizes) <= len(queues) // 4, sizes  # one call a look would be 300


async def test_a_lost_subscription_is_made_again_and_no_delivery_is_missed(store, redis_clean_url):
    q, _ = await store.create_queue()
    parked = asyncio.create_task(store.poll(q, 10, 30))
    await _until(lambda: store.wakeups.live)
    r = sync_client(redis_clean_url)
    try:
        r.client_kill_filter(_type="pubsub")  # the wake-up subscription's connection dropped
        await _until(lambda: not store.wakeups.live)
        await store.deliver([("m1", MESSAGE)], [(q, 0, '["s"]')])  # written while nobody listens
    finally:
        r.close()
    got = await asyncio.wait_for(parked, 10)  # found by the look every second, or at resubscribing
    assert len(got) == 1
    await _until(lambda: store.wakeups.live)


async def test_a_parked_poll_with_deliveries_out_sees_their_visibility_timeout_pass(make_store):
    """No write announces a visibility timeout passing: a poll whose queue has deliveries
    handed out and unacked looks again every second while parked."""
    store = make_store(StoreLimits(visibility_timeout_s=0.3))
    q, _ = await store.create_queue()
    await store.deliver([("m1", MESSAGE)], [(q, 0, '["s"]')])
    (first,) = await store.poll(q, 10, 0)
    again = await asyncio.wait_for(store.poll(q, 10, 10), 5)
    assert [d["receipt"] for d in again] == [first["receipt"]]


async def test_a_dead_letter_move_wakes_the_polls_parked_on_the_dead_letter_queue(store):
    dlq, _ = await store.create_queue()
    parked = asyncio.create_task(store.poll(dlq, 10, 30))
    await _until(lambda: store.wakeups.live and store.wakeups.parked == 1)
    await store._dead_letter(keys=[K.queue_stream(dlq), K.queue_hash(dlq), K.dead_mark(dlq, "src", "1-1")],
                             args=[MESSAGE, '["s"]', 60, 0])
    got = await asyncio.wait_for(parked, 10)
    assert len(got) == 1
