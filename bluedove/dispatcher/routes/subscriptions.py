"""Subscriptions: create one or a batch (catalogue first, then every matcher mPartition names), read, change
the predicates of one in place, delete."""

from __future__ import annotations

from typing import Any

import msgspec
from fastapi import APIRouter, Request, Response

from bluedove.core.apikeys import SUBSCRIBE
from bluedove.dispatcher import operations as ops
from bluedove.dispatcher.auth import caller, queue_token
from bluedove.dispatcher.deps import bearer, json_body, space_of, state
from bluedove.dispatcher.routes.messages import JSON

router = APIRouter()
_ENCODE = msgspec.json.Encoder().encode  # (the answers hold strings and numbers the API checked finite)

# `predicates` in the OpenAPI: the filter language's JSON Schema for the dispatcher's space
# (bluedove/core/filter_schema.py), filled in by the app as components/schemas/Predicates.
PREDICATES = {"$ref": "#/components/schemas/Predicates"}
_SUBSCRIPTION = {"type": "object", "required": ["id", "queue", "predicates"],
                 "properties": {"id": {"type": "string"}, "queue": {"type": "string"}, "predicates": PREDICATES}}
_ITEM = {"type": "object", "required": ["predicates"], "additionalProperties": False,
         "properties": {"queue": {"type": "string", "description": "a queue of yours; none: a new one"},
                        "predicates": PREDICATES}}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON request body the route reads itself: described for the OpenAPI, not parsed by it."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


_UPDATE_BODY = _body({"type": "object", "required": ["predicates"], "additionalProperties": False,
                      "properties": {"predicates": PREDICATES}})
_BATCH_BODY = _body({"type": "object", "required": ["subscriptions"], "additionalProperties": False,
                     "properties": {"subscriptions": {"type": "array", "minItems": 1, "maxItems": 1000,
                                                      "items": _ITEM}}})
_ERROR = {"description": 'docs/api.md\'s error body {"error": {"code", "message", "field"}}'}


async def _managing(request: Request) -> str | None:
    """A managing request's queue token, once its API key (when keys are on) is checked: its
    scope, and the space of the request (a subscription is in one)."""
    d, auth = state(request), request.headers.get("authorization")
    await caller(d.auth, auth, SUBSCRIBE, space_of(request))
    return queue_token(d.auth, auth, request.headers.get("x-queue-token"))


_SINGLE = {**_ITEM, "properties": {**_ITEM["properties"], "replay_from": {  # type: ignore[dict-item]
    "type": ["string", "integer"], "description": "RFC 3339 or ms since the epoch: also deliver the space's "
                                                  "logged messages since then that match (docs/api.md, \"Replay\")"}}}


@router.post("/v1/subscriptions", status_code=201, response_model=None, openapi_extra=_body(_SINGLE))
async def subscribe(request: Request) -> Response:
    """Served by hot.py, as are the batch and the removal (declared here for the OpenAPI)."""
    token = await _managing(request)
    d = state(request)
    made = await ops.subscribe(d, await json_body(request), token, await d.paths.get(space_of(request)))
    return Response(_ENCODE(made), status_code=201, media_type=JSON)


@router.post("/v1/subscriptions:batch", status_code=201, response_model=None, openapi_extra=_BATCH_BODY)
async def subscribe_batch(request: Request) -> Response:
    """Up to 1000 subscriptions, all or nothing (docs/api.md). The answer, strings only, is
    encoded here in one call: FastAPI's encoder walked its 1,000 objects at ~5 % of a batch's
    dispatcher CPU."""
    token = await _managing(request)
    d = state(request)
    made = await ops.subscribe_batch(d, await json_body(request), token, await d.paths.get(space_of(request)))
    return Response(_ENCODE({"subscriptions": made}), status_code=201, media_type=JSON)


@router.get("/v1/subscriptions/{sub_id}", response_model=None)
async def get_subscription(request: Request, sub_id: str) -> dict[str, Any]:
    return await ops.get_subscription(state(request), sub_id, bearer(request))


@router.put("/v1/subscriptions/{sub_id}", response_model=None, openapi_extra=_UPDATE_BODY, responses={
    200: {"description": "the subscription with its new predicates",
          "content": {"application/json": {"schema": _SUBSCRIPTION}}},
    401: _ERROR, 404: _ERROR, 422: _ERROR})
async def update_subscription(request: Request, sub_id: str) -> dict[str, Any]:
    """Replace a subscription's predicates (docs/api.md, "Subscriptions"): once answered, every
    message published afterwards is matched against the new ones only."""
    token = await _managing(request)
    return await ops.update_subscription(state(request), sub_id, await json_body(request), token)


@router.delete("/v1/subscriptions/{sub_id}", status_code=204)
async def unsubscribe(request: Request, sub_id: str) -> Response:
    await ops.unsubscribe(state(request), sub_id, await _managing(request))
    return Response(status_code=204)
