"""bluedove/store/spaces.py against a real store (one server, or with `--store-kind cluster` a
Redis Cluster): create is idempotent for the same spec and a conflict for another, two racing
creates leave one winner, and deleting a space removes its keys in bounded steps that a repeat
finishes after an interruption."""

from __future__ import annotations

import asyncio

import pytest

from bluedove.core.space import default_space
from bluedove.core.spaces import DEFAULT_SPACE, default_spec, parse_space_spec
from bluedove.store import keys as K
from bluedove.store.spaces import ACTIVE, DELETING, SpaceActive, SpaceConflict, SpaceStore

pytestmark = pytest.mark.integration

ORDERS = {"name": "orders", "attributes": [{"name": "status", "type": "string"}, {"name": "amount", "min": 0,
                                                                                  "max": 10000}],
          "partition": ["status", "amount"], "quotas": {"messages_per_s": 100}}


def spec(**change):
    return parse_space_spec({**ORDERS, **change})


async def test_a_create_then_the_same_again_then_another_schema(store):
    spaces = SpaceStore(store.r)
    rec, created = await spaces.create(spec())
    assert created and rec.state == ACTIVE and rec.spec == spec() and rec.created > 0
    again, created = await spaces.create(parse_space_spec({**ORDERS, "attributes": [
        {"name": "status", "type": "string"}, {"name": "amount", "type": "number", "min": 0.0, "max": 10000.0}]}))
    assert not created and again == rec  # the same body in other words: nothing changes
    with pytest.raises(SpaceConflict) as info:
        await spaces.create(spec(partition=["amount"]))
    assert info.value.field == "partition[0]" and info.value.existing == rec
    with pytest.raises(SpaceConflict) as info:
        await spaces.create(spec(quotas={"messages_per_s": 200}))
    assert info.value.field == "quotas.messages_per_s"
    assert await spaces.get("orders") == rec
    assert rec.to_json()["created"] == rec.created and rec.to_json()["name"] == "orders"


async def test_list_reads_the_registry_and_get_of_a_missing_space_is_none(store):
    spaces = SpaceStore(store.r)
    assert await spaces.list() == [] and await spaces.get("nope") is None
    for name in ("b-space", "a-space", "c-space"):
        await spaces.create(spec(name=name))
    assert [r.spec.name for r in await spaces.list()] == ["a-space", "b-space", "c-space"]
    assert await store.r.smembers(K.SPACES) == {"a-space", "b-space", "c-space"}


async def test_a_create_cut_short_before_the_registry_is_repaired_by_its_retry(store):
    spaces = SpaceStore(store.r)
    await spaces.create(spec())
    await store.r.srem(K.SPACES, "orders")  # as if the creator died between its two steps
    assert await spaces.list() == [] and await spaces.get("orders") is not None
    _, created = await spaces.create(spec())
    assert not created and [r.spec.name for r in await spaces.list()] == ["orders"]


async def test_two_racing_creates_of_one_name_leave_one_winner(store, make_store):
    spaces, other = SpaceStore(store.r), SpaceStore(make_store().r)  # two clients, as two dispatchers
    for round_ in range(5):
        name = f"race-{round_}"
        a, b = spec(name=name), spec(name=name, partition=["amount", "status"])
        got = await asyncio.gather(spaces.create(a), other.create(b), return_exceptions=True)
        winners = [g for g in got if isinstance(g, tuple)]
        losers = [g for g in got if isinstance(g, SpaceConflict)]
        assert len(winners) == 1 and len(losers) == 1 and winners[0][1] is True
        assert (await spaces.get(name)).spec == winners[0][0].spec
        assert losers[0].field == "partition[0]"


async def test_the_default_space(store):
    spaces = SpaceStore(store.r)
    rec, created = await spaces.create(default_spec(default_space()))
    assert created and rec.spec.name == DEFAULT_SPACE and rec.spec.space == default_space()
    assert (await spaces.create(default_spec(default_space())))[1] is False
    assert [r.spec.name for r in await spaces.list()] == [DEFAULT_SPACE]


async def fill(store, name: str, listed: int) -> list[str]:
    """`listed` keys the space's `keys` set names (spread over slots), and every key its name gives."""
    names = [f"bd:{{s:{name}:c:{i % K.CATALOG_SHARDS}}}:qs:q{i}" for i in range(listed)]
    for start in range(0, listed, 500):
        chunk = names[start:start + 500]
        async with store.r.pipeline(transaction=False) as p:
            for k in chunk:
                p.sadd(k, "sub")
            await p.execute()
        await store.r.sadd(K.space_keys(name), *chunk)
    for k in K.space_fixed_keys(name):
        await (store.r.hset(k, "f", "v") if k.endswith(":subs") else store.r.set(k, "x"))
    return names


