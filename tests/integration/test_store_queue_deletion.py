"""Deleting a queue in the store goes in bounded steps: the mark first, then its subscriptions a
slice per script call (Redis serves other calls between two), then its own keys; a deletion cut
short is finished by the next one, and nothing is logged twice."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from bluedove.store import keys as K
from bluedove.store.store import QueueMissing
from tests.integration.store_fixtures import sub_json


def counting(store, monkeypatch, fail_after: int | None = None) -> list[int]:
    """Record the number of subscription ids each DELETE_QUEUE_SUBSCRIPTIONS call carries; with
    `fail_after`, the store fails every such call after that many."""
    sizes: list[int] = []
    run = store.runner.run

    async def recorded(calls, wait=False):
        for c in calls:
            if c.script is store._delete_subs:
                if fail_after is not None and len(sizes) >= fail_after:
                    raise RedisConnectionError("the store went away")
                sizes.append(len(c.args) - 2)
        return await run(calls, wait)

    monkeypatch.setattr(store.runner, "run", recorded)
    return sizes


async def logged(store, after: str) -> list[tuple[str, str]]:
    """Every catalogue change after `after`, as sorted (op, id) pairs."""
    out = []
    while True:
        after, got = await store.catalogue_changes(after)
        if not got:
            return sorted((c["op"], c["id"]) for c in out)
        out += got


async def test_a_queue_is_deleted_a_slice_of_subscriptions_per_call(store, monkeypatch):
    queue, token = await store.create_queue()
    ids = [f"s{j}" for j in range(250)]
    await store.add_queue_subscriptions(queue, [sub_json(i, queue) for i in ids])
    pos, _ = await store.catalogue_snapshot()
    sizes = counting(store, monkeypatch)

    assert sorted(await store.delete_queue(queue, step=100)) == sorted(ids)

    assert sizes == [0, 100, 100, 50]  # the mark alone, then each slice
    assert await logged(store, pos) == sorted(("remove", i) for i in ids)  # each once
    assert not await store.check_token(queue, token)
    for key in (K.queue_hash(queue), K.queue_subs(queue), K.queue_stream(queue)):
        assert not await store.r.exists(key)


async def test_a_deletion_cut_short_is_finished_by_the_next(store, monkeypatch):
    queue, token = await store.create_queue()
    ids = [f"s{j}" for j in range(250)]
    await store.add_queue_subscriptions(queue, [sub_json(i, queue) for i in ids])
    pos, _ = await store.catalogue_snapshot()
    counting(store, monkeypatch, fail_after=2)  # the mark and one slice, then the store fails

    with pytest.raises(RedisConnectionError):
        await store.delete_queue(queue, step=100)

    left = {i for i in ids if await store.get_subscription(i, queue) is not None}
    assert len(left) == 150
    with pytest.raises(QueueMissing):  # marked gone: it gains none meanwhile
        await store.add_subscription(sub_json("late", queue))
    monkeypatch.undo()
    assert sorted(await store.delete_queue(queue, step=100)) == sorted(left)
    assert await logged(store, pos) == sorted(("remove", i) for i in ids)  # each once, over both
    assert not await store.check_token(queue, token)
    assert not await store.r.exists(K.queue_subs(queue))
