"""bluedove/store/store.py against a real redis-server: queues and tokens, the catalogue.
(Deliveries, queue deletion and cluster state: test_store_deliveries.py.)"""

from __future__ import annotations

import asyncio
import json

import pytest

from bluedove.store import keys as K
from bluedove.store.ids import hash_token, valid_receipt
from bluedove.store.store import LimitExceeded, QueueMissing, StoreLimits
from tests.integration.store_fixtures import current_catalogue, replay, stream_order, sub_json

pytestmark = pytest.mark.integration


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
    assert await store.r.hget(K.queue_hash(queue), "token") == hash_token(token)
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
    assert await store.get_subscription("s1", queue) == s
    other, _ = await store.create_queue()
    assert await store.get_subscription("s1", other) is None  # asked of another queue: none
    removed = await store.remove_subscription("s1", queue)
    assert removed is not None and stream_order(removed) > stream_order(log_id)
    assert await store.get_subscription("s1", queue) is None


async def test_unknown_subscription_is_none(store):
    assert await store.get_subscription("nope", "some-queue") is None


async def test_removing_twice_or_from_another_queue_removes_nothing(store):
    queue, _ = await store.create_queue()
    other, _ = await store.create_queue()
    await store.add_subscription(sub_json("s1", queue))
    assert await store.remove_subscription("s1", other) is None
    assert await store.get_subscription("s1", queue) is not None  # a wrong queue cannot remove it
    assert await store.remove_subscription("s1", queue) is not None
    assert await store.remove_subscription("s1", queue) is None
    assert [c["op"] for c in (await store.catalogue_changes("0-0"))[1]] == ["add", "remove"]


async def test_adding_to_a_missing_queue_raises_and_stores_nothing(store):
    with pytest.raises(QueueMissing):
        await store.add_subscription(sub_json("s1", "no-such-queue"))
    assert await store.get_subscription("s1", "no-such-queue") is None
    assert (await store.catalogue_changes("0-0"))[1] == []


async def test_per_queue_limit_raises_and_stores_nothing(make_store):
    store = make_store(StoreLimits(max_subscriptions_per_queue=3))
    queue, _ = await store.create_queue()
    other, _ = await store.create_queue()
    for j in range(3):
        await store.add_subscription(sub_json(f"s{j}", queue))
    with pytest.raises(LimitExceeded):
        await store.add_subscription(sub_json("s3", queue))
    assert await store.get_subscription("s3", queue) is None
    assert await store.r.scard(K.queue_subs(queue)) == 3
    assert len((await store.catalogue_changes("0-0"))[1]) == 3  # no log entry for the refused one
    # the limit is per queue
    await store.add_subscription(sub_json("t0", other))
    # and a removal makes room again
    await store.remove_subscription("s0", queue)
    await store.add_subscription(sub_json("s3", queue))
    assert await store.get_subscription("s3", queue) is not None


async def test_default_limit_is_ten_thousand_per_queue():
    assert StoreLimits().max_subscriptions_per_queue == 10_000


async def test_catalogue_changes_are_the_log_in_order(store):
    queue, _ = await store.create_queue()
    a, b = sub_json("a", queue), sub_json("b", queue, {"x1": [5, 6]})
    await store.add_subscription(a)
    await store.add_subscription(b)
    await store.remove_subscription("a", queue)
    shard = K.shard_of(queue)  # a queue's subscriptions are all in its shard's log
    changes = await store.catalogue_tail(shard, "0-0")
    assert [(c["op"], c["id"]) for _, c in changes] == [("add", "a"), ("add", "b"), ("remove", "a")]
    assert json.loads(changes[1][1]["sub"]) == b
    assert "sub" not in changes[2][1]
    ids = [eid for eid, _ in changes]
    assert ids == sorted(ids, key=stream_order)
    # reading after an entry gives only what follows it
    assert [c["id"] for _, c in await store.catalogue_tail(shard, ids[0])] == ["b", "a"]
    assert await store.catalogue_tail(shard, ids[-1]) == []
    # all shards at once: the same changes, and a position at the last of them
    pos, every = await store.catalogue_changes("0-0")
    assert every == [c for _, c in changes] and K.pos_of(pos, shard) == ids[-1]
    assert await store.catalogue_changes(pos) == (pos, [])
    assert await store.catalogue_changes(K.pos_with(pos, shard, ids[0])) == (pos, [c for _, c in changes[1:]])


