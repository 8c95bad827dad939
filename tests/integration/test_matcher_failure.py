"""A matcher killed with SIGKILL while messages are published: no accepted message is lost
or duplicated; the rest keep serving; the restarted matcher reloads the catalogue and is
used again. Publishers retry a 503 with the same message id, as API.md tells clients to."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time

import httpx
import pytest

from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import compare, drain, new_queue, oracle
from tests.integration.test_exactness import random_predicates

pytestmark = pytest.mark.integration
DIMS = ("x0", "x1", "x2", "x3")


async def publish_steadily(client: httpx.AsyncClient, rng: random.Random, prefix: str, n: int, rate: float,
                           messages: dict, refused: list) -> None:
    """Publish n messages at `rate`/s, each retried with its id until accepted (at most ~15 s)."""

    async def one(i: int) -> None:
        attrs = {d: rng.uniform(0, 1000) for d in DIMS}
        mid = f"{prefix}-{i}"
        deadline = time.monotonic() + 15
        while True:
            try:
                r = await client.post("/v1/messages", json={"attributes": attrs, "id": mid})
                if r.status_code == 202:
                    messages[mid] = tuple(attrs[d] for d in DIMS)
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


def test_sigkill_a_matcher_while_publishing(tmp_path):
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

        victim = cluster.child("m2")

        async def run():
            messages: dict = {}
            refused: list = []
            async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
                pub = asyncio.create_task(publish_steadily(client, rng, "a", 600, 150, messages, refused))
                await asyncio.sleep(2.0)
                os.kill(victim.pid, signal.SIGKILL)
                killed_at = time.monotonic()
                await pub
                # The rest keep serving; the supervisor reports the death.
                events = cluster.check()
                assert any("m2 died (signal 9)" in e for e in events), events
                status = (await client.get("/v1/cluster")).json()
                states = {m["id"]: m["status"] for m in status["members"]}
                assert states["m2"] in ("dead", "suspect") and states["m1"] == "alive", states
                # Restart it (same id and port): it reloads the catalogue and serves again.
                victim.start()
                for _ in range(100):
                    states = {m["id"]: m["status"] for m in (await client.get("/v1/cluster")).json()["members"]}
                    if states["m2"] == "alive":
                        break
                    await asyncio.sleep(0.2)
                assert states["m2"] == "alive", states
                await publish_steadily(client, rng, "b", 300, 150, messages, refused)
                got = await drain(client, queues)
            return messages, refused, got, killed_at

        messages, refused, got, killed_at = asyncio.run(run())
        assert len(messages) == 900  # every message was accepted in the end
        expected = oracle(cluster.space, subs, messages)
        assert len(expected) > 500
        assert compare(expected, got) == {"missing": [], "unexpected": [], "duplicates": [],
                                          "wrong_subscriptions": []}
        # Refusals (if any) happened only around the kill, never after the restart.
        assert all(t >= killed_at - 0.5 for t, _ in refused)
        assert not [mid for _, mid in refused if mid.startswith("b-")]
    finally:
        cluster.stop()
    assert_no_children(cluster)
