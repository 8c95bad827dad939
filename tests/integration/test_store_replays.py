"""The store's side of replay (bluedove/store/replays.py, message_log.py) against a real Redis:
a live delivery at a replay's seam and the replayed one of the same message reach the
subscription once, whichever comes first, while the queue's other subscriptions keep theirs;
writing either again writes nothing; the queue's cap holds for replayed deliveries; a replay's
lease is held by one worker at a time and only its holder records progress; the log's chunks
read back as they were appended, by position and up to an end; deleting the space purges its
log and its replays."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bluedove.core.log_chunk import chunk_fields, chunk_part
from bluedove.core.queue_bounds import QueueBounds
from bluedove.core.spaces import parse_space_spec
from bluedove.core.wire import ENDS, Part
from bluedove.store import keys as K
from bluedove.store.spaces import SpaceStore
from tests.integration.store_fixtures import message

pytestmark = pytest.mark.integration


def _messages(*mids: str) -> list[tuple[str, str, int]]:
    return [(*message(m), 600) for m in mids]


async def test_a_seam_delivery_and_a_replayed_one_reach_the_subscription_once(store):
    q, _ = await store.create_queue()
    msgs = _messages("m1", "m2")
    # m1: live first (the replaying subscription r and a plain one p), then replayed: nothing more for r
    seam = [(q, 0, json.dumps(["p", "r"]), ["r"])]
    assert await store.deliver(msgs, [], [False, False], seam) == (1, 1)
    assert await store.deliver_replayed(q, "r", [("m1", b'{"id":"m1","replayed":true}')]) == (0, 0)
    # m2: replayed first, then live: the live delivery keeps p only
    assert await store.deliver_replayed(q, "r", [("m2", b'{"id":"m2","replayed":true}')]) == (1, 0)
    seam = [(q, 1, json.dumps(["p", "r"]), ["r"])]
    assert await store.deliver(msgs, [], [False, False], seam) == (1, 1)
    got = await store.poll(q, 10, 0)
    assert [(d["id"], d["subscriptions"], d.get("replayed", False)) for d in got] == [
        ("m1", ["p", "r"], False), ("m2", ["r"], True), ("m2", ["p"], False)]
    # every write again: nothing new
    assert await store.deliver(msgs, [], [False, False], [(q, 0, json.dumps(["p", "r"]), ["r"])]) == (0, 0)
    assert await store.deliver_replayed(q, "r", [("m1", b"{}"), ("m2", b"{}")]) == (0, 0)
    assert await store.poll(q, 10, 0) == []


async def test_a_seam_delivery_left_with_no_subscription_is_not_written(store):
    q, _ = await store.create_queue()
    msgs = _messages("m1")
    assert await store.deliver_replayed(q, "r", [("m1", b'{"id":"m1"}')]) == (1, 0)
    assert await store.deliver(msgs, [], [False], [(q, 0, json.dumps(["r"]), ["r"])]) == (0, 0)
    assert [d["id"] for d in await store.poll(q, 10, 0)] == ["m1"]


async def test_a_queue_at_its_cap_holds_replayed_deliveries_back_and_drops_none(store):
    """The call stops before the first message the queue has no room for; once the consumer
    acked, the same messages again write the rest (the marks skip those written), in order."""
    q, _ = await store.create_queue(QueueBounds(max_undelivered=2))
    msgs = [(f"m{i}", json.dumps({"id": f"m{i}"}).encode()) for i in range(5)]
    assert await store.deliver_replayed(q, "r", msgs) == (2, True)
    assert int(await store.r.hget(K.queue_hash(q), "dropped") or 0) == 0
    got, answers = [], []
    for _ in range(3):
        batch = await store.poll(q, 10, 0)
        got += [d["id"] for d in batch]
        await store.ack(q, [d["receipt"] for d in batch])
        answers.append(await store.deliver_replayed(q, "r", msgs))
    assert answers == [(2, True), (1, False), (0, False)]  # the last: all written, nothing again
    assert got == [f"m{i}" for i in range(5)]


async def test_one_worker_holds_a_replays_lease_and_only_it_records_progress(store):
    await store.start_replay("orders", "s1", "q1", 1000, "0-0", 1000)
    assert await store.replays_under_way("orders") == ["s1"]
    assert await store.take_lease("orders", "s1", "a", 60_000) == 1
    assert await store.take_lease("orders", "s1", "b", 60_000) == 0  # a holds it
    assert not await store.advance("orders", "s1", "b", "5-0", 3, False)
    assert await store.advance("orders", "s1", "a", "5-0", 3, False)
    assert await store.take_lease("orders", "s1", "a", 0) == 1  # renewed, for no time at all
    assert await store.take_lease("orders", "s1", "b", 60_000) == 1  # expired: b takes over
    assert not await store.advance("orders", "s1", "a", "9-0", 1, True)
    assert await store.advance("orders", "s1", "b", "9-0", 1, True)
    state = await store.replay_state("orders", "s1")
    assert state is not None and state["pos"] == "9-0" and state["done"] == "1" and state["delivered"] == "4"
    assert await store.replays_under_way("orders") == []
    assert await store.take_lease("orders", "s1", "b", 60_000) == -1  # done


def _part(n: int, k: int, tag: str) -> Part:
    ids = [f"{tag}{i}".encode() for i in range(n)]
    bodies = [b'{"id":"%s"}' % i for i in ids]
    ends = lambda xs: np.cumsum([len(x) for x in xs]).astype(ENDS)  # noqa: E731
    return Part(0, np.arange(n * k, dtype=np.float64).reshape(n, k), b"".join(ids), ends(ids),
                b"".join(bodies), ends(bodies), np.zeros(n, dtype=np.bool_))


async def test_chunks_read_back_as_appended_by_position_and_up_to_an_end(store):
    parts = [_part(3, 2, "a"), _part(2, 2, "b")]
    call = store.log_call("orders", 4, 3600, chunk_fields(parts, 2))
    await store.runner.run([call])
    await store.runner.run([store.log_call("orders", 4, 3600, chunk_fields([_part(1, 2, "c")], 2))])
    ends = await store.log_ends("orders")
    assert [e == "0-0" for e in ends] == [n != 4 for n in range(16)]
    first = await store.read_log("orders", 4, "0-0", ends[4], 1)
    assert len(first) == 1
    part = chunk_part(first[0][1])
    assert part.n == 5 and [part.id(i) for i in range(5)] == ["a0", "a1", "a2", "b0", "b1"]
    assert part.body(3) == b'{"id":"b0"}' and part.points[4].tolist() == [2.0, 3.0]
    rest = await store.read_log("orders", 4, first[0][0], ends[4], 10)
    assert [chunk_part(f).id(0) for _, f in rest] == ["c0"]
    assert await store.read_log("orders", 4, first[0][0], first[0][0], 10) == []
    assert await store.log_entries("orders") == 2


async def test_deleting_a_space_purges_its_log_and_replays(store):
    spaces = SpaceStore(store.r)
    await spaces.create(parse_space_spec({"name": "orders", "retention_s": 3600,
                                          "attributes": [{"name": "total", "min": 0, "max": 10}]}))
    for shard in (0, 7, 15):
        await store.runner.run([store.log_call("orders", shard, 3600, chunk_fields([_part(2, 1, "m")], 1))])
    await store.start_replay("orders", "s1", "q1", 0, "0-0", 0)
    logged = [K.message_log("orders", n) for n in (0, 7, 15)]
    held = [*logged, K.space_replay("orders", "s1"), K.space_replays("orders")]
    assert await store.r.exists(*held) == len(held)
    assert await spaces.delete("orders") == 1
    for _ in range(50):
        if (await spaces.purge_step("orders")).done:
            break
    assert await store.r.exists(*held) == 0
