"""Publishing: single and batch. 202 only once every delivery is stored."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from dispatcher import operations as ops
from dispatcher.deps import state

router = APIRouter()


@router.post("/v1/messages", status_code=202)
async def publish(request: Request):
    mid = await ops.publish(state(request), await request.body())
    return JSONResponse({"id": mid}, status_code=202)


@router.post("/v1/messages:batch", status_code=202)
async def publish_batch(request: Request):
    ids = await ops.publish_batch(state(request), await request.body())
    return JSONResponse({"ids": ids}, status_code=202)
