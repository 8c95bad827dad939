"""SDK retries: idempotent calls retry on Unavailable with backoff; others raise at once."""

from __future__ import annotations

import asyncio

import pytest

from bluedove.client import AsyncClient, Client, InvalidMessage, Unavailable


class Flaky:
    """A transport whose every call fails `fails` times with Unavailable, then answers."""

    def __init__(self, fails: int, error=Unavailable) -> None:
        self.fails = fails
        self.error = error
        self.calls = 0

    def _answer(self, value):
        self.calls += 1
        if self.calls <= self.fails:
            raise self.error("unavailable", "down")
        return value

    def space(self):
        return self._answer({"dimensions": []})

    def publish(self, body, space=None):
        return self._answer("id-1")

    def poll(self, queue, token, max_n, wait):
        return self._answer([])

    def close(self):
        pass


class AsyncFlaky(Flaky):
    async def space(self):
        return self._answer({"dimensions": []})

    async def publish(self, body, space=None):
        return self._answer("id-1")


def client(t, cls=Client, retries=3):
    c = cls("http://127.0.0.1:1", retries=retries, backoff_s=0.001)
    c.t = t
    return c


@pytest.mark.parametrize("fails,calls,ok", [(0, 1, True), (2, 3, True), (3, 4, True), (4, 4, False)])
def test_idempotent_calls_retry(fails, calls, ok):
    t = Flaky(fails)
    c = client(t)
    if ok:
        assert c.space() == {"dimensions": []}
    else:
        with pytest.raises(Unavailable):
            c.space()
    assert t.calls == calls


def test_publish_retries_only_with_an_id():
    t = Flaky(1)
    with pytest.raises(Unavailable):
        client(t).publish({"x0": 1})
    assert t.calls == 1
    t = Flaky(1)
    assert client(t).publish({"x0": 1}, id="m-1") == "id-1" and t.calls == 2


def test_other_errors_are_not_retried():
    t = Flaky(1, InvalidMessage)
    with pytest.raises(InvalidMessage):
        client(t).space()
    assert t.calls == 1


def test_async_client_retries_the_same_way():
    t = AsyncFlaky(2)
    c = client(t, AsyncClient)
    assert asyncio.run(c.space()) == {"dimensions": []} and t.calls == 3
    t = AsyncFlaky(1)
    with pytest.raises(Unavailable):
        asyncio.run(client(t, AsyncClient).publish({"x0": 1}))
    assert t.calls == 1
