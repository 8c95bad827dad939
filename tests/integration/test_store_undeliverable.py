"""A stored delivery that cannot be rendered never breaks a poll, on a real Redis: written as a
dispatcher before strict payloads could have (its message text not UTF-8, or for the decoded
form an integer Python's json refuses), it is set aside - moved to the queue's dead-letter
queue, byte for byte, when it has one, else removed - counted, and the rest answered."""

from __future__ import annotations

import asyncio
import json

import pytest

from bluedove.core.queue_bounds import QueueBounds
from bluedove.store import keys as K
from bluedove.store.store import StoreLimits

pytestmark = pytest.mark.integration


def good(mid: str) -> str:
    return json.dumps({"id": mid, "attributes": {"x0": 1.5}, "payload": {"n": mid},
                       "published_at": "2026-11-22T00:00:00Z"})


# The message text a dispatcher stored for the payload "a\ud800b" before payloads were strict:
# a lone surrogate written out as UTF-8 bytes, which no UTF-8 decoder takes.
BAD = b'{"id":"bad","attributes":{"x0":1.5},"payload":"a\xed\xa0\x80b","published_at":"2026-11-22T00:00:00Z"}'
BIG = ('{"id":"big","attributes":{"x0":1.5},"payload":' + "9" * 5000 + ',"published_at":"2026-11-22T00:00:00Z"}')


@pytest.fixture
async def store(make_store):
    return make_store(StoreLimits(visibility_timeout_s=30))


def put(raw, queue: str, message: str | bytes) -> None:
    """One delivery written straight into the queue's stream, as a matcher writes it (DELIVER)."""
    raw.xadd(K.queue_stream(queue), {"m": message, "s": '["s1"]'})


async def test_a_poll_sets_an_undeliverable_delivery_aside_and_answers_the_rest(store, raw):
    """Before: the poll failed whole (UnicodeDecodeError reading the reply: a 500), its batch
    handed out to nobody until the visibility timeout, and again at every timeout after."""
    q, _ = await store.create_queue()
    for m in (good("m0"), BAD, good("m1")):
        put(raw, q, m)
    n, body = await store.poll_json(q, 10, 0)
    assert n == 2 and [m["id"] for m in json.loads(body)["messages"]] == ["m0", "m1"]
    assert store.undeliverable == 1
    assert await store.queue_depth(q) == 2  # the bad one left the queue; the others wait for their ack
    assert await store.poll_json(q, 10, 0) == (0, '{"messages":[]}')


async def test_a_long_poll_sets_aside_what_its_blocking_read_brings(store, raw):
    """The other way deliveries come out: a long-poll's blocking read, rendered in Python."""
    q, _ = await store.create_queue()
    waiting = asyncio.create_task(store.poll_json(q, 10, 3))
    await asyncio.sleep(0.2)
    with raw.pipeline(transaction=True) as p:  # both at once: the read takes them together
        p.xadd(K.queue_stream(q), {"m": BAD, "s": '["s1"]'})
        p.xadd(K.queue_stream(q), {"m": good("m0"), "s": '["s1"]'})
        p.execute()
    n, body = await waiting
    assert n == 1 and [m["id"] for m in json.loads(body)["messages"]] == ["m0"]
    assert store.undeliverable == 1 and await store.queue_depth(q) == 1


async def test_the_decoded_form_sets_aside_what_pythons_json_cannot_read(store, raw):
    """gRPC's Poll and Listen decode the body: a 5,000-digit integer (stored before payloads
    were strict) made them fail whole (ValueError: an UNKNOWN status). The REST body is
    spliced, not decoded: it still carries that delivery."""
    q, _ = await store.create_queue()
    other, _ = await store.create_queue()
    for queue in (q, other):
        for m in (good("m0"), BIG):
            put(raw, queue, m)
    assert [m["id"] for m in await store.poll(q, 10, 0)] == ["m0"]
    assert store.undeliverable == 1 and await store.queue_depth(q) == 1
    n, body = await store.poll_json(other, 10, 0)
    assert n == 2 and '"payload":' + "9" * 5000 in body


async def test_with_a_dead_letter_queue_it_moves_there_byte_for_byte(store, raw):
    dlq, _ = await store.create_queue()
    q, _ = await store.create_queue(QueueBounds(max_undelivered=10, dead_letter_queue=dlq, max_deliveries=3))
    for m in (BAD, good("m0")):
        put(raw, q, m)
    assert [m["id"] for m in await store.poll(q, 10, 0)] == ["m0"]
    info = await store.queue_info(q)
    assert info["dead_lettered"] == 1 and info["depth"] == 1
    ((_, fields),) = raw.xrange(K.queue_stream(dlq))
    assert fields == {b"m": BAD, b"s": b'["s1"]'}
    # The dead-letter queue's own poll cannot render it either (it has no dead-letter queue): removed.
    assert await store.poll_json(dlq, 10, 0) == (0, '{"messages":[]}')
    assert store.undeliverable == 2 and await store.queue_depth(dlq) == 0
