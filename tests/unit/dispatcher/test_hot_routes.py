"""bluedove/dispatcher/routes/hot.py's HotRoutes: poll, ack, subscribe and unsubscribe served without
FastAPI's routing stack answer exactly as the FastAPI routes do (status, headers, body), for
success and for every error the app maps (401, 404, 422, 400, 503 store down, 500 unforeseen);
other paths and methods go on to FastAPI. (A subscribe's success needs a cluster: the
integration tests make every kind of subscription through these routes.)"""

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

    async def queue_for_token(self, token):  # an unsubscribe's lookup: q1 holds no subscription
        return "q1" if token == "good" else None

    async def get_subscription(self, sub_id, queue, at=None):
        return None

    async def entered_spaces(self, queue):
        return []


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
    ("POST", "/v1/subscriptions", GOOD, b'{not json'),
    ("POST", "/v1/subscriptions", GOOD, b'{"predicates": {"x0": [5, 1]}}'),
    ("POST", "/v1/subscriptions", GOOD, b'{"predicates": {"x0": [1, 5]}, "extra": 1}'),
    ("POST", "/v1/subscriptions:batch", GOOD, b'{"subscriptions": []}'),
    ("POST", "/v1/subscriptions:batch", GOOD, b'{"subscriptions": [{"predicates": {"nope": [1, 2]}}]}'),
    ("POST", "/v1/spaces/default/subscriptions", GOOD, b'{"predicates": {"x9": [1, 2]}}'),
    ("POST", "/v1/spaces/default/subscriptions:batch", GOOD, b'[]'),
    ("POST", "/v1/spaces/Bad%20Name/subscriptions", GOOD, b'{"predicates": {}}'),
    ("DELETE", "/v1/subscriptions/s1", GOOD, None),
    ("DELETE", "/v1/subscriptions/s1", BAD, None),
    ("DELETE", "/v1/subscriptions/s1", {}, None),
    # not poll, ack, subscribe or unsubscribe: FastAPI's answers (405, 404, a trailing slash)
    ("GET", "/v1/subscriptions:batch", GOOD, None),
    ("PATCH", "/v1/subscriptions/s1", GOOD, b"{}"),
    ("DELETE", "/v1/subscriptions/s1/", GOOD, None),
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


def test_hot_routes_serve_subscribe_and_unsubscribe_without_the_app():
    """HotRoutes in front of an app that answers nothing but 418: the subscription calls are
    answered all the same (the route functions find the dispatcher through the request's app)."""
    app = client(True)[0].app

    async def teapot(scope, receive, send):
        await send({"type": "http.response.start", "status": 418, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    hot = HotRoutes(teapot)

    async def asgi(scope, receive, send):
        await hot({**scope, "app": app}, receive, send)

    c = TestClient(asgi, raise_server_exceptions=False)
    bad = {"predicates": {"x0": [5, 1]}}
    assert c.post("/v1/subscriptions", json=bad, headers=GOOD).status_code == 422
    assert c.post("/v1/subscriptions:batch", json={"subscriptions": [bad]}, headers=GOOD).json()["error"]["field"] \
        == "subscriptions[0].predicates.x0"
    in_space = c.post("/v1/spaces/default/subscriptions:batch", json={"subscriptions": [bad]}, headers=GOOD)
    assert in_space.status_code == 422
    assert c.delete("/v1/subscriptions/s1", headers=BAD).status_code == 401
    assert c.delete("/v1/subscriptions/s1", headers=GOOD).status_code == 404  # q1 has no such subscription
    assert c.get("/v1/subscriptions/s1", headers=GOOD).status_code == 418  # a read: the app's
