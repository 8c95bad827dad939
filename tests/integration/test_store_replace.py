"""bluedove/store/catalogue.py `replace_subscription` against a real redis-server (or, with
`--store-kind cluster`, a Redis Cluster): a subscription's new version is one change of the
catalogue, its entry and its log entry together, so a reader of the log (a matcher, a
snapshot replayed) sees the old version then the new one, never both nor neither; a refused
replace changes nothing."""

from __future__ import annotations

import asyncio
import json

import pytest

from bluedove.store import keys as K
from bluedove.store.store import QueueMissing
from tests.integration.store_fixtures import current_catalogue, stream_order, sub_json

pytestmark = pytest.mark.integration


async def test_a_replace_is_one_logged_change_answering_the_version_it_replaced(store):
    queue, _ = await store.create_queue()
    first = await store.add_subscription(sub_json("s1", queue, {"x0": [0, 100]}))
    log_id, old = await store.replace_subscription(sub_json("s1", queue, {"x1": {"in": [1, 2]}}))
    assert old == sub_json("s1", queue, {"x0": [0, 100]})
    assert stream_order(log_id) > stream_order(first)
    assert await store.get_subscription("s1", queue) == sub_json("s1", queue, {"x1": {"in": [1, 2]}})
    assert await store.r.smembers(K.queue_subs(queue)) == {"s1"}  # still one subscription of its queue
    _, changes = await store.catalogue_changes("0-0")
    assert [(c["op"], c["id"]) for c in changes] == [("add", "s1"), ("replace", "s1")]
    assert changes[1]["at"] == log_id and "at" not in changes[0]  # a replace's version: its entry id
    shard = K.shard_of(queue)
    tail = await store.catalogue_tail(shard, "0-0")
    assert [i for i, _ in tail] == [first, log_id] and "at" not in tail[1][1]  # the tail reads entries as stored
    _, again = await store.replace_subscription(sub_json("s1", queue, {"x0": [5, 6]}))
    assert again == sub_json("s1", queue, {"x1": {"in": [1, 2]}})


async def test_a_refused_replace_changes_nothing(store):
    queue, _ = await store.create_queue()
    other, _ = await store.create_queue()
    await store.add_subscription(sub_json("s1", queue))
    before_log = (await store.catalogue_changes("0-0"))[1]
    assert await store.replace_subscription(sub_json("s1", other, {"x0": [1, 2]})) is None  # not that queue's
    assert await store.replace_subscription(sub_json("nope", queue, {"x0": [1, 2]})) is None
    await store.remove_subscription("s1", queue)
    assert await store.replace_subscription(sub_json("s1", queue, {"x0": [1, 2]})) is None  # removed: stays so
    assert await current_catalogue(store) == {}
    assert len((await store.catalogue_changes("0-0"))[1]) == len(before_log) + 1  # the removal alone
    await store.add_subscription(sub_json("s2", queue))
    await store.delete_queue(queue)
    with pytest.raises(QueueMissing):
        await store.replace_subscription(sub_json("s2", queue, {"x0": [1, 2]}))


async def test_replaces_racing_a_snapshot_replay_to_the_newest_version(store):
    """A snapshot read while replaces go on, then the log replayed from its position, ends at
    the version stored last, as it does for adds and removals."""
    queue, _ = await store.create_queue()
    await store.add_subscription(sub_json("s", queue, {"x0": [0, 1]}))

    async def replaces() -> None:
        for j in range(1, 200):
            await store.replace_subscription(sub_json("s", queue, {"x0": [j, j + 1]}))

    writer = asyncio.create_task(replaces())
    snapshots = []
    while not writer.done():
        snapshots.append(await store.catalogue_snapshot())
        await asyncio.sleep(0)
    await writer
    assert len(snapshots) > 1
    for pos, subs in snapshots:
        known = {s["id"]: s for s in subs}
        after = pos
        while True:
            after, changes = await store.catalogue_changes(after)
            if not changes:
                break
            for c in changes:
                assert c["op"] == "replace" and c["id"] == "s" and c["at"]
                known["s"] = json.loads(c["sub"])
        assert known == {"s": sub_json("s", queue, {"x0": [199, 200]})}
