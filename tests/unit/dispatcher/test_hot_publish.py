"""bluedove/dispatcher/routes/hot.py's HotRoutes serving `POST /v1/messages` and `POST /v1/messages:batch`
below FastAPI's routing stack: each answer (status, headers, body) is exactly the one the FastAPI
routes give, for success and for every error the publish path maps (400/413/422 naming the field,
401/403/429 of API keys, 503 with Retry-After from backpressure or no matcher, 500 unforeseen);
the bytes-built 202 body is the JSON `json.dumps` would give; nothing is forwarded when a request
is refused."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi.testclient import TestClient

from bluedove.core.apikeys import KeyRecord
from bluedove.core.errors import unavailable
from bluedove.core.space import default_space
from bluedove.dispatcher.app import create_app
from bluedove.dispatcher.auth import insufficient_scope, key_unauthorized, rate_limited
from bluedove.dispatcher.routes import messages
from bluedove.dispatcher.routes.hot import HotRoutes
from bluedove.runtime.settings import DispatcherSettings

SPACE = default_space()
NAMES = SPACE.names


class FakeForwarder:
    """The forwarder's face to the publish path: `mode` "ok" stores everything, "full" is at
    its bound (refused before decoding), "down" has no candidate left, "boom" fails as nobody foresaw."""

    def __init__(self, mode: str) -> None:
        self.mode, self.sent, self.outstanding = mode, [], 0

    def full(self) -> bool:
        return self.mode == "full"

    def refuse(self) -> None:
        raise unavailable("the dispatcher has 50000 messages under way (bound 50000); retry later")

    async def publish(self, out) -> None:
        if self.mode == "down":
            raise unavailable("no candidate matcher could take the message; retry with the same id")
        if self.mode == "boom":
            raise RuntimeError("boom")
        self.sent.append((list(out.ids), [{**json.loads(b), "published_at": None} for b in out.bodies]))


class FakeAuth:
    """API keys as the dispatcher checks them: "pub" may publish, "sub" may not, "slow" is over its rate."""

    async def require(self, authorization, scope):
        rec = {"Bearer pub": KeyRecord("pub", "", ("publish",)), "Bearer sub": KeyRecord("sub", "", ("subscribe",)),
               "Bearer slow": KeyRecord("slow", "", ("publish",), rate_msgs=1)}.get(authorization)
        if rec is None:
            raise key_unauthorized()
        if not rec.allows(scope):
            raise insufficient_scope(scope)
        return rec

    def admit(self, rec, n_msgs, n_bytes):
        if rec.rate_msgs:
            raise rate_limited(1.5, "message")


def client(hot: bool, mode: str = "ok", auth: bool = False) -> tuple[TestClient, FakeForwarder]:
    app = create_app(DispatcherSettings(), SPACE)
    if not hot:
        app.user_middleware = [m for m in app.user_middleware if m.cls is not HotRoutes]
    d = app.state.dispatcher
    d.forwarder = d.paths.default.forwarder = FakeForwarder(mode)
    d.auth = FakeAuth() if auth else None
    d.closing = asyncio.Event()
    return TestClient(app, raise_server_exceptions=False), d.forwarder


def msg(i: int, **extra) -> dict:
    return {"id": f"m-{i}", "attributes": {n: 1.5 + i for n in NAMES}, "payload": {"n": i}, **extra}


def body(x) -> bytes:
    return json.dumps(x).encode()


BATCH = body({"messages": [msg(i) for i in range(5)]})
ONE = body(msg(7))
BAD_VALUE = body({"messages": [msg(0), {"id": "m-1", "attributes": {n: -1e9 for n in NAMES}}]})
CASES = [
    ("POST", "/v1/messages:batch", {}, BATCH, "ok", False),
    ("POST", "/v1/messages", {}, ONE, "ok", False),
    ("POST", "/v1/messages:batch", {}, b"{not json", "ok", False),
    ("POST", "/v1/messages:batch", {}, body({"messages": []}), "ok", False),
    ("POST", "/v1/messages:batch", {}, BAD_VALUE, "ok", False),
    ("POST", "/v1/messages:batch", {}, body({"messages": [msg(0, extra=1)]}), "ok", False),
    ("POST", "/v1/messages:batch", {}, body({"messages": [msg(0, payload="x" * 300_000)]}), "ok", False),
    ("POST", "/v1/messages", {}, body({"attributes": {}}), "ok", False),
    ("POST", "/v1/messages", {}, body({**msg(0), "id": "bad id"}), "ok", False),
    ("POST", "/v1/messages:batch", {}, BATCH, "full", False),
    ("POST", "/v1/messages", {}, ONE, "full", False),
    ("POST", "/v1/messages:batch", {}, BATCH, "down", False),
    ("POST", "/v1/messages:batch", {}, BATCH, "boom", False),
    ("POST", "/v1/messages:batch", {"Authorization": "Bearer pub"}, BATCH, "ok", True),
    ("POST", "/v1/messages:batch", {}, BATCH, "ok", True),
    ("POST", "/v1/messages", {"Authorization": "Bearer nope"}, ONE, "ok", True),
    ("POST", "/v1/messages:batch", {"Authorization": "Bearer sub"}, BATCH, "ok", True),
    ("POST", "/v1/messages:batch", {"Authorization": "Bearer slow"}, BATCH, "ok", True),
    # not publish: FastAPI's answers (405, 404)
    ("GET", "/v1/messages", {}, None, "ok", False),
    ("GET", "/v1/messages:batch", {}, None, "ok", False),
    ("POST", "/v1/messages/", {}, ONE, "ok", False),
]


@pytest.mark.parametrize("method, path, headers, content, mode, auth", CASES)
def test_hot_publish_answers_as_the_fastapi_routes_do(method, path, headers, content, mode, auth):
    answers = []
    for hot in (True, False):
        c, fwd = client(hot, mode, auth)
        r = c.request(method, path, headers=headers, content=content, follow_redirects=False)
        answers.append((r.status_code, sorted(r.headers.items()), r.content, fwd.sent))
    assert answers[0] == answers[1]
    status, _, content_, sent = answers[0]
    if status != 202:
        assert sent == []  # a refused request forwards nothing
        if status >= 400 and method == "POST" and path.startswith("/v1/messages") and not path.endswith("/"):
            assert json.loads(content_)["error"]["code"]


def test_the_202_answer_is_the_json_of_the_ids_in_order():
    c, fwd = client(True)
    r = c.post("/v1/messages:batch", content=body({"messages": [msg(0), {"attributes": msg(1)["attributes"]}]}))
    assert r.status_code == 202 and r.headers["content-type"] == "application/json"
    ids = r.json()["ids"]
    assert r.content == json.dumps({"ids": ids}, separators=(",", ":")).encode()
    assert ids[0] == "m-0" and len(ids[1]) == 32 and fwd.sent[0][0] == ids
    r = c.post("/v1/messages", content=body({"attributes": msg(1)["attributes"]}))
    assert r.status_code == 202 and r.content == json.dumps({"id": r.json()["id"]}, separators=(",", ":")).encode()
    assert [b["id"] for b in fwd.sent[0][1]] == ids  # the stored bodies carry the ids answered


def without_publish_routes(c: TestClient) -> TestClient:
    """The app with FastAPI's publish routes taken out (what HotRoutes serves still answers)."""
    c.app.router.routes = [r for r in c.app.router.routes if getattr(r, "original_router", None) is not messages.router]
    return c


def test_publish_is_served_without_fastapis_routes():
    c, fwd = client(True)
    without_publish_routes(c)
    assert c.post("/v1/messages:batch", content=BATCH).status_code == 202
    assert c.post("/v1/messages", content=ONE).json() == {"id": "m-7"}
    assert len(fwd.sent) == 2
    c, _ = client(False)
    assert without_publish_routes(c).post("/v1/messages", content=ONE).status_code == 404  # no route left
