"""bluedove/store/store.py against a real redis-server: queues and tokens, the catalogue,
deliveries with dedup, long-poll, visibility timeout and ack, queue deletion."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable

import pytest

from bluedove.store.store import (
    LimitExceeded,
    QueueMissing,
    Store,
    StoreLimits,
    hash_token,
    first_invalid_receipt,
    valid_receipt,
)

pytestmark = pytest.mark.integration


@pytest.fixture
async def make_store(redis_clean_url: str) -> AsyncIterator[Callable[..., Store]]:
    """Build Stores on the clean test Redis (optionally with limits); all closed afterwards."""
    made: list[Store] = []

    def make(limits: StoreLimits | None = None) -> Store:
        made.append(Store(redis_clean_url, limits))
        return made[-1]

    yield make
    for s in made:
        await s.close()


@pytest.fixture
def store(make_store) -> Store:
    """A Store with the default limits on an empty Redis."""
    return make_store()


def stream_order(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


def sub_json(sub_id: str, queue: str, predicates: dict | None = None) -> dict:
    return {"id": sub_id, "queue": queue, "predicates": predicates or {"x0": [0, 100]}}


def message(mid: str, **extra) -> tuple[str, str]:
    body = {"id": mid, "attributes": {"x0": 1, "x1": 2, "x2": 3, "x3": 4}, "payload": {"n": mid},
            "published_at": "2024-06-01T00:00:00Z", **extra}
    return mid, json.dumps(body)


async def replay(store: Store, after: str, known: dict[str, dict]) -> dict[str, dict]:
    """Apply every catalogue change after `after` to `known` ({id: sub}), in log order."""
    out = dict(known)
    while True:
        changes = await store.catalogue_changes(after, count=500)
        if not changes:
            return out
        for after, change in changes:
            if change["op"] == "add":
                out[change["id"]] = json.loads(change["sub"])
            else:
                assert change["op"] == "remove"
                out.pop(change["id"], None)


async def current_catalogue(store: Store) -> dict[str, dict]:
    return {k: json.loads(v) for k, v in (await store.r.hgetall("bd:subs")).items()}


# == queues and tokens =============================================================================


async def test_create_queue_returns_a_token_that_check_token_accepts(store):
    queue, token = await store.create_queue()
    assert queue and token and queue != token
    assert await store.check_token(queue, token) is True


async def test_tokens_carry_the_prefix_and_never_look_like_a_flag(store):
    made = [token for _, token in await store.create_queues(300)] + [(await store.create_queue())[1]]
    # Unprefixed url-safe tokens start with '-' once in 64; `bluedove poll Q --token -…` then failed.
    assert all(t.startswith("bdq_") and len(t) == 4 + 43 for t in made)
    assert len(set(made)) == len(made)


async def test_each_queue_gets_its_own_id_and_token(store):
    (q1, t1), (q2, t2) = await store.create_queue(), await store.create_queue()
    assert q1 != q2 and t1 != t2
    assert not await store.check_token(q1, t2)
    assert not await store.check_token(q2, t1)


@pytest.mark.parametrize("which", ["wrong token", "no token", "empty token", "missing queue", "empty queue id"])
async def test_bad_credentials_are_rejected_alike(store, which):
    queue, token = await store.create_queue()
    args = {
        "wrong token": (queue, token + "x"),
        "no token": (queue, None),
        "empty token": (queue, ""),
        "missing queue": ("no-such-queue", token),
        "empty queue id": ("", token),
    }[which]
    assert await store.check_token(*args) is False


async def test_only_the_tokens_hash_is_stored(store):
    queue, token = await store.create_queue()
    assert await store.r.hget(f"bd:q:{queue}", "token") == hash_token(token)
    for key in [k async for k in store.r.scan_iter("*")]:
        assert token not in key
        kind = await store.r.type(key)
        if kind == "string":
            assert token not in await store.r.get(key)
        elif kind == "hash":
            assert token not in json.dumps(await store.r.hgetall(key))


async def test_queue_for_token(store):
    queue, token = await store.create_queue()
    other, other_token = await store.create_queue()
    assert await store.queue_for_token(token) == queue
    assert await store.queue_for_token(other_token) == other
    assert await store.queue_for_token(token + "x") is None
    assert await store.queue_for_token("") is None
    assert await store.queue_for_token(None) is None


# == the catalogue ====================================================================================


async def test_add_get_and_remove_a_subscription(store):
    queue, _ = await store.create_queue()
    s = sub_json("s1", queue, {"x0": [1.5, 2], "x3": [0, 1000]})
    log_id = await store.add_subscription(s)
    assert valid_receipt(log_id)  # a stream id
    assert await store.get_subscription("s1") == s
    removed = await store.remove_subscription("s1", queue)
    assert removed is not None and stream_order(removed) > stream_order(log_id)
    assert await store.get_subscription("s1") is None


async def test_unknown_subscription_is_none(store):
    assert await store.get_subscription("nope") is None


async def test_removing_twice_or_from_another_queue_removes_nothing(store):
    queue, _ = await store.create_queue()
    other, _ = await store.create_queue()
    await store.add_subscription(sub_json("s1", queue))
    assert await store.remove_subscription("s1", other) is None
    assert await store.get_subscription("s1") is not None  # a wrong queue cannot remove it
    assert await store.remove_subscription("s1", queue) is not None
    assert await store.remove_subscription("s1", queue) is None
    assert [c["op"] for _, c in await store.catalogue_changes("0-0")] == ["add", "remove"]


async def test_adding_to_a_missing_queue_raises_and_stores_nothing(store):
    with pytest.raises(QueueMissing):
        await store.add_subscription(sub_json("s1", "no-such-queue"))
    assert await store.get_subscription("s1") is None
    assert await store.catalogue_changes("0-0") == []


async def test_per_queue_limit_raises_and_stores_nothing(make_store):
    store = make_store(StoreLimits(max_subscriptions_per_queue=3))
    queue, _ = await store.create_queue()
    other, _ = await store.create_queue()
    for j in range(3):
        await store.add_subscription(sub_json(f"s{j}", queue))
    with pytest.raises(LimitExceeded):
        await store.add_subscription(sub_json("s3", queue))
    assert await store.get_subscription("s3") is None
    assert await store.r.scard(f"bd:q:{queue}:subs") == 3
    assert len(await store.catalogue_changes("0-0")) == 3  # no log entry for the refused one
    # the limit is per queue
    await store.add_subscription(sub_json("t0", other))
    # and a removal makes room again
    await store.remove_subscription("s0", queue)
    await store.add_subscription(sub_json("s3", queue))
    assert await store.get_subscription("s3") is not None


async def test_default_limit_is_ten_thousand_per_queue():
    assert StoreLimits().max_subscriptions_per_queue == 10_000


async def test_catalogue_changes_are_the_log_in_order(store):
    queue, _ = await store.create_queue()
    a, b = sub_json("a", queue), sub_json("b", queue, {"x1": [5, 6]})
    await store.add_subscription(a)
    await store.add_subscription(b)
    await store.remove_subscription("a", queue)
    changes = await store.catalogue_changes("0-0")
    assert [(c["op"], c["id"]) for _, c in changes] == [("add", "a"), ("add", "b"), ("remove", "a")]
    assert json.loads(changes[1][1]["sub"]) == b
    assert "sub" not in changes[2][1]
    ids = [eid for eid, _ in changes]
    assert ids == sorted(ids, key=stream_order)
    # reading after an entry gives only what follows it
    assert [c["id"] for _, c in await store.catalogue_changes(ids[0])] == ["b", "a"]
    assert await store.catalogue_changes(ids[-1]) == []


async def test_catalogue_changes_long_polls_for_the_next_change(make_store):
    reader, writer = make_store(), make_store()
    queue, _ = await writer.create_queue()
    pos, _ = await reader.catalogue_snapshot()
    task = asyncio.create_task(reader.catalogue_changes(pos, block_ms=10_000))
    await asyncio.sleep(0.2)
    assert not task.done()
    await writer.add_subscription(sub_json("s1", queue))
    changes = await asyncio.wait_for(task, 5)
    assert [c["id"] for _, c in changes] == ["s1"]


async def test_catalogue_changes_blocking_times_out_empty(store):
    pos, _ = await store.catalogue_snapshot()
    assert await store.catalogue_changes(pos, block_ms=100) == []


async def test_snapshot_of_an_empty_catalogue(store):
    assert await store.catalogue_snapshot() == ("0-0", [])


async def test_snapshot_then_replay_gives_the_current_catalogue(store):
    queue, _ = await store.create_queue()
    for j in range(10):
        await store.add_subscription(sub_json(f"s{j}", queue, {"x0": [j, j + 1]}))
    pos, subs = await store.catalogue_snapshot()
    assert sorted(s["id"] for s in subs) == [f"s{j}" for j in range(10)]
    await store.remove_subscription("s3", queue)
    await store.add_subscription(sub_json("late", queue))
    known = await replay(store, pos, {s["id"]: s for s in subs})
    assert known == await current_catalogue(store)
    assert "s3" not in known and "late" in known


async def test_snapshot_with_changes_racing_it_replays_to_the_exact_catalogue(make_store):
    # Changes land between the log position and the scan (forced: the position read is made to
    # wait for 20 churn steps), and a writer keeps adding and removing during the scan as well;
    # snapshot + replay must still give exactly what is stored.
    store, writer = make_store(), make_store()
    queue, _ = await store.create_queue()
    for start in range(0, 4500, 50):
        await asyncio.gather(*(store.add_subscription(sub_json(f"s{j}", queue, {"x0": [j % 999, 999]}))
                               for j in range(start, start + 50)))
    done = asyncio.Event()
    writes = 0

    async def step() -> None:
        nonlocal writes
        await writer.add_subscription(sub_json(f"n{writes}", queue))
        await writer.remove_subscription(f"s{writes}", queue)
        writes += 1

    async def churn() -> None:
        while not done.is_set():
            await step()

    position = store.catalogue_position

    async def position_then_changes() -> str:
        pos = await position()
        for _ in range(20):
            await step()
        return pos

    store.catalogue_position = position_then_changes
    pos, subs = await store.catalogue_snapshot()
    ids = {s["id"] for s in subs}
    # the scan saw the 20 changes made after the position, which the log after it holds again
    assert {f"n{j}" for j in range(20)} <= ids and not ids & {f"s{j}" for j in range(20)}
    assert len(await store.catalogue_changes(pos, count=100)) == 40
    store.catalogue_position = position
    known = await replay(store, pos, {s["id"]: s for s in subs})
    assert known == await current_catalogue(store)

    task = asyncio.create_task(churn())  # and with a writer running through the scan
    await asyncio.sleep(0.05)
    pos, subs = await store.catalogue_snapshot()
    await asyncio.sleep(0.05)
    done.set()
    await task
    assert writes > 20
    known = await replay(store, pos, {s["id"]: s for s in subs})
    assert known == await current_catalogue(store)
    assert len(known) == 4500  # every churn step adds one and removes one


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
    ttl = await store.r.ttl("bd:dd:m1")
    assert 0 < ttl <= 120


async def test_deliveries_to_a_deleted_or_unknown_queue_are_dropped(store):
    queue, _ = await store.create_queue()
    await store.delete_queue(queue)
    fresh, written = await store.deliver([message("m1")], [(queue, 0, "[\"s1\"]"), ("never-made", 0, "[\"s2\"]")])
    assert (fresh, written) == (1, 0)
    assert not await store.r.exists(f"bd:q:{queue}:s")  # NOMKSTREAM: not resurrected
    assert not await store.r.exists("bd:q:never-made:s")


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

    assert await store.get_subscription("s1") is None and await store.get_subscription("s2") is None
    assert not await store.check_token(queue, token)
    assert await store.queue_for_token(token) is None
    assert not await store.r.exists(f"bd:q:{queue}", f"bd:q:{queue}:subs", f"bd:q:{queue}:s")
    # the matchers hear of each removal through the log
    assert sorted((c["op"], c["id"]) for _, c in await store.catalogue_changes(pos)) == [("remove", "s1"), ("remove", "s2")]
    # new subscriptions cannot be added to it
    with pytest.raises(QueueMissing):
        await store.add_subscription(sub_json("s3", queue))
    # the other queue is untouched
    assert await store.check_token(other, other_token)
    assert await store.get_subscription("keep") is not None
    assert await store.queue_depth(other) == 1


async def test_deleting_a_queue_without_subscriptions_or_twice(store):
    queue, _ = await store.create_queue()
    assert await store.delete_queue(queue) == []
    assert await store.delete_queue(queue) == []
    assert await store.delete_queue("never-made") == []
    assert await store.catalogue_changes("0-0") == []


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
