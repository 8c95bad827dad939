"""Parked long polls through a real dispatcher: a client that leaves mid-poll takes nothing
with it, and a dispatcher parks polls on a few Redis connections (bluedove/store/wakeups.py;
docs/api.md, "Long polls")."""

from __future__ import annotations

import asyncio
import random
import time

import httpx
import pytest

from bluedove.store.client import sync_client
from tests.integration.helpers import new_queue

pytestmark = pytest.mark.integration


def _point_queue(api: httpx.Client) -> tuple[str, dict, dict]:
    """A queue subscribed to a box only its own publishes hit: (queue, auth, attributes)."""
    space = api.get("/v1/space").json()
    dims = space["dimensions"]
    x = {d["name"]: d["min"] + (d["max"] - d["min"]) * random.uniform(0.3, 0.7) for d in dims}
    queue, auth = new_queue(api)
    eps = {name: 1e-9 * max(1.0, abs(v)) for name, v in x.items()}
    preds = {name: [v - eps[name], v + eps[name]] for name, v in x.items()}
    r = api.post("/v1/subscriptions", json={"queue": queue, "predicates": preds}, headers=auth)
    assert r.status_code == 201, r.text
    return queue, auth, x


async def test_a_client_that_leaves_mid_poll_takes_no_delivery_with_it(cluster, api):
    """The delivery published after the client left waits for the next poll; it is not handed
    out to the closed connection (where it would be lost until its visibility timeout)."""
    queue, auth, x = _point_queue(api)
    host, port = cluster.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write((f"GET /v1/queues/{queue}/messages?wait=20 HTTP/1.1\r\nHost: t\r\n"
                  f"Authorization: {auth['Authorization']}\r\n\r\n").encode())
    await writer.drain()
    await asyncio.sleep(0.5)  # parked
    writer.close()
    await asyncio.sleep(0.3)
    r = api.post("/v1/messages", json={"attributes": x, "payload": {"n": 1}})
    assert r.status_code == 202, r.text
    got = api.get(f"/v1/queues/{queue}/messages", params={"wait": 10}, headers=auth).json()["messages"]
    assert [m["payload"] for m in got] == [{"n": 1}]


async def test_parked_polls_hold_no_redis_connection_each(cluster, api):
    queues = [_point_queue(api) for _ in range(3)]
    r = sync_client(cluster.store_url)
    try:
        async with httpx.AsyncClient(base_url=cluster.url, timeout=30,
                                     limits=httpx.Limits(max_connections=400)) as client:
            await client.get(f"/v1/queues/{queues[0][0]}/messages", headers=queues[0][1])
            idle = int(r.info("clients")["connected_clients"])
            many = [queues[i % 3] for i in range(300)]  # 300 polls, a hundred on each queue
            started = time.monotonic()
            polls = [asyncio.create_task(client.get(f"/v1/queues/{q}/messages", params={"wait": 8}, headers=a))
                     for q, a, _ in many]
            await asyncio.sleep(2.0)
            parked = int(r.info("clients")["connected_clients"])
            # A connection each would be 300 more (as before polls shared one subscription);
            # the cluster's own processes may open a few meanwhile.
            assert parked - idle < 100, (idle, parked)
            x = queues[1][2]
            assert api.post("/v1/messages", json={"attributes": x, "payload": 7}).status_code == 202
            answers = await asyncio.gather(*polls)
        took = time.monotonic() - started
        assert all(a.status_code == 200 for a in answers)
        got = [len(a.json()["messages"]) for a in answers]
        assert sum(got) == 1 and got.index(1) % 3 == 1  # one poll of queue 1 got it; others stayed parked
        assert took < 8 + 1 + 15  # every poll ends within its wait (+ the test's own pace on a loaded machine)
    finally:
        r.close()
