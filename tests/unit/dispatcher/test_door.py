"""The door's protocol (bluedove/dispatcher/door.py) fed bytes directly, with a transport that
records what it is asked: what it answers, when it arms a timer, what the app sees. The same
limits against a real dispatcher over sockets: tests/integration/test_http_limits.py."""

from __future__ import annotations

import asyncio
import json

import pytest
from uvicorn.server import ServerState

from bluedove.dispatcher.door import BODY, IDLE, DoorConfig, DoorProtocol, Limits
from bluedove.runtime.settings import DispatcherSettings


class Transport(asyncio.Transport):
    """Records what is written; closing and half-closing are flags (TLS cannot half-close)."""

    def __init__(self, tls: bool = False) -> None:
        self.tls = tls
        super().__init__({"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 5555)})
        self.out = bytearray()
        self.closed = self.eof = False

    def write(self, data) -> None:
        self.out += data

    def write_eof(self) -> None:
        self.eof = True

    def can_write_eof(self) -> bool:
        return not self.tls

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def protocol(seen: list, tls: bool = False) -> tuple[DoorProtocol, Transport]:
    async def app(scope, receive, send):
        while True:
            seen.append(await receive())
            if seen[-1]["type"] == "http.disconnect":
                return
            if not seen[-1]["more_body"]:
                await send({"type": "http.response.start", "status": 204, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return

    config = DoorConfig(app, Limits(max_body_bytes=1000, header_s=10, body_s=30), log_level="warning")
    config.load()
    p = DoorProtocol(config=config, server_state=ServerState(), app_state={}, _loop=asyncio.get_running_loop())
    t = Transport(tls)
    p.connection_made(t)
    return p, t


def answer(t: Transport) -> tuple[int, dict]:
    top, _, body = bytes(t.out).partition(b"\r\n\r\n")
    assert b"connection: close" in top.lower()
    return int(top.split(b" ")[1]), json.loads(body)


async def test_a_request_whole_in_one_read_leaves_no_timer():
    """The limits cost no timer for a request that comes whole in one read."""
    seen: list = []
    p, t = protocol(seen)
    p.data_received(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}")
    assert p.timer is None and p.phase == IDLE
    await asyncio.sleep(0)
    assert seen == [{"type": "http.request", "body": b"{}", "more_body": False}]
    assert t.out.startswith(b"HTTP/1.1 204")


@pytest.mark.parametrize("tls", [False, True])
async def test_a_content_length_over_the_cap_is_answered_before_the_app_sees_it(tls):
    """Answered, then kept open a while (half-closed unless TLS) for the client to read it."""
    seen: list = []
    p, t = protocol(seen, tls)
    p.data_received(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 1001\r\n\r\n" + b"x" * 100)
    await asyncio.sleep(0)
    status, body = answer(t)
    assert status == 413 and body["error"]["code"] == "payload_too_large" and "1000" in body["error"]["message"]
    assert seen == [] and t.eof is not tls and not t.closed and p.timer is not None
    p.data_received(b"x" * 500)  # what follows is dropped
    assert bytes(t.out).count(b"HTTP/1.1") == 1


async def test_a_chunked_body_is_refused_once_past_the_cap_and_the_app_sees_the_client_gone():
    seen: list = []
    p, t = protocol(seen)
    chunk = b"258\r\n" + b"x" * 600 + b"\r\n"  # 600 bytes
    p.data_received(b"POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk)
    assert p.phase == BODY and p.timer is not None  # the body is due
    await asyncio.sleep(0)
    p.data_received(chunk)
    await asyncio.sleep(0)
    status, body = answer(t)
    assert status == 413
    assert [m["type"] for m in seen] == ["http.request", "http.disconnect"]


def test_the_body_cap_must_leave_room_for_a_message_at_the_payload_limit():
    with pytest.raises(ValueError, match="BLUEDOVE_MAX_BODY_BYTES"):
        DispatcherSettings(max_body_bytes=256 * 1024)
    assert DispatcherSettings().max_body_bytes == 16 * 1024 * 1024
