"""Long polls served by the HTTP door itself, below uvicorn's request cycle.

Served through the app, a parked long poll would hold for its whole wait an asyncio task and
the coroutine frames of every layer it came through (uvicorn's cycle, the middleware, the
route, the operation, the store): about 8 KiB a poll, and a phone fleet parks tens of
thousands. So the door (door.py) hands `GET /v1/queues/{queue}/messages` to this module
instead: the request's checks, each look at the queue and the answer run as short tasks, and
between looks the poll is one PollWait object and a timer (bluedove/store/waiting.py).

The poll is the app's own: the same operation checks its arguments and token
(bluedove/dispatcher/operations/queues.py), an error has the app's body
(bluedove/dispatcher/app.py), and the answer is written through uvicorn's request cycle of
the request, so keep-alive, pipelining and shutdown treat it as any other request.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Coroutine
from typing import Any, cast

from starlette.datastructures import Headers, QueryParams
from starlette.responses import Response
from starlette.types import Send
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from bluedove.dispatcher import operations as ops
from bluedove.dispatcher.app import answer_for
from bluedove.dispatcher.auth import parse_bearer
from bluedove.dispatcher.deps import number
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.store.waiting import PollWait, Taken

POLL_PATH = re.compile(r"/v1/queues/([^/]+)/messages")


class DoorPoll:
    """One long poll the door serves: checked, then waiting (`PollWait`), then answered."""

    __slots__ = ("cycle", "d", "queue", "tasks", "waiting")

    def __init__(self, d: Dispatcher, cycle: RequestResponseCycle, queue: str, tasks: set[asyncio.Task[None]]) -> None:
        self.d, self.cycle, self.queue, self.tasks = d, cycle, queue, tasks
        self.waiting: PollWait | None = None
        # The cycle's event says a body came, or the client went, to an app reading the body:
        # nothing here reads it (the client's going is `gone`), and a parked poll need not
        # hold one (0.7 KiB).
        cycle.message_event = _UNREAD  # type: ignore[assignment]

    def start(self) -> None:
        scope = cast("dict[str, Any]", self.cycle.scope)
        query = QueryParams(scope["query_string"])
        token = parse_bearer(Headers(scope=scope).get("authorization"))
        self._spawn(self._begin(token, number(query, "max", ops.DEFAULT_POLL_MAX), number(query, "wait", 0)))

    def cancel(self) -> None:
        """The client has gone: a parked poll ends at once, and answers nobody."""
        if self.waiting is not None:
            self.waiting.cancel()
            self.waiting = None

    async def _begin(self, token: str | None, max_n: float, wait: float) -> None:
        d = self.d
        try:
            n, wait, given = await ops.poll_args(d, self.queue, token, max_n, wait)
            self.waiting = d.store.start_poll(self.queue, n, wait, self._taken, stop=d.closing, token=given,
                                              gone=self.cycle.transport.is_closing)
        except Exception as exc:  # noqa: BLE001 - every error is an answer (as_api_error, else a 500)
            await self._send(self._error(ops.poll_error(exc)))
            return
        self.waiting.start()

    def _taken(self, result: Taken | BaseException) -> None:
        self.waiting = None
        if isinstance(result, asyncio.CancelledError):  # the store is closing under the poll
            self.cycle.transport.close()
        else:
            self._spawn(self._answer(result))

    async def _answer(self, result: Taken | BaseException) -> None:
        d = self.d
        try:
            if isinstance(result, BaseException):
                raise result
            got, body = await d.store.rendered(self.queue, result)
        except Exception as exc:  # noqa: BLE001 - every error is an answer (as_api_error, else a 500)
            response = self._error(ops.poll_error(exc))
        else:
            d.metrics.polled.inc(got)
            response = Response(body, media_type="application/json")
        finally:
            d.metrics.count_undeliverable(d.store.undeliverable)
        await self._send(response)

    def _error(self, exc: BaseException) -> Response:
        return answer_for(exc, "GET", self.cycle.scope["path"])

    async def _send(self, response: Response) -> None:
        if not self.cycle.disconnected:
            await response(cast("dict[str, Any]", self.cycle.scope), _no_body, cast("Send", self.cycle.send))

    def _spawn(self, step: Coroutine[Any, Any, None]) -> None:
        """Run `step` as a task the HTTP server waits for when it shuts down."""
        task = asyncio.get_running_loop().create_task(step)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


class _Unread:
    """An event nobody waits for."""

    __slots__ = ()

    def set(self) -> None:
        pass


_UNREAD = _Unread()


async def _no_body() -> dict[str, Any]:
    raise AssertionError("a poll reads no request body")  # (Response never calls receive)
