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

import grpc
import httpx
import json
import pytest

from bluedove.segments import SegmentTable
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import compare, drain, new_queue, oracle
from tests.integration.test_exactness import random_predicates

pytestmark = pytest.mark.integration
DIMS = ("x0", "x1", "x2", "x3")


async def publish_steadily(client: httpx.AsyncClient, rng: random.Random, prefix: str, n: int, rate: float,
                           messages: dict, refused: list, times: dict | None = None) -> None:
    """Publish n messages at `rate`/s, each retried with its id until accepted (at most ~15 s);
    `times[id]` = (first sent, accepted)."""

    async def one(i: int) -> None:
        attrs = {d: rng.uniform(0, 1000) for d in DIMS}
        mid = f"{prefix}-{i}"
        first = time.monotonic()
        deadline = first + 15
        while True:
            try:
                r = await client.post("/v1/messages", json={"attributes": attrs, "id": mid})
                if r.status_code == 202:
                    messages[mid] = tuple(attrs[d] for d in DIMS)
                    if times is not None:
                        times[mid] = (first, time.monotonic())
                    return
                assert r.status_code == 503, r.text
                refused.append((time.monotonic(), mid))
            except httpx.TransportError:
                refused.append((time.monotonic(), mid))
            assert time.monotonic() < deadline, f"{mid} was refused for 15 s"
            await asyncio.sleep(0.1)

    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(one(i)))
        await asyncio.sleep(1 / rate)
    await asyncio.gather(*tasks)


async def gossip_views(addresses: list[str]) -> list[tuple[SegmentTable, dict[str, str]]]:
    """(table, {member: status}) as each matcher at `addresses` sees it."""
    out = []
    for a in addresses:
        async with grpc.aio.insecure_channel(a) as ch:
            r = await pb_grpc.MatcherStub(ch).GetTable(pb.TableRequest(), timeout=2)
        out.append((SegmentTable.from_json(json.loads(r.table_json)), {m.id: m.status for m in r.members}))
    return out


async def wait_dead_everywhere(addresses: list[str], victim: str, limit_s: float = 30) -> float:
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        views = await gossip_views(addresses)
        if all(v[1].get(victim) == "dead" for v in views):
            return time.monotonic()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{victim} not declared dead by all within {limit_s} s")


async def match_on_every_candidate(table: SegmentTable, rng: random.Random, subs: dict, n: int) -> int:
    """Ask each candidate of n random messages which subscriptions match (a dry run): every
    candidate must find exactly the oracle's set. Returns the matches checked."""
    checked = 0
    channels = {m: grpc.aio.insecure_channel(a) for m, a in table.members.items()}
    try:
        for i in range(n):
            point = [rng.uniform(0, 1000) for _ in DIMS]
            expected = sorted(sid for sid, (_, preds) in subs.items()
                              if all(lo <= point[DIMS.index(d)] < hi for d, (lo, hi) in preds.items()))
            for dim, owner in table.candidates(point):
                req = pb.ForwardRequest(dimension=dim, messages=[pb.ForwardMessage(id=f"probe-{i}", point=point)])
                reply = await pb_grpc.MatcherStub(channels[owner]).Match(req, timeout=5)
                got = list(reply.messages[0].subscription_ids)
                assert got == expected, (point, dim, owner, set(expected) ^ set(got))
                checked += len(expected)
    finally:
        for ch in channels.values():
            await ch.close()
    return checked


def test_sigkill_a_matcher_while_publishing_then_takeover_and_rejoin(tmp_path):
    cluster = start_cluster(tmp_path, matchers=4)
    try:
        rng = random.Random(7)
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            queues = dict(new_queue(api) for _ in range(20))
            subs = {}
            for _ in range(400):
                q = rng.choice(list(queues))
                preds = random_predicates(rng)
                r = api.post("/v1/subscriptions", json={"queue": q, "predicates": preds}, headers=queues[q])
                assert r.status_code == 201
                subs[r.json()["id"]] = (q, preds)
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
