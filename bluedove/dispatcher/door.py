"""The HTTP server's door: what a client may hold of a dispatcher before a request reaches the
app (docs/operations.md, "The HTTP server and load balancers").

uvicorn reads a whole body however large, and waits for headers and bodies forever: one
client, or a few hundred slow ones, could fill the dispatcher's memory or its connections.
The door is uvicorn's HTTP/1.1 protocol (httptools) with the limits added where the bytes
arrive, so that they cost nothing when a request comes whole in one read (nearly every one):

- the body cap: a Content-Length over `max_body_bytes` is answered 413 `payload_too_large`
  before any of its body is read, a chunked body as soon as it passes the cap; the connection
  is then closed, nothing more of the body kept (see `_shut` for the little still taken);
- the header timeout: a request's headers must be whole `header_timeout_s` after the
  connection opened or the request began, else the connection is closed (408 if a request had
  begun);
- the body timeout: a body must be whole `body_timeout_s` after its headers, else 408
  `request_timeout` and the connection is closed (and the app, if it waits for the body,
  sees the client gone);
- the idle timeout is uvicorn's keep-alive timeout (`idle_timeout_s`), counted from a
  response, or from the end of a body that came after its answer; a request being answered
  (a long poll) waits under none of these.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from bluedove.core.errors import ApiError
from bluedove.dispatcher.app import error_response
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.door_poll import POLL_PATH, DoorPoll
from bluedove.runtime.settings import DispatcherSettings

# How long a connection the door answered stays half-open for the client to read the answer.
LINGER_S = 2.0
# The scope key of a callable telling whether the request's client has gone.
GONE = "bluedove.gone"


@dataclass(frozen=True)
class Limits:
    """What a client may hold of the HTTP server: body bytes, and seconds for headers and body."""

    max_body_bytes: int
    header_s: float
    body_s: float

    @classmethod
    def of(cls, settings: DispatcherSettings) -> Limits:
        return cls(settings.max_body_bytes, settings.header_timeout_s, settings.body_timeout_s)


class DoorConfig(uvicorn.Config):
    """uvicorn's configuration, carrying the door's limits to each connection's protocol, and
    the dispatcher whose long polls the door serves itself (door_poll.py; None: the app does)."""

    def __init__(self, app: Any, limits: Limits, polls: Dispatcher | None = None, **kwargs: Any) -> None:
        super().__init__(app, http=DoorProtocol, ws="none", **kwargs)  # the API has no websockets
        self.limits = limits
        self.polls = polls


# Where a connection is in reading a request, which says which deadline runs (plain ints: an
# enum member costs ~0.1 µs a look-up, and these are looked at several times per request).
IDLE = 0  # between requests (a request may be being answered): no door timer
HEADERS = 1  # the connection is new, or a request began: its headers are due
BODY = 2  # headers are in: the body is due
SHUT = 3  # the door closed the connection: what the parser still finds is ignored


class DoorProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the door's limits (see the module docstring).

    A timer is armed only when a read ends inside a request's headers or body, and runs
    until they are whole (one deadline for each, not one per read).

    A connection costs what it holds while it waits, times the fleet's phones: the door's own
    state is in slots, as uvicorn's protocol already has 28 attributes and CPython shares an
    instance dict's keys (~0.3 KiB) only up to 29 (1.6 KiB beyond); and the request queue
    (empty but for pipelined requests) and the write-pause event are made when first needed."""

    __slots__ = ("begun", "body_bytes", "limits", "linger_bytes", "phase", "poll", "polls", "timer")

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.pipeline = _Pipeline()  # type: ignore[assignment]
        assert isinstance(config, DoorConfig)  # serve() builds the server with one
        self.limits = config.limits
        self.phase = HEADERS
        self.timer: asyncio.TimerHandle | None = None
        self.body_bytes = 0
        self.begun = False  # a request's first byte came in the current HEADERS phase
        self.linger_bytes = 0  # after an answer from the door: how much more is dropped unread
        self.polls = config.polls
        self.poll: DoorPoll | None = None  # the long poll the door serves on this connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # (the base class narrows asyncio's BaseTransport)
        self.flow = LeanFlow(transport)
        self._arm(self.limits.header_s)  # a connection that sends nothing is closed as well

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.phase = SHUT
        if self.poll is not None:
            self.poll.cancel()
            self.poll = None
        super().connection_lost(exc)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        """A long poll is served by the door (door_poll.py); any other request by the app."""
        scope = cycle.scope
        if self.polls is not None and scope["method"] == "GET" and (m := POLL_PATH.fullmatch(scope["path"])):
            self.poll = DoorPoll(self.polls, cycle, m.group(1), self.tasks)
            self.poll.start()
        else:
            super()._start_asgi_task(cycle, app)

    def data_received(self, data: bytes) -> None:
        if self.phase == SHUT:  # lingering after an answer: dropped unread
            self.linger_bytes -= len(data)
            if self.linger_bytes < 0:
                self.flow.pause_reading()  # no more: the client's sending stalls till the linger ends
            return
        super().data_received(data)
        # The read ended inside a request: its headers or body are due from now on.
        if self.phase and self.phase != SHUT and self.timer is None and not self.transport.is_closing():
            self._arm(self.limits.header_s if self.phase == HEADERS else self.limits.body_s)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.phase != SHUT:
            self.phase, self.begun = HEADERS, True

    def on_headers_complete(self) -> None:
        if self.phase == SHUT:
            return
        self._disarm()
        for name, value in self.headers:
            if name == b"content-length" and int(value) > self.limits.max_body_bytes:
                self._shut(self._too_large())  # before the app sees the request, its body unread
                return
        self.phase, self.body_bytes = BODY, 0
        # Whether the client has gone, for a long poll parked on this request (docs/api.md,
        # "Long polls"): it then answers nobody, and takes no delivery out for nobody.
        self.scope[GONE] = self.transport.is_closing  # type: ignore[literal-required]
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self.phase == SHUT:
            return
        self.body_bytes += len(body)
        if self.body_bytes > self.limits.max_body_bytes:  # a chunked body: it has no Content-Length
            self._shut(self._too_large())
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self.phase == SHUT:
            return
        self._disarm()
        self.phase, self.begun = IDLE, False
        super().on_message_complete()
        cycle = self.cycle
        if cycle.response_complete and self.timeout_keep_alive_task is None and not self.pipeline:
            # Answered before its body was whole (a 404, a 401): uvicorn armed the idle timeout
            # at the answer and the body's arrival stopped it; it starts again now.
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                self.timeout_keep_alive_handler)

    def _too_large(self) -> ApiError:
        return ApiError(413, "payload_too_large",
                        f"the request body is over {self.limits.max_body_bytes} bytes, the limit")

    def _arm(self, delay_s: float) -> None:
        self.timer = self.loop.call_later(delay_s, self._expired)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expired(self) -> None:
        self.timer = None
        if self.transport.is_closing():
            return
        if self.phase == SHUT:  # the linger is over
            self.transport.close()
        elif self.phase == BODY and self.flow.read_paused:
            # Reading is paused because the app has not taken what came (or a pipelined
            # request waits for the one before): the client is not the one late.
            self._arm(self.limits.body_s)
        elif self.phase == BODY:
            self._shut(ApiError(408, "request_timeout",
                                f"the request body did not come whole within {self.limits.body_s:g} s"))
        elif self.phase == HEADERS:
            self._shut(ApiError(408, "request_timeout",
                                f"the request headers did not come whole within {self.limits.header_s:g} s")
                       if self.begun else None)

    def _shut(self, err: ApiError | None) -> None:
        """Answer `err` if no answer is under way on the connection, then close it; a request
        the app is serving sees its client gone (its receive says so, its answer goes nowhere).

        After an answer the connection lingers, half-closed: closed at once with bytes unread,
        it would be reset, and a reset can reach the client before it has read the answer.
        Until the client closes, for LINGER_S at most, what it still sends is dropped unread,
        up to max_body_bytes (then reading stops): a client that sends its whole body before
        it reads can then read the answer to a body a little over the cap."""
        cycle = self.cycle
        if self.phase == BODY:  # the cycle is this request's: running, unless queued (pipelined)
            free = cycle is not None and not cycle.response_started and not self.pipeline
        else:  # the previous request's, if any
            free = cycle is None or cycle.response_complete
        self._disarm()
        self.phase = SHUT
        if cycle is not None and not cycle.response_complete and not cycle.disconnected:
            cycle.disconnected = True
            cycle.message_event.set()
        if err is None or not free:
            self.transport.close()
            return
        self.transport.write(_render(err))
        if self.transport.can_write_eof():  # (TLS cannot: the answer says `connection: close`)
            self.transport.write_eof()
        self.linger_bytes = self.limits.max_body_bytes
        self.flow.resume_reading()
        self._arm(LINGER_S)


