"""Script calls on one server go out on connections of the runner's own (bluedove/store/batch.py,
`_send_direct`), with the pipeline's behaviour: replies in order, an error reply in its place,
an unknown script loaded and the call sent again, a broken connection's calls sent once more on
a new one (the server killed its connections: the next call still succeeds), a call cancelled
mid-way never leaving its connection for another to read the rest of, a burst beyond
DIRECT_MOST through the client's pool, and every connection closed with the store."""

from __future__ import annotations

import asyncio

import pytest

from bluedove.store import batch
from bluedove.store.batch import Call
from bluedove.store.client import is_cluster_url, sync_client
from bluedove.store.connection import Connection

pytestmark = pytest.mark.integration

ECHO = "return ARGV[1]"
FAIL = "return redis.error_reply('nope')"
SLOW = "local t = redis.call('TIME'); while true do local n = redis.call('TIME'); " \
       "if (n[1] - t[1]) * 1000000 + (n[2] - t[2]) > tonumber(ARGV[1]) then return 1 end end"


@pytest.fixture
async def conn(redis_clean_url):
    if is_cluster_url(redis_clean_url):
        pytest.skip("a Redis Cluster's calls go through redis-py's cluster pipeline")
    c = Connection(redis_clean_url)
    yield c
    await c.close()


def _clients(url: str, name: str) -> list[str]:
    r = sync_client(url)
    try:
        return [line for line in r.execute_command("CLIENT", "LIST").splitlines() if f"name={name}" in line]
    finally:
        r.close()


async def test_replies_in_order_an_error_in_its_place_and_an_unknown_script_loaded(conn):
    echo, fail = conn.r.register_script(ECHO), conn.r.register_script(FAIL)
    calls = [Call(echo, [], ["a"]), Call(fail, [], []), Call(echo, [], ["b"])]
    out = await conn.runner.run_each(calls)  # neither script known to the server yet
    assert out[0] == "a" and out[2] == "b" and "nope" in str(out[1])
    with pytest.raises(Exception, match="nope"):
        await conn.runner.run(calls)
    assert await conn.runner.run([calls[0], calls[2]]) == ["a", "b"]
    assert len(conn.runner._open) == 1  # one connection, used again


async def test_a_killed_connection_is_replaced_and_the_call_goes_once_more(conn, redis_clean_url):
    echo = conn.r.register_script(ECHO)
    assert await conn.runner.run([Call(echo, [], ["x"])]) == ["x"]
    [own] = conn.runner._idle
    await own.send_command("CLIENT", "SETNAME", "bd-runner-test")
    assert await own.read_response() in ("OK", b"OK")
    r = sync_client(redis_clean_url)
    try:
        r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    finally:
        r.close()
    assert await conn.runner.run([Call(echo, [], ["y"])]) == ["y"]  # on a new connection
    assert own not in conn.runner._open and _clients(redis_clean_url, "bd-runner-test") == []


async def test_a_cancelled_call_drops_its_connection_and_a_burst_overflows_to_the_pool(conn, monkeypatch):
    slow, echo = conn.r.register_script(SLOW), conn.r.register_script(ECHO)
    await conn.runner.run([Call(slow, [], [0])])  # loaded
    task = asyncio.create_task(conn.runner.run([Call(slow, [], [300_000])]))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert conn.runner._idle == [] and not conn.runner._open  # its reply would be the next call's
    assert await conn.runner.run([Call(echo, [], ["after"])]) == ["after"]
    monkeypatch.setattr(batch, "DIRECT_MOST", 2)
    got = await asyncio.gather(*(conn.runner.run([Call(echo, [], [str(i)])]) for i in range(10)))
    assert got == [[str(i)] for i in range(10)] and len(conn.runner._open) <= 2


async def test_closing_the_store_closes_the_runners_connections(redis_clean_url):
    if is_cluster_url(redis_clean_url):
        pytest.skip("one server's runner")
    c = Connection(redis_clean_url)
    echo = c.r.register_script(ECHO)
    await asyncio.gather(*(c.runner.run([Call(echo, [], ["z"])]) for _ in range(4)))
    opened = list(c.runner._open)
    assert opened and all(x.is_connected for x in opened)
    await c.close()
    assert not any(x.is_connected for x in opened)
