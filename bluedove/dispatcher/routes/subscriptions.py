"""Subscriptions: create one or a batch (catalogue first, then every matcher mPartition names), read, delete."""

from __future__ import annotations

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


@router.post("/v1/subscriptions", status_code=201)
async def subscribe(request: Request):
    token = await _managing(request)
    return await ops.subscribe(state(request), await json_body(request), token)


@router.post("/v1/subscriptions:batch", status_code=201)
async def subscribe_batch(request: Request):
    """Up to 1000 subscriptions, all or nothing (docs/api.md)."""
    token = await _managing(request)
    return {"subscriptions": await ops.subscribe_batch(state(request), await json_body(request), token)}


@router.get("/v1/subscriptions/{sub_id}")
async def get_subscription(request: Request, sub_id: str):
    return await ops.get_subscription(state(request), sub_id, bearer(request))


@router.delete("/v1/subscriptions/{sub_id}", status_code=204)
async def unsubscribe(request: Request, sub_id: str):
    await ops.unsubscribe(state(request), sub_id, await _managing(request))
    return Response(status_code=204)
