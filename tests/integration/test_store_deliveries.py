"""bluedove/store/store.py against a real redis-server: deliveries with dedup, long-poll,
visibility timeout and ack, queue deletion, cluster state."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from bluedove.store import keys as K
from bluedove.store.ids import first_invalid_receipt, valid_receipt
from bluedove.store.store import QueueMissing, StoreLimits
from tests.integration.store_fixtures import message, sub_json

pytestmark = pytest.mark.integration


# == deliveries =======================================================================================


async def test_deliver_writes_each_delivery_once_and_poll_returns_them(store):
    q1, _ = await store.create_queue()
    q2, _ = await store.create_queue()
    messages = [message("m1"), message("m2")]
    deliveries = [(q1, 0, json.dumps(["s1", "s2"])), (q2, 0, json.dumps(["s9"])), (q1, 1, json.dumps(["s1"]))]
    assert await store.deliver(messages, deliveries) == (2, 3)
    assert await store.queue_depth(q1) == 2 and await store.queue_depth(q2) == 1

    got = await store.poll(q1, 10, 0)
    assert [d["id"] for d in got] == ["m1", "m2"]
    assert [d["subscriptions"] for d in got] == [["s1", "s2"], ["s1"]]
    assert got[0]["payload"] == {"n": "m1"} and got[0]["attributes"] == {"x0": 1, "x1": 2, "x2": 3, "x3": 4}
    assert got[0]["published_at"] == "2024-06-01T00:00:00Z"
    assert all(valid_receipt(d["receipt"]) for d in got)
    assert len({d["receipt"] for d in got}) == 2
    assert [d["id"] for d in await store.poll(q2, 10, 0)] == ["m1"]


async def test_backlog_sums_the_queue_depths_in_chunks(store):
    q1, _ = await store.create_queue()
    q2, _ = await store.create_queue()
    deliveries = [(q1, 0, json.dumps(["s1"])), (q2, 0, json.dumps(["s9"])), (q1, 1, json.dumps(["s1"]))]
    await store.deliver([message("m1"), message("m2")], deliveries)
    assert await store.backlog([q1, q2]) == await store.backlog([q1, q2, "nothing"], chunk=1) == 3
    assert await store.backlog([]) == 0


async def test_redelivering_a_message_id_writes_nothing(store):
    queue, _ = await store.create_queue()
    deliveries = [(queue, 0, json.dumps(["s1"]))]
    assert await store.deliver([message("m1")], deliveries) == (1, 1)
    # a retry through another candidate matcher, even with other deliveries listed
    other, _ = await store.create_queue()
    assert await store.deliver([message("m1")], deliveries + [(other, 0, json.dumps(["s2"]))]) == (0, 0)
    assert await store.queue_depth(queue) == 1
    assert await store.queue_depth(other) == 0


async def test_a_batch_mixing_seen_and_new_messages_writes_only_the_new(store):
    queue, _ = await store.create_queue()
    await store.deliver([message("old")], [(queue, 0, "[\"s1\"]")])
    fresh, written = await store.deliver(
        [message("old"), message("new"), message("new")],  # "new" twice in one batch, too
        [(queue, 0, "[\"s1\"]"), (queue, 1, "[\"s1\"]"), (queue, 2, "[\"s1\"]")],
    )
    assert (fresh, written) == (1, 1)
    assert [d["id"] for d in await store.poll(queue, 10, 0)] == ["old", "new"]


async def test_a_message_matching_nothing_is_still_marked_seen(store):
    queue, _ = await store.create_queue()
    assert await store.deliver([message("m1")], []) == (1, 0)
    assert await store.deliver([message("m1")], [(queue, 0, "[\"s1\"]")]) == (0, 0)


async def test_dedup_marks_expire_after_the_window(make_store):
    store = make_store(StoreLimits(dedup_window_s=120))
    queue, _ = await store.create_queue()
    await store.deliver([message("m1")], [(queue, 0, "[]")])
    ttl = await store.r.ttl(K.delivery_mark(queue, "m1"))
    assert 0 < ttl <= 120


async def test_deliveries_to_a_deleted_or_unknown_queue_are_dropped(store):
    queue, _ = await store.create_queue()
    await store.delete_queue(queue)
    fresh, written = await store.deliver([message("m1")], [(queue, 0, "[\"s1\"]"), ("never-made", 0, "[\"s2\"]")])
    assert (fresh, written) == (1, 0)
    assert not await store.r.exists(K.queue_stream(queue))  # NOMKSTREAM: not resurrected
    assert not await store.r.exists(K.queue_stream("never-made"))


async def test_poll_returns_at_most_max(store):
    queue, _ = await store.create_queue()
    await store.deliver([message(f"m{j}") for j in range(5)], [(queue, j, "[]") for j in range(5)])
    assert [d["id"] for d in await store.poll(queue, 2, 0)] == ["m0", "m1"]
    assert [d["id"] for d in await store.poll(queue, 2, 0)] == ["m2", "m3"]
    assert [d["id"] for d in await store.poll(queue, 2, 0)] == ["m4"]
    assert await store.poll(queue, 2, 0) == []


async def test_poll_of_an_empty_queue_without_wait_returns_at_once(store):
    queue, _ = await store.create_queue()
    t0 = time.monotonic()
    assert await store.poll(queue, 10, 0) == []
    assert time.monotonic() - t0 < 2.0


async def test_long_poll_waits_the_whole_wait_when_nothing_comes(store):
    queue, _ = await store.create_queue()
    t0 = time.monotonic()
    assert await store.poll(queue, 10, 0.6) == []
    assert time.monotonic() - t0 >= 0.55


async def test_long_poll_returns_when_a_delivery_arrives(make_store):
    reader, writer = make_store(), make_store()
    queue, _ = await reader.create_queue()
    t0 = time.monotonic()
    task = asyncio.create_task(reader.poll(queue, 10, 10))
    await asyncio.sleep(0.3)
    assert not task.done()  # waiting
    await writer.deliver([message("m1")], [(queue, 0, "[\"s1\"]")])
    got = await asyncio.wait_for(task, 8)
    assert [d["id"] for d in got] == ["m1"]
    assert time.monotonic() - t0 < 8.0  # well before the 10 s wait ran out


async def test_unacked_deliveries_come_back_after_the_visibility_timeout(make_store):
    store = make_store(StoreLimits(visibility_timeout_s=0.5))
    queue, _ = await store.create_queue()
    await store.deliver([message("m1"), message("m2")], [(queue, 0, "[\"s1\"]"), (queue, 1, "[\"s1\"]")])
    first = await store.poll(queue, 10, 0)
    assert [d["id"] for d in first] == ["m1", "m2"]
    assert await store.poll(queue, 10, 0) == []  # invisible for now
    await asyncio.sleep(0.8)
    again = await store.poll(queue, 10, 0)
    assert [d["id"] for d in again] == ["m1", "m2"]
    assert [d["receipt"] for d in again] == [d["receipt"] for d in first]
    assert again[0]["subscriptions"] == ["s1"]


async def test_a_long_poll_picks_up_a_delivery_whose_visibility_expires_while_waiting(make_store):
    store = make_store(StoreLimits(visibility_timeout_s=0.5))
    queue, _ = await store.create_queue()
    await store.deliver([message("m1")], [(queue, 0, "[]")])
    assert len(await store.poll(queue, 10, 0)) == 1
    got = await store.poll(queue, 10, 5)
    assert [d["id"] for d in got] == ["m1"]


async def test_acked_deliveries_do_not_come_back(make_store):
    store = make_store(StoreLimits(visibility_timeout_s=0.5))
    queue, _ = await store.create_queue()
    await store.deliver([message(f"m{j}") for j in range(3)], [(queue, j, "[]") for j in range(3)])
    got = await store.poll(queue, 10, 0)
    assert await store.ack(queue, [got[0]["receipt"], got[2]["receipt"]]) == 2
    assert await store.queue_depth(queue) == 1
    await asyncio.sleep(0.8)
    assert [d["id"] for d in await store.poll(queue, 10, 0)] == ["m1"]  # only the unacked one


async def test_ack_of_nothing_or_of_unknown_receipts_acks_nothing(store):
    queue, _ = await store.create_queue()
    await store.deliver([message("m1")], [(queue, 0, "[]")])
    assert await store.ack(queue, []) == 0
    assert await store.ack(queue, ["1-0"]) == 0
    assert await store.queue_depth(queue) == 1


async def test_acking_twice_counts_once(store):
    queue, _ = await store.create_queue()
    await store.deliver([message("m1")], [(queue, 0, "[]")])
    (d,) = await store.poll(queue, 1, 0)
    assert await store.ack(queue, [d["receipt"]]) == 1
    assert await store.ack(queue, [d["receipt"]]) == 0


@pytest.mark.parametrize("receipt, ok", [
    ("1717200000000-0", True),
    ("0-0", True),
    ("1-", False),
    ("-1", False),
    ("abc", False),
    ("1-0 ", False),
    ("1-0\n", False),
    ("1" * 21 + "-0", False),
    (17, False),
    (None, False),
])
def test_valid_receipt(receipt, ok):
    assert valid_receipt(receipt) is ok


@pytest.mark.parametrize("receipts, first_bad", [
    ([], None),
    (["1-0"], None),
    (["1717200000000-0", "1717200000000-1", "0-0"], None),
    ([""], 0),
    (["1-0", ""], 1),
    (["1-0,2-0"], 0),
    (["1-0", "2-0,"], 1),
    (["1-0", 17], 1),
    (["1-0", None, "x"], 1),
    (["1-0\n"], 0),
    (["1-0", "1" * 21 + "-0"], 1),
])
def test_first_invalid_receipt_names_the_first_bad_item(receipts, first_bad):
    assert first_invalid_receipt(receipts) == first_bad
    assert first_bad == next((i for i, r in enumerate(receipts) if not valid_receipt(r)), None)


# == deleting a queue =================================================================================


async def test_delete_queue_removes_its_subscriptions_stream_and_token(store):
    queue, token = await store.create_queue()
    other, other_token = await store.create_queue()
    for sid in ("s1", "s2"):
        await store.add_subscription(sub_json(sid, queue))
    await store.add_subscription(sub_json("keep", other))
    await store.deliver([message("m1")], [(queue, 0, "[]"), (other, 0, "[]")])
    pos, _ = await store.catalogue_snapshot()

    assert sorted(await store.delete_queue(queue)) == ["s1", "s2"]

    assert await store.get_subscription("s1", queue) is None and await store.get_subscription("s2", queue) is None
    assert not await store.check_token(queue, token)
    assert await store.queue_for_token(token) is None
    for key in (K.queue_hash(queue), K.queue_subs(queue), K.queue_stream(queue)):
        assert not await store.r.exists(key)
    # the matchers hear of each removal through the log
    assert (sorted((c["op"], c["id"]) for c in (await store.catalogue_changes(pos))[1])
            == [("remove", "s1"), ("remove", "s2")])
    # new subscriptions cannot be added to it
    with pytest.raises(QueueMissing):
        await store.add_subscription(sub_json("s3", queue))
    # the other queue is untouched
    assert await store.check_token(other, other_token)
    assert await store.get_subscription("keep", other) is not None
    assert await store.queue_depth(other) == 1


async def test_deleting_a_queue_without_subscriptions_or_twice(store):
    queue, _ = await store.create_queue()
    assert await store.delete_queue(queue) == []
    assert await store.delete_queue(queue) == []
    assert await store.delete_queue("never-made") == []
    assert (await store.catalogue_changes("0-0"))[1] == []


# == cluster state =====================================================================================


async def test_segment_table_round_trip(store):
    assert await store.get_table() is None
    table = {"epoch": 2, "cuts": [[0.0, 500.0]], "owners": [["m1", "m2"]]}
    await store.put_table_if(0, table)  # (0: none stored yet)
    assert await store.get_table() == table


async def test_a_table_change_is_compare_and_set_on_the_epoch(store):
    assert not await store.put_table_if(3, {"epoch": 4})  # nothing stored, 3 expected: refused
    assert await store.put_table_if(0, {"epoch": 1})
    assert await store.put_table_if(1, {"epoch": 2})
    # Two matchers propose epoch 3 from epoch 2: only the first lands.
    assert await store.put_table_if(2, {"epoch": 3, "by": "m1"})
    assert not await store.put_table_if(2, {"epoch": 3, "by": "m2"})
    assert await store.get_table() == {"epoch": 3, "by": "m1"}


async def test_the_event_log_is_bounded_and_oldest_first(store):
    for i in range(7):
        await store.add_event({"n": i}, keep=5)
    assert [e["n"] for e in await store.events(limit=10)] == [2, 3, 4, 5, 6]
    assert [e["n"] for e in await store.events(limit=2)] == [5, 6]
    assert await store.event_counts() == {"other": 7}  # counted, not trimmed


async def test_the_autoscaler_state_expires_when_not_refreshed(store):
    assert await store.get_autoscaler() is None
    await store.put_autoscaler({"enabled": True, "min": 2}, ttl_s=1)
    assert await store.get_autoscaler() == {"enabled": True, "min": 2}
    await asyncio.sleep(1.2)
    assert await store.get_autoscaler() is None
