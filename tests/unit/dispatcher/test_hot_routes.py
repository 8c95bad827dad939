"""bluedove/dispatcher/routes/hot.py's HotRoutes: poll and ack served without FastAPI's routing stack
answer exactly as the FastAPI routes do (status, headers, body), for success and for every
error the app maps (401, 422, 400, 503 store down, 500 unforeseen); other paths and methods
go on to FastAPI."""

from __future__ import annotations

import asyncio

import pytest
import redis.exceptions
from fastapi.testclient import TestClient

from bluedove.core.space import default_space
from bluedove.dispatcher.app import create_app
from bluedove.dispatcher.routes.hot import HotRoutes
from bluedove.runtime.settings import DispatcherSettings
from bluedove.store.store import BadToken


class FakeStore:
    """Poll and ack as the store answers them: "good" is the only token; queue "down" has its
    store unreachable, queue "boom" fails in a way nobody foresaw."""

    undeliverable = 0  # deliveries set aside by polls (none here)

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def _check(self, queue: str, token: str | None) -> None:
        if queue == "down":
            raise redis.exceptions.ConnectionError("store down")
        if queue == "boom":
            raise RuntimeError("boom")
        if token != "good":
            raise BadToken(queue)

    async def poll_json(self, queue, max_n, wait_s, stop=None, token=None, gone=None):
        self._check(queue, token)
        self.calls.append(("poll", queue, max_n, wait_s))
        return 1, '{"messages":[{"id":"m1","subscriptions":["s"],"receipt":"1-0"}]}'

    async def ack(self, queue, receipts, token=None):
        self._check(queue, token)
        self.calls.append(("ack", queue, receipts))
        return len(receipts)

    async def check_token(self, queue, token):
        return token == "good"


def client(hot: bool) -> tuple[TestClient, FakeStore]:
    """The dispatcher's app on a fake store (no lifespan: no cluster), with or without HotRoutes."""
    app = create_app(DispatcherSettings(), default_space())
    if not hot:
        app.user_middleware = [m for m in app.user_middleware if m.cls is not HotRoutes]
    store = app.state.dispatcher.store = FakeStore()
    app.state.dispatcher.closing = asyncio.Event()
    return TestClient(app, raise_server_exceptions=False), store


GOOD = {"Authorization": "Bearer good"}
BAD = {"Authorization": "Bearer bad"}
REQUESTS = [
    ("GET", "/v1/queues/q1/messages?max=5&wait=0", GOOD, None),
    ("GET", "/v1/queues/q1/messages", GOOD, None),
    ("GET", "/v1/queues/q1/messages?max=0", GOOD, None),
    ("GET", "/v1/queues/q1/messages?max=0", BAD, None),
    ("GET", "/v1/queues/q1/messages", BAD, None),
    ("GET", "/v1/queues/q1/messages", {}, None),
    ("GET", "/v1/queues/down/messages", GOOD, None),
    ("GET", "/v1/queues/boom/messages", GOOD, None),
    ("POST", "/v1/queues/q1/ack", GOOD, b'{"receipts":["1-0","2-0"]}'),
    ("POST", "/v1/queues/q1/ack", BAD, b'{"receipts":["1-0"]}'),
    ("POST", "/v1/queues/q1/ack", GOOD, b'{"receipts":["nope"]}'),
    ("POST", "/v1/queues/q1/ack", GOOD, b'{"receipts":[],"extra":1}'),
    ("POST", "/v1/queues/q1/ack", GOOD, b'{not json'),
    ("POST", "/v1/queues/down/ack", GOOD, b'{"receipts":["1-0"]}'),
    # not poll or ack: FastAPI's answers (405, 404, a trailing slash)
    ("POST", "/v1/queues/q1/messages", GOOD, b"{}"),
    ("GET", "/v1/queues/q1/ack", GOOD, None),
    ("GET", "/v1/queues/q1/messages/", GOOD, None),
    ("GET", "/v1/queues/a/b/messages", GOOD, None),
]


@pytest.mark.parametrize("method, path, headers, body", REQUESTS)
def test_hot_routes_answer_as_the_fastapi_routes_do(method, path, headers, body):
    answers = []
    for hot in (True, False):
        c, store = client(hot)
        r = c.request(method, path, headers=headers, content=body, follow_redirects=False)
        answers.append((r.status_code, sorted(r.headers.items()), r.content, store.calls))
    assert answers[0] == answers[1]


def test_hot_routes_serve_poll_and_ack():
    c, store = client(True)
    r = c.get("/v1/queues/q1/messages", params={"max": 5, "wait": 0}, headers=GOOD)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json()["messages"][0]["receipt"] == "1-0"
    assert c.post("/v1/queues/q1/ack", json={"receipts": ["1-0"]}, headers=GOOD).status_code == 204
    assert store.calls == [("poll", "q1", 5, 0.0), ("ack", "q1", ["1-0"])]
    assert c.get("/v1/queues/down/messages", headers=GOOD).status_code == 503
    assert c.get("/v1/queues/boom/messages", headers=GOOD).json()["error"]["code"] == "internal"
    assert c.get("/v1/queues/q1/messages", headers=BAD).status_code == 401
    assert "/v1/queues/{queue}/messages" in c.get("/openapi.json").json()["paths"]
