"""A matcher killed with SIGKILL while messages are published (issue: gossip and takeover).

Gossip declares it dead everywhere; its segments are merged into live neighbours, which load
their subscriptions before the new epoch is published; no accepted message is lost or
duplicated; refusals stop once the takeover is out; afterwards every message finds all its
matches on each of its candidates; the restarted matcher rejoins and is given segments by a
split while messages keep flowing.
Publishers retry a 503 with the same message id, as docs/api.md tells clients to."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time

import httpx
import pytest

from tests.integration.cluster_checks import gossip_views, match_on_every_candidate, publish_steadily, subscribe_random
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import compare, drain, oracle

pytestmark = pytest.mark.integration


async def wait_dead_everywhere(addresses: list[str], victim: str, limit_s: float = 30) -> float:
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        views = await gossip_views(addresses)
        if all(v[1].get(victim) == "dead" for v in views):
            return time.monotonic()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{victim} not declared dead by all within {limit_s} s")


def test_sigkill_a_matcher_while_publishing_then_takeover_and_rejoin(tmp_path):
    cluster = start_cluster(tmp_path, matchers=4)
    try:
        rng = random.Random(7)
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            queues, subs = subscribe_random(api, rng, 20, 400, filters=0.25)
            epoch0 = api.get("/v1/cluster").json()["epoch"]

        victim = cluster.child("m2")
        survivors = [a for m, a in cluster.table.members.items() if m != "m2"]

        async def run():
            messages: dict = {}
            refused: list = []
            async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
                pub = asyncio.create_task(publish_steadily(client, rng, "a", 900, 150, messages, refused))
                await asyncio.sleep(2.0)
                os.kill(victim.pid, signal.SIGKILL)
                killed_at = time.monotonic()
                dead_at = await wait_dead_everywhere(survivors, "m2")
                await pub
                events = cluster.check()
                assert any("m2 died (signal 9)" in e for e in events), events
                # The survivors agree on a table without m2, one epoch on.
                views = await gossip_views(survivors)
                tables = {v[0].epoch for v in views}
                assert tables == {epoch0 + 1}, tables
                table = views[0][0]
                assert "m2" not in table.members and all(m in table.members for m in ("m1", "m3", "m4"))
                status = (await client.get("/v1/cluster")).json()
                assert status["epoch"] == epoch0 + 1
                states = {m["id"]: m["status"] for m in status["members"]}
                assert states == {"m1": "alive", "m2": "dead", "m3": "alive", "m4": "alive"}, states
                [event] = [e for e in status["autoscaler"]["events"] if e["action"] == "takeover"]
                assert "m2 declared dead" in event["reason"] and event["matchers"] == 3
                checked = await match_on_every_candidate(table, rng, subs, 200)
                # Restarted (same id, new generation), it rejoins with no segments, and the
                # coordinator splits the busiest segments to give it some (a join).
                victim.start()
                for _ in range(150):
                    status = (await client.get("/v1/cluster")).json()
                    members = {m["id"]: m for m in status["members"]}
                    if members["m2"]["status"] == "alive" and not members["m2"]["idle"]:
                        break
                    await asyncio.sleep(0.2)
                assert members["m2"]["status"] == "alive" and not members["m2"]["idle"], members["m2"]
                assert len(members["m2"]["segments"]) == 4 and status["epoch"] == epoch0 + 2
                assert [e["action"] for e in status["autoscaler"]["events"]] == ["takeover", "split"]
                await publish_steadily(client, rng, "b", 300, 150, messages, refused)
                got = await drain(client, queues)
            return messages, refused, got, killed_at, dead_at, checked

        messages, refused, got, killed_at, dead_at, checked = asyncio.run(run())
        assert checked > 1000
        assert len(messages) == 1200  # every message was accepted in the end
        expected = oracle(cluster.space, subs, messages)
        assert len(expected) > 500
        assert compare(expected, got) == {"missing": [], "unexpected": [], "duplicates": [],
                                          "wrong_subscriptions": []}
        detection_s = dead_at - killed_at
        print(f"SIGKILL to dead everywhere: {detection_s:.2f} s; refusals: {len(refused)}")
        assert detection_s < 6.0  # goal ≤ 3 s (docs/benchmarks.md); slack for a loaded CI machine
        # Refusals happened only between the kill and the new table reaching the dispatcher,
        # which pulls it within a second of the takeover; never after the rejoin.
        assert all(killed_at - 0.5 <= t <= dead_at + 1.5 for t, _ in refused), (killed_at, dead_at, refused[-3:])
        assert not [mid for _, mid in refused if mid.startswith("b-")]
    finally:
        cluster.stop()
    assert_no_children(cluster)
