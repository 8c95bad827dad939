"""Queues: create, delete, long-poll deliveries, ack."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from bluedove.errors import ApiError
from bluedove.store.store import valid_receipt
from dispatcher.deps import json_body, require_queue_token, state

router = APIRouter()


@router.post("/v1/queues", status_code=201)
async def create_queue(request: Request):
    queue, token = await state(request).store.create_queue()
    return {"queue": queue, "token": token}


@router.delete("/v1/queues/{queue}", status_code=204)
async def delete_queue(request: Request, queue: str):
    await require_queue_token(request, queue)
    d = state(request)
    removed = await d.store.delete_queue(queue)
    await d.broadcast_removals(removed)
    return Response(status_code=204)


def _int_param(request: Request, name: str, default: float, lo: float, hi: float) -> float:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        v = float(raw)
    except ValueError:
        v = float("nan")
    if not lo <= v <= hi:
        raise ApiError(422, "invalid_parameter", f"{name} must be a number from {lo:g} to {hi:g}", name)
    return v


@router.get("/v1/queues/{queue}/messages")
async def poll(request: Request, queue: str):
    await require_queue_token(request, queue)
    d = state(request)
    max_n = int(_int_param(request, "max", 10, 1, 1000))
    wait = _int_param(request, "wait", 0, 0, d.s.max_wait_s)
    msgs = await d.store.poll(queue, max_n, wait, stop=d.closing)
    d.metrics.polled.inc(len(msgs))
    return {"messages": msgs}


@router.post("/v1/queues/{queue}/ack", status_code=204)
async def ack(request: Request, queue: str):
    await require_queue_token(request, queue)
    body = await json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get("receipts"), list):
        raise ApiError(422, "invalid_ack", "the body must be {\"receipts\": [...]}", "receipts")
    for i, r in enumerate(body["receipts"]):
        if not valid_receipt(r):
            raise ApiError(422, "invalid_ack", f"not a receipt: {r!r}", f"receipts[{i}]")
    d = state(request)
    d.metrics.acked.inc(await d.store.ack(queue, body["receipts"]))
    return Response(status_code=204)
