"""bluedove/store/series.py against a real redis-server: the recorder's once-a-second write, the
matchers' stats entries, the message density, queue depth, redeliveries counted by POLL, and
events' times."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from bluedove.core import timeseries as ts
from bluedove.store.series import (
    Recorder,
    depth_pause_s,
    hold_depth_turn,
    put_density,
    put_gauges,
    put_matcher_stats,
    queue_depth,
    read_density,
    read_matcher_stats,
    read_records,
    take_depth_turn,
    ts_key,
)
from bluedove.store.store import StoreLimits
from tests.integration.store_fixtures import message

pytestmark = pytest.mark.integration


async def test_recorders_of_several_processes_add_counts_and_set_gauges_in_one_record(make_store):
    store = make_store()
    a, b = Recorder(store, zero=(ts.PUBLISHED,)), Recorder(store, zero=(ts.DELIVERED,))
    t = int(time.time()) - 5
    a.add(ts.PUBLISHED, 3, now=t + 0.1)
    a.add(ts.PUBLISHED, 4, now=t + 0.9)
    a.add(ts.latency_field(0.004), 7, now=t + 0.9)
    b.add(ts.PUBLISHED, 10, now=t + 0.5)
    b.set("matchers_actual", 3, now=t + 0.5)
    b.add(ts.PUBLISHED, 1, now=time.time() + 5)  # a later second: not written yet
    assert await a.flush(t + 1.02) == 1
    assert await b.flush(t + 1.02) == 1
    [rec] = await read_records(store, [t])
    assert rec == {"published": "17", "delivered": "0", ts.latency_field(0.004): "7", "matchers_actual": "3"}
    assert 3600 < await store.r.ttl(ts_key(t)) <= ts.KEY_TTL_S
    # written once: a second flush adds nothing more to that second
    await a.flush(t + 1.5)
    assert (await read_records(store, [t]))[0]["published"] == "17"


async def test_a_failed_write_keeps_the_counts_for_the_next(make_store, redis_clean_url):
    store = make_store()
    rec = Recorder(store)
    t = int(time.time()) - 3
    rec.add(ts.PUBLISHED, 2, now=t)
    await store.r.set(ts_key(t), "not a hash")  # HINCRBY fails: WRONGTYPE
    with pytest.raises(Exception):
        await rec.flush(t + 1.1)
    await store.r.delete(ts_key(t))
    await rec.flush(t + 1.1)
    assert (await read_records(store, [t]))[0] == {"published": "2"}


async def test_gauges_of_a_rare_writer(store):
    now = time.time()
    await put_gauges(store, {"autoscaler_input": 0.5, "matchers_desired": 2, "autoscaler_out": float("nan")}, now)
    [rec] = await read_records(store, [int(now)])
    assert rec == {"autoscaler_input": "0.5", "matchers_desired": "2"}  # a NaN is left out


async def test_matcher_stats_older_than_a_minute_are_dropped_at_read(store):
    now = time.time()
    await put_matcher_stats(store, "m1", {"t": now - 5, "cpu": 0.5, "rss_bytes": 1000, "coverage": {}})
    await put_matcher_stats(store, "m2", {"t": now - 61, "cpu": 0.1, "rss_bytes": 1000, "coverage": {}})
    got = await read_matcher_stats(store, now)
    assert set(got) == {"m1"} and got["m1"]["cpu"] == 0.5
    assert await store.r.hkeys("bd:mstats") == ["m1"]


async def test_density_entries_of_every_dispatcher_expire(store):
    await put_density(store, "d1", {"x0": [1.0, 2.0]})
    await put_density(store, "d2", {"x0": [0.5, 0.0]})
    assert sorted(e["x0"] for e in await read_density(store)) == [[0.5, 0.0], [1.0, 2.0]]
    assert sorted(await store.r.hkeys("bd:density")) == ["d1", "d2"]
    assert await read_density(store, now=time.time() + 11) == [] and await store.r.hkeys("bd:density") == []


async def test_queue_depth_counts_never_handed_out_and_unacked_deliveries(make_store):
    store = make_store(StoreLimits(visibility_timeout_s=30))
    q1, _ = await store.create_queue()
    q2, _ = await store.create_queue()
    await store.create_queue()  # an empty queue counts nothing
    await store.deliver([message(f"m{j}") for j in range(5)],
                        [(q1, j, "[]") for j in range(5)] + [(q2, j, "[]") for j in range(2)])
    assert await queue_depth(store) == (7, 0)
    got = await store.poll(q1, 3, 0)
    assert await queue_depth(store) == (4, 3)
    await store.ack(q1, [got[0]["receipt"]])
    assert await queue_depth(store, chunk=1) == (4, 2)  # chunked the same


async def test_one_depth_sampler_per_turn(store):
    assert await take_depth_turn(store, "d1")
    assert not await take_depth_turn(store, "d2")


async def test_a_costly_depth_sample_holds_the_turn_twenty_times_as_long(store):
    """A sample of many queues (2.5 s: about 100,000 queues) keeps every dispatcher from the next
    one for 50 s, so sampling stays under 5 % of one dispatcher's time; a cheap one, a turn."""
    assert depth_pause_s(0.02) == 4 and depth_pause_s(2.5) == 50
    assert await take_depth_turn(store, "d1")
    await hold_depth_turn(store, "d1", depth_pause_s(2.5))
    assert 45 <= await store.r.ttl("bd:depth:lock") <= 50
    assert not await take_depth_turn(store, "d2")


async def test_poll_counts_redeliveries_and_its_body_is_unchanged(make_store):
    store = make_store(StoreLimits(visibility_timeout_s=0.3))
    queue, _ = await store.create_queue()
    await store.deliver([message("m1"), message("m2")], [(queue, 0, "[\"s1\"]"), (queue, 1, "[\"s1\"]")])
    n, body = await store.poll_json(queue, 1, 0)
    assert n == 1 and store.redelivered == 0
    assert list(json.loads(body)) == ["messages"] and json.loads(body)["messages"][0]["id"] == "m1"
    await asyncio.sleep(0.5)
    n, body = await store.poll_json(queue, 10, 0)  # m1 again (expired), then m2 (new)
    assert [m["id"] for m in json.loads(body)["messages"]] == ["m1", "m2"]
    assert store.redelivered == 1


async def test_every_event_has_its_time(store):
    before = time.time()
    await store.add_event({"action": "split", "reason": "r", "matchers": 2})
    await store.add_event({"action": "takeover", "t": 12.5})
    a, b = await store.events()
    assert before - 0.001 <= a["t"] <= time.time() and a["action"] == "split"  # to the ms
    assert b["t"] == 12.5  # a writer's own time is kept
