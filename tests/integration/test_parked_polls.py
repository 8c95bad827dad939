"""Parked long polls through a real dispatcher: a client that leaves mid-poll takes nothing
with it, and a dispatcher parks polls on a few Redis connections (bluedove/store/wakeups.py;
docs/api.md, "Long polls"). Its HTTP door serves them below the app
(bluedove/dispatcher/door_poll.py): the same answers, errors, keep-alive and pipelining."""

from __future__ import annotations

import asyncio
import json
import random
import time

import httpx
import pytest

from bluedove.store.client import sync_client
from tests.integration.helpers import new_queue
from tests.integration.test_api_contract import parked_polls

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


async def _answers(reader: asyncio.StreamReader, n: int) -> list[tuple[int, dict]]:
    """The next `n` responses on a connection: (status, JSON body)."""
    out = []
    for _ in range(n):
        top = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
        length = next(int(line.split(b":")[1]) for line in top.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        out.append((int(top.split(b" ", 2)[1]), json.loads(await reader.readexactly(length))))
    return out


def _get(path: str, auth: dict | None = None) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: t", *(f"{k}: {v}" for k, v in (auth or {}).items()), "", ""]
    return "\r\n".join(lines).encode()


async def test_polls_pipelined_on_one_connection_are_answered_in_order_and_it_serves_on(cluster, api):
    queue, auth, x = _point_queue(api)
    assert api.post("/v1/messages", json={"attributes": x, "payload": "first"}).status_code == 202
    host, port = cluster.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(_get(f"/v1/queues/{queue}/messages?wait=10", auth)  # answers with the delivery
                     + _get(f"/v1/queues/{queue}/messages?wait=1", auth)  # waits its second, empty
                     + _get("/v1/space"))  # the app's, after both
        started = time.monotonic()
        (s1, b1), (s2, b2), (s3, b3) = await _answers(reader, 3)
        assert (s1, [m["payload"] for m in b1["messages"]]) == (200, ["first"])
        assert (s2, b2) == (200, {"messages": []}) and time.monotonic() - started >= 1.0
        assert s3 == 200 and b3["dimensions"]
        writer.write(_get(f"/v1/queues/{queue}/messages?wait=10", auth))  # the connection is kept
        await asyncio.sleep(0.3)
        assert api.post("/v1/messages", json={"attributes": x, "payload": "second"}).status_code == 202
        [(s4, b4)] = await _answers(reader, 1)
        assert (s4, [m["payload"] for m in b4["messages"]]) == (200, ["second"])
    finally:
        writer.close()


async def test_a_poll_s_errors_come_in_the_api_s_shape_and_a_wrong_token_first(cluster, api):
    queue, auth, _ = _point_queue(api)
    wrong = {"Authorization": "Bearer not-the-token"}
    cases = [(f"/v1/queues/{queue}/messages?max=0", auth, 422, "invalid_parameter", "max"),
             (f"/v1/queues/{queue}/messages?wait=soon", auth, 422, "invalid_parameter", "wait"),
             (f"/v1/queues/{queue}/messages?max=0", wrong, 401, "unauthorized", None),  # the token first
             (f"/v1/queues/{queue}/messages", {}, 401, "unauthorized", None),
             ("/v1/queues/no-such-queue/messages", auth, 401, "unauthorized", None)]
    for path, headers, status, code, field in cases:
        r = api.get(path, headers=headers)
        assert r.status_code == status and r.headers["content-type"] == "application/json", (path, r.text)
        err = r.json()["error"]
        assert err["code"] == code and err.get("field") == field, (path, err)
        if status == 401:
            assert r.headers["www-authenticate"] == 'Bearer realm="bluedove"'


async def test_a_parked_poll_is_let_go_as_soon_as_its_client_goes(cluster, api):
    """Not at its next wake-up or when its wait is over: the door drops it with the connection."""
    queue, auth, _ = _point_queue(api)
    before = parked_polls(api)
    host, port = cluster.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(_get(f"/v1/queues/{queue}/messages?wait=20", auth))
    deadline = time.monotonic() + 10
    while parked_polls(api) <= before:
        assert time.monotonic() < deadline, "the poll never parked"
        await asyncio.sleep(0.02)
    writer.close()
    left = time.monotonic()
    while parked_polls(api) > before:
        assert time.monotonic() - left < 5, "the poll stayed parked after its client went"
        await asyncio.sleep(0.02)
