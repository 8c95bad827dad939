"""A stored delivery whose message holds NaN, Infinity or -Infinity (what Python's json wrote for a
payload number that is not finite, stored before publishing refused them) is set aside by a REST
poll, on a real Redis, as one whose text is not UTF-8 is (tests/integration/test_store_undeliverable.py):
the REST body stays strict JSON. The words inside a string are harmless and kept.

Before: the REST poll checked only that its body was UTF-8 and relayed `"payload":NaN`, a body
strict JSON parsers (a browser's JSON.parse, Go's encoding/json) refuse whole.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from bluedove.core.queue_bounds import QueueBounds
from bluedove.store import keys as K
from bluedove.store.store import StoreLimits

pytestmark = pytest.mark.integration


def message(mid: str, payload: str) -> str:
    """A message text as a dispatcher stored it, `payload` spliced in as JSON text."""
    return (f'{{"id":"{mid}","attributes":{{"x0":1.5}},"payload":{payload},'
            f'"published_at":"2026-11-22T00:00:00Z"}}')


# Payloads as an old dispatcher's json.dumps wrote them (allow_nan): not JSON.
NONFINITE = ["NaN", "Infinity", "-Infinity", '{"v":[1,NaN]}', '{"a":{"b":-Infinity}}', '[Infinity, "NaN"]',
             '["\\\\",NaN]']
# The words inside strings, keys and escapes: kept (the last is relayed as before, though strict
# parsers refuse its lone surrogate escape: not this check's concern).
HARMLESS = ['"NaN"', '{"Infinity":"-Infinity"}', '["a\\"NaN", "\\\\", "Infinity\\\\"]', '"NaNInfinity"',
            '["NaN", "\\ud800"]']


def strict(body: str) -> dict:
    def refuse(word: str) -> None:
        raise ValueError(f"{word} in the body")
    return json.loads(body, parse_constant=refuse)


@pytest.fixture
async def store(make_store):
    return make_store(StoreLimits(visibility_timeout_s=30))


def put(raw, queue: str, text: str) -> None:
    """One delivery written straight into the queue's stream, as a matcher writes it (DELIVER)."""
    raw.xadd(K.queue_stream(queue), {"m": text, "s": '["s1"]'})


async def test_a_rest_poll_sets_aside_a_stored_nan_and_answers_strict_json(store, raw):
    q, _ = await store.create_queue()
    put(raw, q, message("m0", "1"))
    for i, payload in enumerate(NONFINITE):
        put(raw, q, message(f"bad{i}", payload))
    for i, payload in enumerate(HARMLESS):
        put(raw, q, message(f"ok{i}", payload))
    n, body = await store.poll_json(q, 20, 0)
    got = strict(body)["messages"]
    assert n == 1 + len(HARMLESS) and [m["id"] for m in got] == ["m0"] + [f"ok{i}" for i in range(len(HARMLESS))]
    assert [m["payload"] for m in got[1:]] == [json.loads(p) for p in HARMLESS]
    assert store.undeliverable == len(NONFINITE)
    assert await store.queue_depth(q) == 1 + len(HARMLESS)  # the bad ones left the queue
    assert await store.poll_json(q, 20, 0) == (0, '{"messages":[]}')


async def test_the_words_inside_strings_cost_no_delivery(store, raw):
    q, _ = await store.create_queue()
    for i, payload in enumerate(HARMLESS):
        put(raw, q, message(f"ok{i}", payload))
    n, body = await store.poll_json(q, 20, 0)
    assert n == len(HARMLESS) and len(strict(body)["messages"]) == n and store.undeliverable == 0


async def test_a_long_poll_sets_aside_a_nan_its_blocking_read_brings(store, raw):
    q, _ = await store.create_queue()
    waiting = asyncio.create_task(store.poll_json(q, 10, 3))
    await asyncio.sleep(0.2)
    with raw.pipeline(transaction=True) as p:  # both at once: the read takes them together
        p.xadd(K.queue_stream(q), {"m": message("bad", "NaN"), "s": '["s1"]'})
        p.xadd(K.queue_stream(q), {"m": message("m0", '"NaN"'), "s": '["s1"]'})
        p.execute()
    n, body = await waiting
    assert n == 1 and [m["id"] for m in strict(body)["messages"]] == ["m0"]
    assert store.undeliverable == 1 and await store.queue_depth(q) == 1


async def test_with_a_dead_letter_queue_a_nan_moves_there_byte_for_byte(store, raw):
    dlq, _ = await store.create_queue()
    q, _ = await store.create_queue(QueueBounds(max_undelivered=10, dead_letter_queue=dlq, max_deliveries=3))
    bad = message("bad", '{"v":-Infinity}')
    for text in (bad, message("m0", "2")):
        put(raw, q, text)
    n, body = await store.poll_json(q, 10, 0)
    assert n == 1 and [m["id"] for m in strict(body)["messages"]] == ["m0"]
    assert (await store.queue_info(q))["dead_lettered"] == 1
    ((_, fields),) = raw.xrange(K.queue_stream(dlq))
    assert fields == {b"m": bad.encode(), b"s": b'["s1"]'}