async def gone(store, name: str, listed: list[str]) -> bool:
    every = [*listed, *K.space_fixed_keys(name), K.space_keys(name), K.space_record(name)]
    return await store.r.exists(*every) == 0 and not await store.r.sismember(K.SPACES, name)


async def test_a_space_of_thousands_of_keys_is_purged_in_bounded_steps(store):
    spaces = SpaceStore(store.r)
    await spaces.create(spec())
    listed = await fill(store, "orders", 3000)
    with pytest.raises(SpaceActive):
        await spaces.purge_step("orders")
    assert await spaces.delete("orders") == 1 and await spaces.delete("orders") == 2
    assert (await spaces.get("orders")).state == DELETING
    assert [r.state for r in await spaces.list()] == [DELETING]  # listed until it is gone
    steps = []
    while True:
        step = await spaces.purge_step("orders", budget=400)
        steps.append(step.removed)
        assert step.removed <= 400
        if step.done:
            break
        assert len(steps) < 50
    assert sum(steps) == 3000 + len(K.space_fixed_keys("orders")) + 1  # and the record
    assert len(steps) >= 8 and await gone(store, "orders", listed)
    assert await spaces.get("orders") is None and await spaces.list() == []
    assert await spaces.delete("orders") == 0
    assert (await spaces.purge_step("orders")).done  # again: nothing to do


async def test_a_purge_interrupted_half_way_is_finished_by_calling_it_again(store, make_store, monkeypatch):
    spaces = SpaceStore(store.r)
    await spaces.create(spec())
    listed = await fill(store, "orders", 1200)
    await spaces.delete("orders")
    for _ in range(2):
        assert not (await spaces.purge_step("orders", budget=300)).done
    # the next step dies after its UNLINK, before it takes the names off the space's set
    real = store.r.srem

    async def dies(*args):
        raise ConnectionError("the purger died")
    monkeypatch.setattr(store.r, "srem", dies)
    with pytest.raises(ConnectionError):
        await spaces.purge_step("orders", budget=300)
    monkeypatch.setattr(store.r, "srem", real)
    # another process picks it up from what is left
    later = SpaceStore(make_store().r)
    while not (await later.purge_step("orders", budget=300)).done:
        pass
    assert await gone(store, "orders", listed)
    # and the name is free: a space made under it is a new one, with another schema if it likes
    rec, created = await later.create(spec(partition=["amount", "status"]))
    assert created and rec.state == ACTIVE


async def test_a_space_being_deleted_cannot_be_made_again_until_it_is_gone(store):
    spaces = SpaceStore(store.r)
    await spaces.create(spec())
    await spaces.delete("orders")
    with pytest.raises(SpaceConflict) as info:
        await spaces.create(spec())
    assert info.value.field == "state"
    while not (await spaces.purge_step("orders")).done:
        pass
    assert (await spaces.create(spec()))[1] is True


async def test_a_purge_cut_short_after_the_record_leaves_a_name_list_skips_and_a_repeat_removes(store):
    spaces = SpaceStore(store.r)
    await spaces.create(spec())
    await spaces.delete("orders")
    await store.r.delete(K.space_record("orders"))  # as if the purger died between the record and the name
    assert await store.r.sismember(K.SPACES, "orders") and await spaces.list() == []
    assert (await spaces.purge_step("orders")).done and not await store.r.sismember(K.SPACES, "orders")


async def test_spans_are_set_on_an_active_space_only_and_move_the_generation_when_they_change(store):
    """The autoscaler growing a space: its record's spans (what matchers join up to); the
    registry's generation moves so that matchers re-read it; a space being deleted, or none, is left."""
    spaces = SpaceStore(store.r)
    rec, _ = await spaces.create(spec())
    assert await spaces.lay_out(rec, {"members": {"m1": "", "m2": ""}}) is True
    assert (await spaces.get("orders")).spans == 2
    gen = await spaces.generation()
    assert await spaces.set_spans("orders", 3) is True
    grown = await spaces.get("orders")
    assert (grown.spans, grown.base) == (3, 2) and await spaces.generation() == gen + 1  # base: before growing
    assert await spaces.set_spans("orders", 3) is False and await spaces.generation() == gen + 1
    assert await spaces.set_spans("orders", 4) and await spaces.set_spans("orders", 2)
    assert ((r := await spaces.get("orders")).spans, r.base) == (2, 2)  # the first base stays
    await spaces.delete("orders")
    assert await spaces.set_spans("orders", 4) is None and (await spaces.get("orders")).spans == 2
    assert await spaces.set_spans("nope", 2) is None and await spaces.get("nope") is None
