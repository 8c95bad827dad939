"""Named spaces change their tables on their own, exactly, while every space publishes: a
matcher killed (SIGKILL) is taken over in each space it owned segments in; a space spanning
2 matchers gets its second back by a join of the lightest idle one; a matcher that leaves hands
each space's segments off first; one that joins the cluster takes a share of the default
space and of a space below its size (orders, laid out over 4, down to 2), not of one at its
size (fleet, 2). Every message
reaches exactly the subscriptions of its space that match it (a brute-force oracle per
space), publishers retrying a 503 with the same id; each change is an event naming its space.
`GET /v1/cluster?space=` shows one space's table, owners, load and events."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time

import httpx
import pytest

from bluedove.core.partition.segments import SegmentTable
from bluedove.store.store import Store
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import drain
from tests.integration.test_spaces_exact import FLEET, ORDERS, delivered, expected, make_spaces, messages_of

pytestmark = pytest.mark.integration

FLEET_2 = {**FLEET, "matchers": 2}


async def publish_steadily(client: httpx.AsyncClient, messages: dict[str, dict[str, dict]], rate: float,
                           refused: list) -> None:
    """Every message of every space at `rate`/s in all, each retried with its id on a 503."""

    async def one(space: str, mid: str, attrs: dict) -> None:
        base = "/v1" if space == "default" else f"/v1/spaces/{space}"
        deadline = time.monotonic() + 20
        while True:
            try:
                r = await client.post(f"{base}/messages", json={"id": mid, "attributes": attrs})
                if r.status_code == 202:
                    return
                assert r.status_code == 503, r.text
            except httpx.TransportError:
                pass
            refused.append((space, mid))
            assert time.monotonic() < deadline, f"{space}/{mid} refused for 20 s"
            await asyncio.sleep(0.1)

    items = [(s, m, a) for s, msgs in messages.items() for m, a in msgs.items()]
    random.Random(3).shuffle(items)
    tasks = []
    for item in items:
        tasks.append(asyncio.create_task(one(*item)))
        await asyncio.sleep(1 / rate)
    await asyncio.gather(*tasks)


async def tables(url: str) -> dict[str, SegmentTable]:
    store = Store(url)
    try:
        return {n: SegmentTable.from_json(await store.get_table(n)) for n in ("default", "orders", "fleet")}
    finally:
        await store.close()


async def until(url: str, check, what: str, within_s: float = 40) -> dict[str, SegmentTable]:
    deadline = time.monotonic() + within_s
    while True:
        now = await tables(url)
        if check(now):
            return now
        assert time.monotonic() < deadline, f"not within {within_s} s: {what}; tables {now}"
        await asyncio.sleep(0.2)


async def check_cluster_view(client: httpx.AsyncClient, now: dict[str, SegmentTable], fleet_subs: int) -> None:
    """GET /v1/cluster?space=fleet: fleet's schema, epoch and owners, each owner's load in it
    (every subscription on every dimension's owners), its own events; the spaces' names."""
    view = (await client.get("/v1/cluster", params={"space": "fleet"})).json()
    assert view["space_name"] == "fleet" and view["spaces"] == ["default", "fleet", "orders"]
    assert view["epoch"] == now["fleet"].epoch and [a["name"] for a in view["space"]["dimensions"]] == ["lat", "lon"]
    owners = {m["id"] for m in view["members"] if m["segments"]}
    assert owners == set(now["fleet"].members)
    assert all(m["idle"] for m in view["members"] if m["id"] not in owners and m["status"] == "alive")
    for dim in ("lat", "lon"):
        assert sum(m["subscriptions"].get(dim, 0) for m in view["members"]) >= fleet_subs
    assert {e["space"] for e in view["autoscaler"]["events"]} == {"fleet"}
    whole = (await client.get("/v1/cluster")).json()
    assert whole["space_name"] == "default" and whole["epoch"] == now["default"].epoch
    r = await client.get("/v1/cluster", params={"space": "nope"})
    assert r.status_code == 404 and r.json()["error"]["field"] == "space", r.text


def test_named_spaces_take_over_join_and_hand_off_on_their_own(tmp_path):
    rng = random.Random(17)
    cluster = start_cluster(tmp_path, matchers=4)
    try:
        queues, subs = make_spaces(cluster.url, rng, (ORDERS, FLEET_2), 4)
        messages = messages_of(rng, 300)
        url = cluster.store_url

        async def run() -> tuple[list, list, dict]:
            refused: list = []
            async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
                before = await tables(url)
                # fleet spans 2 of the 4, picked by load and its name: `a` leaves, `b` is killed
                a, b = sorted(before["fleet"].members)
                assert len(before["orders"].members) == 4
                pub = asyncio.create_task(publish_steadily(client, messages, 40, refused))
                await asyncio.sleep(3)
                os.kill(cluster.child(b).pid, signal.SIGKILL)
                # Each space merges b out; fleet, down to a, gets a second matcher back by a join.
                after = await until(url, lambda t: all(b not in x.members for x in t.values())
                                    and len(t["fleet"].members) == 2, f"{b} taken over in every space")
                assert len(after["orders"].members) == 3
                await asyncio.to_thread(cluster.remove_matcher, a)
                after = await until(url, lambda t: all(a not in x.members for x in t.values())
                                    and len(t["fleet"].members) == 2, f"{a} handed off in every space")
                fleet_before = after["fleet"]
                cluster.add_matcher()  # m5: the default and orders (2 of its 4) take it; fleet has its 2
                after = await until(url, lambda t: "m5" in t["default"].members and "m5" in t["orders"].members,
                                    "m5 joined the default space and orders")
                assert after["fleet"] == fleet_before  # not disturbed
                await pub
                got = await drain(client, queues)
                events = (await client.get("/v1/cluster")).json()["autoscaler"]["events"]
                await check_cluster_view(client, await tables(url), len(subs["fleet"]))
            return refused, got, events

        refused, got, events = asyncio.run(run())
        want = expected(subs, messages)
        assert {s for s, _, _ in want} == {"default", "orders", "fleet"} and sum(map(len, want.values())) > 500
        assert delivered(got) == want
        by_space: dict[str, list[str]] = {}
        for e in events:
            by_space.setdefault(e.get("space", "default"), []).append(e["action"])
        assert by_space["fleet"] == ["takeover", "split", "merge", "split"], events
        assert by_space["orders"] == ["takeover", "merge", "split"], events
        assert by_space["default"] == ["takeover", "merge", "split"], events
        print(f"publishes refused (503) and retried: {len(refused)}")
    finally:
        cluster.stop()
    assert_no_children(cluster)