async def test_catalogue_changes_long_polls_for_the_next_change(make_store):
    reader, writer = make_store(), make_store()
    queue, _ = await writer.create_queue()
    pos, _ = await reader.catalogue_snapshot()
    shard = K.shard_of(queue)
    task = asyncio.create_task(reader.catalogue_tail(shard, K.pos_of(pos, shard), block_ms=10_000))
    await asyncio.sleep(0.2)
    assert not task.done()
    await writer.add_subscription(sub_json("s1", queue))
    changes = await asyncio.wait_for(task, 5)
    assert [c["id"] for _, c in changes] == ["s1"]


async def test_one_read_tails_a_group_of_shards(make_store):
    """`catalogue_tail_many` over each group `catalogue_read_groups` gives (every shard at once
    on one server, one each on a cluster): a blocked read wakes for a write to any shard of its
    group, and a read hands out each shard's entries after its own id, in order."""
    reader, writer = make_store(), make_store()
    queues = {}
    while len(queues) < 3:  # queues of three different shards
        q, _ = await writer.create_queue()
        queues.setdefault(K.shard_of(q), q)
    pos, _ = await reader.catalogue_snapshot()
    groups = reader.catalogue_read_groups()
    assert sorted(s for g in groups for s in g) == list(range(K.CATALOG_SHARDS))
    assert len(groups) == (K.CATALOG_SHARDS if reader.runner.cluster else 1)
    group_of = {s: g for g in groups for s in g}
    shards = list(queues)
    last = shards[-1]
    after = {s: K.pos_of(pos, s) for s in group_of[last]}
    task = asyncio.create_task(reader.catalogue_tail_many(after, block_ms=10_000))
    await asyncio.sleep(0.2)
    assert not task.done()
    await writer.add_subscription(sub_json("w", queues[last]))
    woke = await asyncio.wait_for(task, 5)
    assert list(woke) == [last] and [f["id"] for _, f in woke[last]] == ["w"]
    for i, (shard, q) in enumerate(queues.items()):
        for j in range(2):
            await writer.add_subscription(sub_json(f"s{i}{j}", q))
    got: dict[int, list] = {}
    for g in groups:
        got.update(await reader.catalogue_tail_many({s: K.pos_of(pos, s) for s in g}))
    want = {s: [f"s{i}0", f"s{i}1"] for i, s in enumerate(shards)}
    want[last] = ["w", *want[last]]
    assert {s: [f["id"] for _, f in e] for s, e in got.items()} == want
    # after the first of a shard's entries: only the ones that follow it
    first = got[shards[0]][0][0]
    rest = await reader.catalogue_tail_many({s: (first if s == shards[0] else K.pos_of(pos, s))
                                             for s in group_of[shards[0]]})
    assert [f["id"] for _, f in rest[shards[0]]] == ["s01"]


async def test_catalogue_changes_blocking_times_out_empty(store):
    pos, _ = await store.catalogue_snapshot()
    assert await store.catalogue_tail(3, K.pos_of(pos, 3), block_ms=100) == []


async def test_snapshot_of_an_empty_catalogue(store):
    pos, subs = await store.catalogue_snapshot()
    assert subs == [] and K.parse_pos(pos) == ["0-0"] * K.CATALOG_SHARDS


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

    async def position_then_changes(space: str = "default") -> str:
        pos = await position(space)
        for _ in range(20):
            await step()
        return pos

    store.catalogue_position = position_then_changes
    pos, subs = await store.catalogue_snapshot()
    ids = {s["id"] for s in subs}
    # the scan saw the 20 changes made after the position, which the log after it holds again
    assert {f"n{j}" for j in range(20)} <= ids and not ids & {f"s{j}" for j in range(20)}
    assert len((await store.catalogue_changes(pos, count=100))[1]) == 40
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