class _Pipeline(list[tuple[RequestResponseCycle, Any]]):
    """uvicorn's queue of pipelined requests as a list (an empty deque is 0.6 KiB)."""

    __slots__ = ()

    def appendleft(self, item: tuple[RequestResponseCycle, Any]) -> None:
        self.insert(0, item)


class LeanFlow(FlowControl):
    """uvicorn's flow control, its event for a paused write made only when a write pauses."""

    def __init__(self, transport: asyncio.Transport) -> None:  # (the base's, but the event)
        self._transport = transport
        self.read_paused = False
        self.write_paused = False
        self._writable: asyncio.Event | None = None

    async def drain(self) -> None:
        if self._writable is not None:
            await self._writable.wait()

    def pause_writing(self) -> None:
        if not self.write_paused:
            self.write_paused = True
            self._writable = asyncio.Event()

    def resume_writing(self) -> None:
        if self.write_paused:
            self.write_paused = False
            if self._writable is not None:
                self._writable.set()


def _render(err: ApiError) -> bytes:
    """`err` as a whole HTTP/1.1 response in docs/api.md's error shape, closing the connection."""
    response = error_response(err, {"connection": "close"})
    head = b"".join(name + b": " + value + b"\r\n" for name, value in response.raw_headers)
    return STATUS_LINE[response.status_code] + head + b"\r\n" + bytes(response.body)
