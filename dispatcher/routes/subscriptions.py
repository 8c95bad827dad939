"""Subscriptions: create (catalogue first, then every matcher mPartition names), read, delete."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from bluedove.errors import ApiError, not_found, unauthorized
from bluedove.model import build_subscription, parse_subscription_request
from bluedove.store.store import LimitExceeded, QueueMissing, new_id
from dispatcher.deps import bearer, json_body, state

router = APIRouter()


@router.post("/v1/subscriptions", status_code=201)
async def subscribe(request: Request):
    d = state(request)
    queue, predicates = parse_subscription_request(await json_body(request))
    space = d.space
    # Validate fully before touching anything: a bad request leaves no trace.
    sub = build_subscription(new_id(), queue or "-", predicates, space)
    token = None
    if queue is not None:
        if not await d.store.check_token(queue, bearer(request)):
            raise unauthorized()
    else:
        queue, token = await d.store.create_queue()
    sub = build_subscription(sub.id, queue, predicates, space)
    try:
        log_id = await d.store.add_subscription(sub.to_json())
    except QueueMissing:  # deleted between the token check and now
        raise unauthorized() from None
    except LimitExceeded as exc:
        raise ApiError(429, "limit_exceeded", f"a queue holds at most {exc.args[0]} subscriptions", "queue") from None
    await d.send_subscription(sub, log_id)
    d.metrics.subscriptions.inc()
    out = {"id": sub.id, "queue": queue}
    if token:
        out["token"] = token
    return out


async def _owned(request: Request, sub_id: str) -> dict:
    """The subscription, if the bearer token opens its queue: 401 without a valid token, 404
    when the token is valid but names no such subscription of its queue."""
    d = state(request)
    queue = await d.store.queue_for_token(bearer(request))
    if queue is None:
        raise unauthorized()
    sub = await d.store.get_subscription(sub_id)
    if sub is None or sub["queue"] != queue:
        raise not_found("subscription")
    return sub


@router.get("/v1/subscriptions/{sub_id}")
async def get_subscription(request: Request, sub_id: str):
    return await _owned(request, sub_id)


@router.delete("/v1/subscriptions/{sub_id}", status_code=204)
async def unsubscribe(request: Request, sub_id: str):
    sub = await _owned(request, sub_id)
    d = state(request)
    if await d.store.remove_subscription(sub_id, sub["queue"]) is None:
        raise not_found("subscription")
    await d.broadcast_removals([sub_id])
    return Response(status_code=204)
