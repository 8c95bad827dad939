"""Queues: create, delete, long-poll deliveries, ack, seek; poll and ack also served by
`bluedove.dispatcher.routes.hot`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from bluedove.core.apikeys import SUBSCRIBE
from bluedove.dispatcher import operations as ops
from bluedove.dispatcher.auth import caller, queue_token
from bluedove.dispatcher.deps import bearer, json_body, number, state
from bluedove.dispatcher.operations.queues import seek as seek_queue

router = APIRouter()


@router.post("/v1/queues", status_code=201, response_model=None)
async def create_queue(request: Request) -> dict[str, str]:
    d, auth = state(request), request.headers.get("authorization")
    await caller(d.auth, auth, SUBSCRIBE)
    # a dead-letter queue named in the body needs that queue's token
    return await ops.create_queue(d, await json_body(request),
                                  queue_token(d.auth, auth, request.headers.get("x-queue-token")))


@router.get("/v1/queues/{queue}", response_model=None)
async def queue_info(request: Request, queue: str) -> dict[str, Any]:
    return await ops.queue_info(state(request), queue, bearer(request))


@router.delete("/v1/queues/{queue}", status_code=204)
async def delete_queue(request: Request, queue: str) -> Response:
    d, auth = state(request), request.headers.get("authorization")
    await caller(d.auth, auth, SUBSCRIBE)
    await ops.delete_queue(d, queue, queue_token(d.auth, auth, request.headers.get("x-queue-token")))
    return Response(status_code=204)


@router.get("/v1/queues/{queue}/messages")
async def poll(request: Request, queue: str) -> Response:
    body = await ops.poll_json(state(request), queue, bearer(request),
                               number(request.query_params, "max", ops.DEFAULT_POLL_MAX),
                               number(request.query_params, "wait", 0),
                               gone=request.scope.get("bluedove.gone"))
    # The body comes spliced from the stored JSON: no decode and re-encode per delivery (docs/benchmarks.md).
    return Response(body, media_type="application/json")


@router.post("/v1/queues/{queue}/ack", status_code=204)
async def ack(request: Request, queue: str) -> Response:
    body = await json_body(request)
    receipts = body.get("receipts") if isinstance(body, dict) else None
    unknown = sorted(set(body) - {"receipts"}) if isinstance(body, dict) else []
    await ops.ack(state(request), queue, bearer(request), receipts, unknown[0] if unknown else None)
    return Response(status_code=204)


@router.post("/v1/queues/{queue}/seek", response_model=None)
async def seek(request: Request, queue: str) -> dict[str, int]:
    return await seek_queue(state(request), queue, bearer(request), await json_body(request))
