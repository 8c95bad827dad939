"""Scale-in drains first, end to end: real matchers named as a StatefulSet names its pods, kmock as
the API server, a publisher running throughout.

The StatefulSet `bd/bluedove-matcher` has 3 replicas and the cluster 3 matchers, `bluedove-matcher-0`
to `-2`. `scale_to(2)` must ask `-2` to leave (its address from the stored table), see the stored
table drop it, and only then PATCH the replicas to 2; messages published meanwhile are all delivered,
exactly once, to exactly the matching subscriptions (the brute-force oracle).
"""

from __future__ import annotations

import asyncio
import json
import random
import time

import httpx
import kmock
import pytest

from bluedove.autoscaler.drain import MatcherDrainer, table_owners
from bluedove.store import Store
from bluedove.store.client import sync_client
from tests.integration.cluster_checks import publish_steadily, subscribe_random
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import compare, drain, oracle
from tests.integration.test_kubernetes_backend import (  # noqa: F401
    NS,
    STATEFULSETS,
    STS,
    apiserver,
    as_scale,
    backend_for,
    replicas_stored,
    wire,
)

pytestmark = pytest.mark.integration
PODS = [f"{STS}-{i}" for i in range(3)]


def stored_owners(url: str) -> dict[str, str]:
    r = sync_client(url)
    try:
        raw = r.get("bd:table")
    finally:
        r.close()
    return table_owners(json.loads(raw) if raw else None)


async def test_scale_in_drains_the_last_pod_before_the_patch_and_loses_no_message(apiserver, tmp_path):
    k, server = apiserver
    k.objects[STATEFULSETS, NS, STS].raw["spec"]["replicas"] = 3
    k.objects[STATEFULSETS, NS, STS].raw["status"]["replicas"] = 3
    cluster = await asyncio.to_thread(start_cluster, tmp_path / "cluster", matchers=3, matcher_ids=PODS,
                                      matcher_env={"BLUEDOVE_HANDOFF_GRACE_S": "2"})
    # What the stored table said when each PATCH reached the API server (ahead of the Scale answer).
    at_patch: list[dict[str, str]] = []

    def on_patch(req: kmock.Request) -> dict:
        at_patch.append(stored_owners(cluster.store_url))
        return as_scale(k, req)

    k[kmock.resource(STATEFULSETS), kmock.subresource("scale"), kmock.action.UPDATE].override << on_patch
    store = Store(cluster.store_url)
    try:
        assert set(stored_owners(cluster.store_url)) == set(PODS)
        rng = random.Random(13)
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            queues, subs = await asyncio.to_thread(subscribe_random, api, rng, 10, 300)
        backend = backend_for(server)
        backend.drainer = MatcherDrainer(store, asyncio.get_running_loop())
        backend.drain_timeout_s = 60.0
        messages: dict = {}
        refused: list = []
        async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
            pub = asyncio.create_task(publish_steadily(client, rng, "p", 600, 100, messages, refused))
            await asyncio.sleep(1.0)  # publishing before, during and after the drain
            started = time.monotonic()
            said = await asyncio.to_thread(backend.scale_to, 2)
            took = time.monotonic() - started
            await pub
            got = await drain(client, queues)
        assert said.startswith(f"{STS}-2 drained in ") and said.endswith(
            f"statefulset {NS}/{STS} set to 2 replicas (3 pods running)"), said
        # The PATCH came after the drain: the table the API server's reaction read no longer had -2.
        assert [m for m, *_ in wire(k)] == ["GET", "PATCH"]
        assert len(at_patch) == 1 and set(at_patch[0]) == set(PODS[:2]), at_patch
        assert replicas_stored(k) == 2 and took < 60
        # The leaver exits by itself once its grace is over, with code 0 (on Kubernetes the pod
        # is removed first).
        deadline = time.monotonic() + 20
        while cluster.child(PODS[2]).alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert cluster.child(PODS[2]).proc.returncode == 0
        assert not refused, refused[:5]  # a drain never refuses a publish
        expected = oracle(cluster.space, subs, messages)
        assert len(messages) == 600 and len(expected) > 100
        assert compare(expected, got) == {"missing": [], "unexpected": [], "duplicates": [],
                                          "wrong_subscriptions": []}
    finally:
        await store.close()
        await asyncio.to_thread(cluster.stop)
    assert_no_children(cluster)


async def test_a_drain_that_cannot_finish_keeps_the_pod(apiserver, tmp_path):
    """The last owner cannot leave (nobody to take its segments): Leave refuses, nothing is patched."""
    k, server = apiserver
    k.objects[STATEFULSETS, NS, STS].raw["spec"]["replicas"] = 1
    cluster = await asyncio.to_thread(start_cluster, tmp_path / "cluster", matchers=1, matcher_ids=PODS[:1])
    store = Store(cluster.store_url)
    try:
        backend = backend_for(server)
        backend.drainer = MatcherDrainer(store, asyncio.get_running_loop())
        backend.drain_timeout_s = 20.0
        said = await asyncio.to_thread(backend.scale_to, 0)
        assert said.startswith(f"{STS}-0 did not leave: ") and said.endswith(
            f"statefulset {NS}/{STS} stays at 1 replicas"), said
        assert [m for m, *_ in wire(k)] == ["GET"] and replicas_stored(k) == 1
        assert set(stored_owners(cluster.store_url)) == {PODS[0]}
    finally:
        await store.close()
        await asyncio.to_thread(cluster.stop)
    assert_no_children(cluster)
