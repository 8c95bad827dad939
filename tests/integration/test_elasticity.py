"""Splits and merges while a publisher runs: every match delivered exactly once (issue 4).

Two matchers; two more join by hand (`bluedove matcher --join`), each given the busiest part
of every dimension by a split; then one leaves through the Leave RPC and one through SIGTERM
(`--leave-on-sigterm`, the Kubernetes scale-in path), each handing its segments to a
neighbour. Messages are published the whole time (from a second before the first change to three
seconds after the last, past the last leaver's grace and exit) and checked against the
brute-force oracle.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time

import httpx
import pytest

from tests.integration.cluster_checks import (
    gossip_views,
    match_on_every_candidate,
    publish_until,
    random_predicates,
    subscribe_random,
)
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import drain, oracle, timed_compare

pytestmark = pytest.mark.integration


async def wait_for(client: httpx.AsyncClient, cond, what: str, limit_s: float = 60.0) -> dict:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        status = (await client.get("/v1/cluster")).json()
        if cond(status):
            return status
        await asyncio.sleep(0.2)
    raise AssertionError(f"not within {limit_s} s: {what}; last {status}")


def owners(status: dict) -> set[str]:
    return {m["id"] for m in status["members"] if m["segments"]}


def test_splits_and_merges_under_a_steady_publisher(tmp_path):
    cluster = start_cluster(tmp_path, matchers=2, matcher_env={"BLUEDOVE_HANDOFF_GRACE_S": "2"})
    try:
        rng = random.Random(11)
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            queues, subs = subscribe_random(api, rng, 20, 300)

        sub_times: dict = {}
        msg_times: dict = {}

        async def run():
            messages: dict = {}
            refused: list = []
            changed = asyncio.Event()  # the last hand-off is done
            async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
                pub = asyncio.create_task(publish_until(client, rng, changed, messages, refused, msg_times))
                await asyncio.sleep(1.0)
                # Subscriptions keep arriving during the changes too.
                late = asyncio.create_task(subscribe_slowly(client, rng, queues, subs, sub_times, changed))
                cluster.add_matcher()
                await wait_for(client, lambda s: owners(s) == {"m1", "m2", "m3"}, "m3 owns segments")
                cluster.add_matcher(["--leave-on-sigterm"])
                status = await wait_for(client, lambda s: owners(s) == {"m1", "m2", "m3", "m4"}, "m4 owns segments")
                await asyncio.to_thread(cluster.remove_matcher, "m2")
                await wait_for(client, lambda s: owners(s) == {"m1", "m3", "m4"}, "m2 merged out")
                os.kill(cluster.child("m4").pid, signal.SIGTERM)
                status = await wait_for(client, lambda s: owners(s) == {"m1", "m3"}, "m4 merged out")
                changed.set()
                await late
                sent = await pub
                got = await drain(client, queues)
            return messages, refused, got, status, sent

        messages, refused, got, status, sent = asyncio.run(run())
        # The leavers exited by themselves once their grace was over, with code 0.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and {c.name for c in cluster.matchers()} != {"m1", "m3"}:
            time.sleep(0.2)
        assert {c.name for c in cluster.matchers()} == {"m1", "m3"}
        assert cluster.child("m2").proc.returncode == 0 and cluster.child("m4").proc.returncode == 0
        actions = [e["action"] for e in status["autoscaler"]["events"]]
        assert actions == ["split", "split", "merge", "merge"], status["autoscaler"]["events"]
        assert not refused, refused[:5]  # a hand-off never refuses a publish
        assert len(messages) == sent >= 400 and len(oracle(cluster.space, subs, messages)) > 1000
        assert timed_compare(cluster.space, subs, sub_times, messages, msg_times, got) == {
            "missing": [], "unexpected": [], "duplicates": [], "wrong_subscriptions": []}

        async def check_candidates():
            views = await gossip_views([cluster.addresses["m1"], cluster.addresses["m3"]])
            assert views[0][0].epoch == views[1][0].epoch == status["epoch"]
            return await match_on_every_candidate(views[0][0], rng, subs, 150)

        assert asyncio.run(check_candidates()) > 300
    finally:
        cluster.stop()
    assert_no_children(cluster)


async def subscribe_slowly(client: httpx.AsyncClient, rng: random.Random, queues: dict, subs: dict,
                           times: dict, done: asyncio.Event) -> None:
    """A new subscription every 0.25 s until `done` is set."""
    while not done.is_set():
        q = rng.choice(list(queues))
        preds = random_predicates(rng)
        sent = time.monotonic()
        r = await client.post("/v1/subscriptions", json={"queue": q, "predicates": preds}, headers=queues[q])
        assert r.status_code == 201, r.text
        subs[r.json()["id"]] = (q, preds)
        times[r.json()["id"]] = (sent, time.monotonic())
        await asyncio.sleep(0.25)
