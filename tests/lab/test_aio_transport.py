"""bluedove/lab/aio_transport.py against a real HTTP server on loopback (aiohttp's own test server): the
requests it sends, the answers it decodes and the errors it raises, as the SDK's transport."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bluedove.client.errors import Unauthorized, Unavailable
from bluedove.lab.aio_transport import AioHttpTransport
from bluedove.store.server import free_port


@pytest.fixture
async def server():
    seen: list[tuple[str, str, str, dict]] = []

    async def poll(request: web.Request) -> web.Response:
        seen.append(("poll", request.match_info["q"], request.headers["Authorization"], dict(request.query)))
        if request.headers["Authorization"] != "Bearer tok":
            return web.json_response({"error": {"code": "unauthorized", "message": "bad token"}}, status=401)
        return web.json_response({"messages": [{"id": "m1", "receipt": "1-0"}]})

    async def ack(request: web.Request) -> web.Response:
        seen.append(("ack", request.match_info["q"], request.headers["Authorization"], await request.json()))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_get("/v1/queues/{q}/messages", poll)
    app.router.add_post("/v1/queues/{q}/ack", ack)
    srv = TestServer(app, host="127.0.0.1")
    await srv.start_server()
    yield str(srv.make_url("")), seen
    await srv.close()


async def test_poll_and_ack_send_the_api_requests_and_decode_the_answers(server):
    url, seen = server
    t = AioHttpTransport(url, 2)
    try:
        assert await t.poll("q1", "tok", 100, 0) == [{"id": "m1", "receipt": "1-0"}]
        assert await t.ack("q1", "tok", ["1-0"]) is None
    finally:
        await t.close()
    assert seen == [("poll", "q1", "Bearer tok", {"max": "100", "wait": "0"}),
                    ("ack", "q1", "Bearer tok", {"receipts": ["1-0"]})]


async def test_an_error_answer_raises_the_sdks_typed_error(server):
    url, _ = server
    t = AioHttpTransport(url, 1)
    try:
        with pytest.raises(Unauthorized) as exc:
            await t.poll("q1", "wrong", 100, 0)
    finally:
        await t.close()
    assert (exc.value.status, exc.value.code, exc.value.message) == (401, "unauthorized", "bad token")


async def test_a_server_that_cannot_be_reached_is_unavailable():
    t = AioHttpTransport(f"http://127.0.0.1:{free_port()}", 1, timeout_s=2)
    try:
        with pytest.raises(Unavailable):
            await t.poll("q1", "tok", 100, 0)
    finally:
        await t.close()
