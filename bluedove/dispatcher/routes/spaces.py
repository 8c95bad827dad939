"""Spaces: create, list, read and delete them, and the routes of a space,
`/v1/spaces/{space}/…` (docs/api.md, "Spaces").

The registry (bluedove/store/spaces.py) holds every space; each dispatcher keeps a copy
(bluedove/dispatcher/space_registry.py). The cluster serves `default` today, the space of its
segment table: its routes under `/v1/spaces/default/…` are the routes without a space, by the
same functions (the API key's scopes, the rate limits and the bodies are theirs), after `served`
has checked the name, which for `default` costs nothing; the publishes among them are served
below FastAPI like the routes they alias (bluedove/dispatcher/routes/hot.py). Another space can
be created, listed, read and deleted; publishing and subscribing in it answer 501 until its own
table and matchers exist (docs/design.md, "Spaces (in progress)").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute

from bluedove.core.apikeys import ADMIN
from bluedove.core.errors import ApiError
from bluedove.core.spaces import DEFAULT_SPACE, check_space_name, default_spec, parse_space_spec, space_conflict
from bluedove.dispatcher.auth import caller
from bluedove.dispatcher.deps import SPACE_KEY, json_body, state
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.routes import messages, subscriptions
from bluedove.store.spaces import ACTIVE, SpaceConflict, SpaceRecord, SpaceStore

router = APIRouter()
SPACE_ROUTES = "/v1/spaces/{space}"
# The routes without a space that a space's routes alias, under SPACE_ROUTES + the part after /v1.
ALIASED = ("/v1/messages", "/v1/messages:batch", "/v1/subscriptions", "/v1/subscriptions:batch")


def no_space(space: str) -> ApiError:
    return ApiError(404, "not_found", f"no space {space!r}", "space")


async def active(d: Dispatcher, space: str) -> SpaceRecord:
    """The record of `space` if it is active; a 422 `invalid_space` for a name that cannot be
    one, a 404 for no such space or one being deleted (from the dispatcher's copy of the
    registry; the store's for a name the copy lacks)."""
    check_space_name(space, "space")
    rec = await d.registry.lookup(space)
    if rec is None or rec.state != ACTIVE:
        raise no_space(space)
    return rec


async def served(request: Request, space: str) -> None:
    """Nothing if this cluster serves `space`: `default`, with no lookup (the request then names
    it, for the API key's check). Else the error of `active`, or a 501 `not_implemented` for a
    registered space, which has no table yet."""
    if space == DEFAULT_SPACE:
        request.scope[SPACE_KEY] = space
        return
    d = state(request)
    await active(d, space)
    raise ApiError(501, "not_implemented", f"space {space!r} exists, but this version publishes and subscribes "
                   f"in the space {DEFAULT_SPACE!r} alone", "space")


async def publish(request: Request, space: str) -> Response:
    """POST /v1/spaces/{space}/messages (served by hot.py, declared below for the OpenAPI)."""
    await served(request, space)
    return await messages.publish(request)


async def publish_batch(request: Request, space: str) -> Response:
    """POST /v1/spaces/{space}/messages:batch."""
    await served(request, space)
    return await messages.publish_batch(request)


def _alias(endpoint: Callable[[Request], Awaitable[Any]]) -> Callable[[Request, str], Awaitable[Any]]:
    """The route function of a space's route: `endpoint` once `served` has passed."""
    async def in_space(request: Request, space: str) -> Any:
        await served(request, space)
        return await endpoint(request)
    return in_space


def _add_aliases() -> None:
    """Declare each ALIASED route under SPACE_ROUTES with the route's own status, body schema and
    documentation: one definition, two paths."""
    wrappers: dict[str, Callable[[Request, str], Awaitable[Any]]] = {
        "/v1/messages": publish, "/v1/messages:batch": publish_batch}
    routes = [r for src in (messages.router, subscriptions.router) for r in src.routes
              if isinstance(r, APIRoute) and r.path in ALIASED and "POST" in (r.methods or ())]
    for r in routes:
        router.add_api_route(SPACE_ROUTES + r.path.removeprefix("/v1"), wrappers.get(r.path) or _alias(r.endpoint),
                             methods=["POST"], status_code=r.status_code, response_model=None,
                             openapi_extra=r.openapi_extra, description=r.description,
                             name=f"{r.name}_in_space")


_add_aliases()


def _space_json(d: Dispatcher, rec: SpaceRecord, subs: int) -> dict[str, Any]:
    """A space as GET /v1/spaces/{space} answers it: its definition (the schema as GET /v1/space
    gives it), its table's epoch, its counts, when it was made and its state. The default space's
    schema, epoch and matchers are the dispatcher's (its segment table's); another space has no
    table yet (epoch 0, no matchers)."""
    spec = rec.spec
    default = spec.name == DEFAULT_SPACE
    table = d.cluster.table if default else None
    schema = (d.space if default else spec.space).api_json()
    return {"name": spec.name, **schema, "matchers": spec.matchers, "retention_s": spec.retention_s,
            "quotas": spec.quotas.to_json(), "epoch": table.epoch if table else 0,
            "counts": {"subscriptions": subs, "matchers": len(table.members) if table else 0},
            "created": rec.created, "state": rec.state}


async def _described(d: Dispatcher, rec: SpaceRecord) -> dict[str, Any]:
    return _space_json(d, rec, await d.registry.spaces.subscriptions(rec.spec.name))


async def _default(d: Dispatcher) -> dict[str, Any]:
    """The default space, also before a matcher of this version has registered it (created: null)."""
    spaces = SpaceStore(d.store.r)
    rec, subs = await asyncio.gather(spaces.get(DEFAULT_SPACE), spaces.subscriptions(DEFAULT_SPACE))
    if rec is None:
        return {**_space_json(d, SpaceRecord(default_spec(d.space), 0, ACTIVE), subs), "created": None}
    return _space_json(d, rec, subs)


@router.post("/v1/spaces", status_code=201, response_model=None)
async def create_space(request: Request, response: Response) -> dict[str, Any]:
    """201 and the space when made now; 200 and it when it exists with this very definition;
    409 `conflict` naming the first field that differs (or `state` while it is being deleted)."""
    d = state(request)
    await caller(d.auth, request.headers.get("authorization"), ADMIN)
    spec = parse_space_spec(await json_body(request))
    await caller(d.auth, request.headers.get("authorization"), ADMIN, spec.name)
    try:
        rec, made = await d.registry.spaces.create(spec)
    except SpaceConflict as exc:
        raise space_conflict(spec.name, exc.field) from None
    d.registry.remember(spec.name, rec)
    if not made:
        response.status_code = 200
    return await _described(d, rec)


@router.get("/v1/spaces", response_model=None)
async def list_spaces(request: Request) -> dict[str, Any]:
    """Every space, by name, `default` first (each as GET /v1/spaces/{space} gives it), those
    being deleted included (state `deleting`)."""
    d = state(request)
    others = [rec for rec in await d.registry.spaces.list() if rec.spec.name != DEFAULT_SPACE]
    return {"spaces": [await _default(d), *await asyncio.gather(*(_described(d, rec) for rec in others))]}


@router.get(SPACE_ROUTES, response_model=None)
async def get_space(request: Request, space: str) -> dict[str, Any]:
    d = state(request)
    if space == DEFAULT_SPACE:
        return await _default(d)
    check_space_name(space, "space")
    rec = await d.registry.spaces.get(space)
    if rec is None:
        raise no_space(space)
    return await _described(d, rec)


@router.delete(SPACE_ROUTES, status_code=204)
async def delete_space(request: Request, space: str) -> Response:
    """204: the space is marked deleting (publishing to it is a 404 from now on) and purged in
    the background; its subscriptions go, queues stay. 404 for no such space (or one already
    being deleted), 409 for `default`, the cluster's own."""
    d = state(request)
    check_space_name(space, "space")
    await caller(d.auth, request.headers.get("authorization"), ADMIN, space)
    if space == DEFAULT_SPACE:
        raise ApiError(409, "conflict", f"the space {DEFAULT_SPACE!r} is the cluster's own: it cannot be deleted",
                       "space")
    if await d.registry.spaces.delete(space) != 1:
        raise no_space(space)
    d.registry.remember(space, None)
    d.registry.purge_soon(space)
    return Response(status_code=204)
