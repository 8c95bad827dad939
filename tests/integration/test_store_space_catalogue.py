"""A named space's catalogue in the store (bluedove/store/catalogue.py, space_entry.py), on a
real server (or, with `--store-kind cluster`, a Redis Cluster): its subscriptions live in its
own shards, apart from the default space's; a queue deleted loses its subscriptions in every
space it entered; a space deleted or made again while a subscribe is under way keeps none of
it; a purge removes the queues' sets of the space too."""

from __future__ import annotations

import pytest

from bluedove.core.spaces import parse_space_spec
from bluedove.store import keys as K
from bluedove.store.catalogue import LimitExceeded, QueueMissing
from bluedove.store.connection import StoreLimits
from bluedove.store.space_entry import SpaceAt, SpaceGone
from bluedove.store.spaces import SpaceStore

pytestmark = pytest.mark.integration

ORDERS = {"name": "orders", "attributes": [{"name": "amount", "min": 0, "max": 100}], "partition": ["amount"]}


async def make_space(store, name: str = "orders") -> SpaceAt:
    rec, _ = await SpaceStore(store.r).create(parse_space_spec({**ORDERS, "name": name}))
    return SpaceAt(name, rec.created)


async def queue(store) -> str:
    q, _ = await store.create_queue()
    return q


def sub(sub_id: str, q: str) -> dict:
    return {"id": sub_id, "queue": q, "predicates": {"amount": [0, 10]}}


async def ids(store, space: str) -> set[str]:
    _, subs = await store.catalogue_snapshot(space)
    return {s["id"] for s in subs}


async def test_a_spaces_subscriptions_live_in_its_own_catalogue(store):
    orders = await make_space(store)
    q = await queue(store)
    out = await store.add_subscriptions_each([sub("a", q), sub("b", q)], orders)
    assert all(isinstance(x, str) for x in out), out
    await store.add_subscriptions_each([sub("d", q)])  # the same queue in the default space
    assert await ids(store, "orders") == {"a", "b"} and await ids(store, "default") == {"d"}
    pos, changes = await store.catalogue_changes("0-0", space="orders")
    assert [(c["op"], c["id"]) for c in changes] == [("add", "a"), ("add", "b")]
    assert await store.catalogue_position("orders") == pos
    assert await store.r.smembers(K.queue_spaces(q)) == {"orders"}
    assert await store.r.sismember(K.space_keys("orders"), K.CatalogueKeys("orders").queue_subs(q))
    assert await store.get_subscription("a", q, orders) is not None and await store.get_subscription("a", q) is None

    assert await store.remove_subscription("a", q, orders) is not None
    assert await store.remove_subscription("d", q, orders) is None  # not in this space
    replaced = await store.replace_subscription({**sub("b", q), "predicates": {"amount": [5, 6]}}, orders)
    assert replaced is not None and replaced[1] == sub("b", q)
    assert await ids(store, "orders") == {"b"} and await ids(store, "default") == {"d"}


async def test_a_queue_deleted_loses_its_subscriptions_in_every_space(store):
    orders, fleet = await make_space(store), await make_space(store, "fleet")
    q, other = await queue(store), await queue(store)
    await store.add_subscriptions_each([sub("o1", q), sub("o2", q), sub("keep", other)], orders)
    await store.add_queue_subscriptions(q, [sub("f1", q)], fleet)
    await store.add_subscriptions_each([sub("d1", q)])
    removed = await store.delete_queue(q)
    assert sorted(removed) == ["d1", "f1", "o1", "o2"]
    assert await ids(store, "orders") == {"keep"} and await ids(store, "fleet") == set()
    assert await ids(store, "default") == set() and not await store.r.exists(K.queue_spaces(q))
    # the writer remembers q as entered in orders: the gone mark there still refuses it
    assert isinstance((await store.add_subscriptions_each([sub("late", q)], orders))[0], QueueMissing)
    assert isinstance((await store.add_subscriptions_each([sub("late", q)], fleet))[0], QueueMissing)
    with pytest.raises(QueueMissing):
        await store.add_queue_subscriptions(q, [sub("late", q)], await make_space(store, "third"))
    assert await ids(store, "orders") == {"keep"}


