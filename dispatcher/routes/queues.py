"""Queues: create, delete, long-poll deliveries, ack; poll and ack also served by `HotRoutes`."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request, Response

from bluedove.apikeys import SUBSCRIBE
from dispatcher import operations as ops
from dispatcher.auth import caller, queue_token
from dispatcher.deps import bearer, json_body, state

router = APIRouter()


@router.post("/v1/queues", status_code=201)
async def create_queue(request: Request):
    d, auth = state(request), request.headers.get("authorization")
    await caller(d, auth, SUBSCRIBE)
    # a dead-letter queue named in the body needs that queue's token
    return await ops.create_queue(d, await json_body(request), queue_token(d, auth, request.headers.get("x-queue-token")))


@router.get("/v1/queues/{queue}")
async def queue_info(request: Request, queue: str):
    return await ops.queue_info(state(request), queue, bearer(request))


@router.delete("/v1/queues/{queue}", status_code=204)
async def delete_queue(request: Request, queue: str):
    d, auth = state(request), request.headers.get("authorization")
    await caller(d, auth, SUBSCRIBE)
    await ops.delete_queue(d, queue, queue_token(d, auth, request.headers.get("x-queue-token")))
    return Response(status_code=204)


def _num_param(request: Request, name: str, default: float) -> float:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        return float("nan")  # ops.check_range names the parameter


@router.get("/v1/queues/{queue}/messages")
async def poll(request: Request, queue: str):
    body = await ops.poll_json(state(request), queue, bearer(request),
                               _num_param(request, "max", ops.DEFAULT_POLL_MAX), _num_param(request, "wait", 0))
    # The body comes spliced from the stored JSON: no decode and re-encode per delivery (docs/benchmarks.md).
    return Response(body, media_type="application/json")


@router.post("/v1/queues/{queue}/ack", status_code=204)
async def ack(request: Request, queue: str):
    body = await json_body(request)
    receipts = body.get("receipts") if isinstance(body, dict) else None
    unknown = sorted(set(body) - {"receipts"}) if isinstance(body, dict) else []
    await ops.ack(state(request), queue, bearer(request), receipts, unknown[0] if unknown else None)
    return Response(status_code=204)


# -- the hot paths, without FastAPI's routing stack ------------------------------------------------
_HOT_PATH = re.compile(r"/v1/queues/([^/]+)/(messages|ack)")
_HOT = {("GET", "messages"): poll, ("POST", "ack"): ack}


class HotRoutes:
    """ASGI middleware that serves poll and ack by calling the route functions above directly.

    A fleet of phones polling every few seconds makes these the service's busiest requests,
    and most of them carry few deliveries: FastAPI's middleware, routing and endpoint layers
    cost ~100 µs of CPU per request, three times what uvicorn itself does (docs/benchmarks.md,
    "Delivery"). The routes stay declared above (OpenAPI, and any method this does not take);
    an exception becomes the response the app's own handler for it gives, and one without a
    handler goes on to the app's last-resort 500."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and (m := _HOT_PATH.fullmatch(scope["path"])):
            endpoint = _HOT.get((scope["method"], m.group(2)))
            if endpoint is not None:
                request = Request(scope, receive)
                try:
                    response = await endpoint(request, m.group(1))
                except Exception as exc:
                    handler = _handler_for(request.app, exc)
                    if handler is None:
                        raise
                    response = await handler(request, exc)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _handler_for(app, exc: Exception):
    """The app's exception handler for `exc` (the nearest class), as FastAPI's would pick it;
    None for the catch-all (Exception), which answers outside any middleware."""
    for cls in type(exc).__mro__:
        if cls is Exception:
            return None
        if cls in app.exception_handlers:
            return app.exception_handlers[cls]
    return None
