"""Subscriptions: create one or a batch (catalogue first, then every matcher mPartition names), read, delete."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from dispatcher import operations as ops
from dispatcher.deps import bearer, json_body, state

router = APIRouter()


@router.post("/v1/subscriptions", status_code=201)
async def subscribe(request: Request):
    return await ops.subscribe(state(request), await json_body(request), bearer(request))


@router.post("/v1/subscriptions:batch", status_code=201)
async def subscribe_batch(request: Request):
    """Up to 1000 subscriptions, all or nothing (docs/api.md)."""
    return {"subscriptions": await ops.subscribe_batch(state(request), await json_body(request), bearer(request))}


@router.get("/v1/subscriptions/{sub_id}")
async def get_subscription(request: Request, sub_id: str):
    return await ops.get_subscription(state(request), sub_id, bearer(request))


@router.delete("/v1/subscriptions/{sub_id}", status_code=204)
async def unsubscribe(request: Request, sub_id: str):
    await ops.unsubscribe(state(request), sub_id, bearer(request))
    return Response(status_code=204)
