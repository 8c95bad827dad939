"""Deleting queues of 10,000 subscriptions does not hold publishing up: publishes sent all through
two such deletions (the second on matchers that remember the first's removals) are answered
202, not 503, and every one reaches the queue that stays, once."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np

from tests.integration.conftest import start_cluster
from tests.integration.helpers import drain

BIG = 10_000  # subscriptions of each queue deleted
BATCH = 1000


async def big_queue(client: httpx.AsyncClient, rng: np.random.Generator) -> tuple[str, dict]:
    """A queue holding BIG subscriptions of random ranges, subscribed a :batch at a time."""
    r = await client.post("/v1/queues")
    assert r.status_code == 201, r.text
    queue, headers = r.json()["queue"], {"Authorization": f"Bearer {r.json()['token']}"}
    for _ in range(BIG // BATCH):
        lows = rng.uniform(0, 800, (BATCH, 4)).round(1)
        items = [{"queue": queue, "predicates": {f"x{i}": [lo[i], lo[i] + 200] for i in range(4)}} for lo in lows]
        r = await client.post("/v1/subscriptions:batch", json={"subscriptions": items}, headers=headers)
        assert r.status_code == 201, r.text
    return queue, headers


async def test_publishes_are_answered_while_big_queues_are_deleted(tmp_path):
    c = await asyncio.to_thread(start_cluster, tmp_path, matchers=2)
    try:
        async with httpx.AsyncClient(base_url=c.url, timeout=30) as client:
            r = await client.post("/v1/subscriptions", json={"predicates": {}})  # every message, its own queue
            assert r.status_code == 201, r.text
            kept = {r.json()["queue"]: {"Authorization": f"Bearer {r.json()['token']}"}}
            rng = np.random.default_rng(3)
            doomed = [await big_queue(client, rng) for _ in range(2)]
            answers: list[int] = []
            published: list[str] = []
            stop = asyncio.Event()

            async def publish(lane: int) -> None:
                k = 0
                while not stop.is_set():
                    x = rng.uniform(0, 1000, 4).round(2).tolist()
                    r = await client.post("/v1/messages", json={"id": f"m{lane}-{k}", "attributes": {
                        f"x{i}": x[i] for i in range(4)}})
                    answers.append(r.status_code)
                    if r.status_code == 202:
                        published.append(r.json()["id"])
                    k += 1
                    await asyncio.sleep(0.02)

            publishing = [asyncio.create_task(publish(lane)) for lane in range(2)]
            try:
                await asyncio.sleep(0.5)
                for queue, headers in doomed:
                    r = await client.delete(f"/v1/queues/{queue}", headers=headers)
                    assert r.status_code == 204, r.text
                await asyncio.sleep(1.0)  # the matchers' catalogue tail applies the removals too
            finally:
                stop.set()
                await asyncio.gather(*publishing)
            assert answers and all(a == 202 for a in answers), sorted(set(answers))
            got = await drain(client, kept)
            assert sorted(m["id"] for _, m in got) == sorted(published)  # each once
    finally:
        await asyncio.to_thread(c.stop)