async def test_a_queue_being_deleted_enters_no_space(store, make_store):
    orders = await make_space(store)
    q = await queue(store)
    await store.r.hset(K.queue_hash(q), "deleting", "1")  # as a deletion does before reading its spaces
    other = make_store()  # a writer that has not entered q anywhere
    assert isinstance((await other.add_subscriptions_each([sub("s", q)], orders))[0], QueueMissing)
    assert not await store.r.exists(K.queue_spaces(q)) and await ids(store, "orders") == set()


async def test_a_subscribe_in_a_space_gone_or_made_again_keeps_nothing(store, make_store):
    spaces = SpaceStore(store.r)
    orders = await make_space(store)
    q = await queue(store)
    await spaces.delete("orders")
    out = await store.add_subscriptions_each([sub("s", q)], orders)
    assert isinstance(out[0], SpaceGone) and await ids(store, "orders") == set()
    while not (await spaces.purge_step("orders")).done:
        pass
    again = await make_space(store)  # the same name, another space
    assert again.created != orders.created or again != orders
    assert isinstance((await store.add_subscriptions_each([sub("s", q)], orders))[0], SpaceGone)
    assert await ids(store, "orders") == set()
    assert all(isinstance(x, str) for x in await store.add_subscriptions_each([sub("s", q)], again))

    # deleted after the queue entered it, before the add: the add undoes itself
    await spaces.delete("orders")
    out = await store.add_subscriptions_each([sub("t", q)], again)  # entered already: no check before
    assert isinstance(out[0], SpaceGone) and await ids(store, "orders") == {"s"}
    with pytest.raises(SpaceGone):
        await store.add_queue_subscriptions(q, [sub("u", q)], again)
    assert await ids(store, "orders") == {"s"}


async def test_a_purge_removes_the_queues_sets_of_the_space(store):
    spaces = SpaceStore(store.r)
    orders = await make_space(store)
    qs = [await queue(store) for _ in range(5)]
    await store.add_subscriptions_each([sub(f"s{i}", q) for i, q in enumerate(qs)], orders)
    sets = [K.CatalogueKeys("orders").queue_subs(q) for q in qs]
    assert await store.r.exists(*sets) == 5
    await spaces.delete("orders")
    while not (await spaces.purge_step("orders", budget=3)).done:
        pass
    assert await store.r.exists(*sets) == 0 and await ids(store, "orders") == set()
    assert await store.delete_queue(qs[0]) == []  # its set still names the space: skipped, nothing made


async def test_the_limit_is_per_queue_and_space(make_store):
    store = make_store(StoreLimits(max_subscriptions_per_queue=2))
    orders = await make_space(store)
    q = await queue(store)
    out = await store.add_subscriptions_each([sub("a", q), sub("b", q), sub("c", q)], orders)
    assert [type(x) for x in out] == [str, str, LimitExceeded]
    assert all(isinstance(x, str) for x in await store.add_subscriptions_each([sub("d", q), sub("e", q)]))
    with pytest.raises(LimitExceeded):
        await store.add_queue_subscriptions(q, [sub("f", q)], orders)


async def test_the_tails_of_many_spaces_are_read_in_one_call(store):
    """`catalogue_tails`: each space's entries after its own position, by shard, from more
    streams than one XREAD names (70 spaces of 16 shards); spaces without news are absent."""
    spaces = [await make_space(store, f"s{i}") for i in range(70)]
    start = {s.name: await store.catalogue_position(s.name) for s in spaces}
    q = await queue(store)
    for s in spaces[::7]:
        assert all(isinstance(x, str) for x in await store.add_subscriptions_each([sub(f"{s.name}-a", q)], s))
    got = await store.catalogue_tails(start)
    assert set(got) == {s.name for s in spaces[::7]}
    for name, shards in got.items():
        assert [f["id"] for entries in shards.values() for _, f in entries] == [f"{name}-a"]
        pos, _ = await store.catalogue_changes("0-0", space=name)
        ids = K.parse_pos(pos)
        assert all(entries[-1][0] == ids[shard] for shard, entries in shards.items())
    later = {name: await store.catalogue_position(name) for name in start}
    assert await store.catalogue_tails(later) == {}
