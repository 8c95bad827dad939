"""The busiest requests served below FastAPI's routing stack: publish, batch publish, subscribe,
batch subscribe (each with or without a space), unsubscribe, poll, ack."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from bluedove.dispatcher.routes import messages, queues, spaces, subscriptions

_QUEUE_PATH = re.compile(r"/v1/queues/([^/]+)/(messages|ack)")
_QUEUE = {("GET", "messages"): queues.poll, ("POST", "ack"): queues.ack}
# A space's publishes and subscribes (bluedove/dispatcher/routes/spaces.py): the same, once the name is checked.
_SPACE_PATH = re.compile(r"/v1/spaces/([^/]+)/(messages|messages:batch|subscriptions|subscriptions:batch)")
_SPACE = {("POST", path.removeprefix("/v1/")): route for path, route in spaces.IN_SPACE.items()}
_EXACT = {("POST", "/v1/messages"): messages.publish, ("POST", "/v1/messages:batch"): messages.publish_batch,
          ("POST", "/v1/subscriptions"): subscriptions.subscribe,
          ("POST", "/v1/subscriptions:batch"): subscriptions.subscribe_batch}
_SUBSCRIPTION_PATH = re.compile(r"/v1/subscriptions/([^/]+)")
_SUBSCRIPTION = {"DELETE": subscriptions.unsubscribe}

log = logging.getLogger("bluedove.dispatcher")

# An app's exception handler, as FastAPI keeps them.
Handler = Callable[[Request, Any], Response | Awaitable[Response]]


class HotRoutes:
    """ASGI middleware that serves poll, ack, both publishes, both subscribes and unsubscribe by
    calling their route functions directly.

    A fleet of phones polling every few seconds makes poll and ack the service's busiest
    requests, and most of them carry few deliveries (a dispatcher's HTTP door serves its polls
    itself, below the app: bluedove/dispatcher/door_poll.py; this serves them for an app run
    without it); publishers send single messages or batches as fast as the dispatcher takes
    them; phones that come and go, and drivers who change routes, subscribe and unsubscribe
    all the time. FastAPI's middleware, routing and endpoint layers cost ~100 µs of CPU per
    request, three times what uvicorn itself does (docs/benchmarks.md, "Delivery" and
    "Publish"). The routes stay declared with FastAPI (OpenAPI, and any method or path this
    does not take); an exception becomes the response the app's own handler for it gives, and
    one without a handler goes on to the app's last-resort 500. Being the app's outermost
    middleware, it also takes a client's leaving mid-request, on any route, as the normal
    event it is."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if scope["type"] == "http":
                path, method = scope["path"], scope["method"]
                endpoint: Callable[..., Awaitable[Response]] | None = _EXACT.get((method, path))
                args: tuple[str, ...] = ()
                if endpoint is None and (m := _QUEUE_PATH.fullmatch(path)):
                    endpoint, args = _QUEUE.get((method, m.group(2))), (m.group(1),)
                elif endpoint is None and (m := _SPACE_PATH.fullmatch(path)):
                    endpoint, args = _SPACE.get((method, m.group(2))), (m.group(1),)
                elif endpoint is None and (m := _SUBSCRIPTION_PATH.fullmatch(path)):
                    endpoint, args = _SUBSCRIPTION.get(method), (m.group(1),)
                if endpoint is not None:
                    request = Request(scope, receive)
                    try:
                        response = await endpoint(request, *args)
                    except Exception as exc:
                        handler = _handler_for(request.app, exc)
                        if handler is None:
                            raise
                        out = handler(request, exc)
                        response = out if isinstance(out, Response) else await out
                    await response(scope, receive, send)
                    return
            await self.app(scope, receive, send)
        except ClientDisconnect:
            # The client hung up before its body was whole, or the door cut it off (a body
            # over the cap or too slow: bluedove/dispatcher/door.py). A normal event, and no
            # one to answer: not an error for the log.
            log.debug("client gone before its request was whole: %s %s", scope.get("method"), scope.get("path"))


def _handler_for(app: FastAPI, exc: Exception) -> Handler | None:
    """The app's exception handler for `exc` (the nearest class), as FastAPI's would pick it;
    None for the catch-all (Exception), which answers outside any middleware."""
    for cls in type(exc).__mro__:
        if cls is Exception:
            return None
        if cls in app.exception_handlers:
            return app.exception_handlers[cls]
    return None
