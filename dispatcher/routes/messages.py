"""Publishing: single and batch. 202 only once every delivery is stored."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from bluedove.apikeys import PUBLISH
from dispatcher import operations as ops
from dispatcher.auth import caller
from dispatcher.deps import state

router = APIRouter()


@router.post("/v1/messages", status_code=202)
async def publish(request: Request):
    d = state(request)
    key = await caller(d, request.headers.get("authorization"), PUBLISH)
    mid = await ops.publish(d, await request.body(), key)
    return JSONResponse({"id": mid}, status_code=202)


@router.post("/v1/messages:batch", status_code=202)
async def publish_batch(request: Request):
    d = state(request)
    key = await caller(d, request.headers.get("authorization"), PUBLISH)
    ids = await ops.publish_batch(d, await request.body(), key)
    return JSONResponse({"ids": ids}, status_code=202)
