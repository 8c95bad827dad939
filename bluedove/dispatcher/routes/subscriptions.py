"""Subscriptions: create one or a batch (catalogue first, then every matcher mPartition names), read, delete."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from bluedove.core.apikeys import SUBSCRIBE
from bluedove.dispatcher import operations as ops
from bluedove.dispatcher.auth import caller, queue_token
from bluedove.dispatcher.deps import bearer, json_body, state

router = APIRouter()


async def _managing(request: Request) -> str | None:
    """A managing request's queue token, once its API key (when keys are on) is checked."""
    d, auth = state(request), request.headers.get("authorization")
    await caller(d.auth, auth, SUBSCRIBE)
    return queue_token(d.auth, auth, request.headers.get("x-queue-token"))


@router.post("/v1/subscriptions", status_code=201, response_model=None)
async def subscribe(request: Request) -> dict[str, str]:
    token = await _managing(request)
    return await ops.subscribe(state(request), await json_body(request), token)


@router.post("/v1/subscriptions:batch", status_code=201, response_model=None)
async def subscribe_batch(request: Request) -> dict[str, list[dict[str, str]]]:
    """Up to 1000 subscriptions, all or nothing (docs/api.md)."""
    token = await _managing(request)
    return {"subscriptions": await ops.subscribe_batch(state(request), await json_body(request), token)}


@router.get("/v1/subscriptions/{sub_id}", response_model=None)
async def get_subscription(request: Request, sub_id: str) -> dict[str, Any]:
    return await ops.get_subscription(state(request), sub_id, bearer(request))


@router.delete("/v1/subscriptions/{sub_id}", status_code=204)
async def unsubscribe(request: Request, sub_id: str) -> Response:
    await ops.unsubscribe(state(request), sub_id, await _managing(request))
    return Response(status_code=204)
