"""Exact delivery on a real 4-matcher cluster, checked against the brute-force oracle.

Random subscriptions (wildcards, ranges past the space's edges, tiny ranges, some removed
again) and messages (many exactly on predicate bounds), published singly and in batches:
each (queue, message) pair the oracle names arrives once with its complete subscription
list, and nothing else arrives.
"""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

from tests.integration.helpers import compare, drain, new_queue, oracle

pytestmark = pytest.mark.integration

N_QUEUES = 40
N_SUBS = 2000
N_MESSAGES = 2000


def random_predicates(rng: random.Random) -> dict:
    preds = {}
    for d in ("x0", "x1", "x2", "x3"):
        kind = rng.random()
        if kind < 0.3:
            continue  # wildcard
        if kind < 0.4:  # past the edges: clipped, not rejected
            preds[d] = [rng.choice([-500, -1, 0]), rng.choice([1000, 1001, 5000])] if rng.random() < 0.5 \
                else [rng.uniform(-100, 50), rng.uniform(900, 2000)]
        elif kind < 0.5:  # tiny
            lo = rng.randrange(0, 1000)
            preds[d] = [lo, lo + rng.choice([1e-9, 0.001, 1])]
        else:  # integral bounds so that messages can sit exactly on them
            lo = rng.randrange(0, 900)
            preds[d] = [lo, lo + rng.randrange(1, 600)]
    return preds


def random_point(rng: random.Random, bounds: list[float]) -> dict:
    attrs = {}
    for d in ("x0", "x1", "x2", "x3"):
        r = rng.random()
        if r < 0.4 and bounds:
            v = rng.choice(bounds)  # exactly on some predicate's low or high
        elif r < 0.45:
            v = rng.choice([0, 999.999999, 500, 250, 750])  # on and near segment cuts
        else:
            v = rng.uniform(0, 1000)
        attrs[d] = v if 0 <= v < 1000 else rng.uniform(0, 1000)
    return attrs


async def random_workload(url: str, queues: dict[str, dict], rng: random.Random, n_subs: int = N_SUBS,
                          n_messages: int = N_MESSAGES) -> tuple[dict, dict, list]:
    """Subscribe `n_subs` random subscriptions into `queues`, remove a tenth again, publish
    `n_messages` (half singly, half in batches of 100), drain every queue: (subs, messages, got)."""
    qids = list(queues)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=32)) as client:
        sem = asyncio.Semaphore(24)
        subs: dict[str, tuple[str, dict]] = {}

        async def subscribe(q: str, preds: dict) -> None:
            async with sem:
                r = await client.post("/v1/subscriptions", json={"queue": q, "predicates": preds},
                                      headers=queues[q])
                assert r.status_code == 201, r.text
                subs[r.json()["id"]] = (q, preds)

        await asyncio.gather(*(subscribe(rng.choice(qids), random_predicates(rng)) for _ in range(n_subs)))

        # Remove a tenth again.
        removed = rng.sample(sorted(subs), n_subs // 10)

        async def unsubscribe(sid: str) -> None:
            async with sem:
                r = await client.delete(f"/v1/subscriptions/{sid}", headers=queues[subs[sid][0]])
                assert r.status_code == 204, r.text

        await asyncio.gather(*(unsubscribe(s) for s in removed))
        for s in removed:
            del subs[s]

        bounds = sorted({float(b) for _, p in subs.values() for rng_ in p.values() for b in rng_
                         if 0 <= b < 1000})
        points = [random_point(rng, bounds) for _ in range(n_messages)]
        messages = await publish_points(client, sem, points)
        got = await drain(client, queues)
        return subs, messages, got


async def publish_points(client: httpx.AsyncClient, sem: asyncio.Semaphore, points: list[dict]) -> dict:
    """Publish half the points singly and half in batches of 100: {message id: point}."""
    messages: dict[str, tuple[float, ...]] = {}

    async def publish_one(attrs: dict) -> None:
        async with sem:
            r = await client.post("/v1/messages", json={"attributes": attrs, "payload": {"n": 1}})
            assert r.status_code == 202, r.text
            messages[r.json()["id"]] = tuple(attrs[d] for d in ("x0", "x1", "x2", "x3"))

    half = len(points) // 2
    await asyncio.gather(*(publish_one(a) for a in points[:half]))
    for i in range(half, len(points), 100):
        chunk = points[i:i + 100]
        r = await client.post("/v1/messages:batch", json={"messages": [{"attributes": a} for a in chunk]})
        assert r.status_code == 202, r.text
        for mid, a in zip(r.json()["ids"], chunk):
            messages[mid] = tuple(a[d] for d in ("x0", "x1", "x2", "x3"))
    return messages


EXACT = {"missing": [], "unexpected": [], "duplicates": [], "wrong_subscriptions": []}


def test_random_workload_is_delivered_exactly(cluster, api):
    rng = random.Random(20261122)
    queues = dict(new_queue(api) for _ in range(N_QUEUES))
    subs, messages, got = asyncio.run(random_workload(cluster.url, queues, rng))
    expected = oracle(cluster.space, subs, messages)
    assert len(expected) > 1000, "the workload should cause many deliveries"
    diff = compare(expected, got)
    assert diff == EXACT
    assert len(got) == len(expected)
