"""Spaces: list them, read one, and the routes of a space, `/v1/spaces/{space}/…` (docs/api.md,
"Spaces").

A cluster serves one space today, `default`, the one the routes without a space address: its
routes under `/v1/spaces/default/…` are those routes, by the same functions (the API key's
scopes, the rate limits and the bodies are theirs), after `served` has checked the name. The
publishes among them are served below FastAPI like the routes they alias
(bluedove/dispatcher/routes/hot.py), and checking the name costs no round trip to the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute

from bluedove.core.errors import ApiError
from bluedove.core.spaces import DEFAULT_SPACE, check_space_name
from bluedove.dispatcher.deps import state
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.routes import messages, subscriptions
from bluedove.store.spaces import SpaceRecord, SpaceStore

router = APIRouter()
SPACE_ROUTES = "/v1/spaces/{space}"
# The routes without a space that a space's routes alias, under SPACE_ROUTES + the part after /v1.
ALIASED = ("/v1/messages", "/v1/messages:batch", "/v1/subscriptions", "/v1/subscriptions:batch")


def served(space: str) -> None:
    """Nothing if this cluster serves `space`; else a 404 naming `space` (a 422 `invalid_space`
    for a name that cannot be one). No lookup: only `default` is served, and it is served by
    the segment table, so any other name is unknown. Once spaces can be created, a name other
    than `default` is looked up in the dispatcher's copy of the registry (kept fresh the way
    the API keys are, so still no round trip per request)."""
    if space == DEFAULT_SPACE:
        return
    check_space_name(space, "space")
    raise ApiError(404, "not_found", f"no space {space!r} (this cluster serves {DEFAULT_SPACE!r} alone)", "space")


async def publish(request: Request, space: str) -> Response:
    """POST /v1/spaces/{space}/messages (served by hot.py, declared below for the OpenAPI)."""
    served(space)
    return await messages.publish(request)


async def publish_batch(request: Request, space: str) -> Response:
    """POST /v1/spaces/{space}/messages:batch."""
    served(space)
    return await messages.publish_batch(request)


def _alias(endpoint: Callable[[Request], Awaitable[Any]]) -> Callable[[Request, str], Awaitable[Any]]:
    """The route function of a space's route: `endpoint` once `served` has passed."""
    async def in_space(request: Request, space: str) -> Any:
        served(space)
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


def _space_json(d: Dispatcher, name: str, rec: SpaceRecord | None, subs: int) -> dict[str, Any]:
    """A space as GET /v1/spaces/{space} answers it: GET /v1/space's schema (the dispatcher's,
    which is the segment table's), its name, the table's epoch, counts, and when the registry
    took it in (null before any matcher has registered it)."""
    table = d.cluster.table
    return {"name": name, **d.space.api_json(), "epoch": table.epoch if table else 0,
            "counts": {"subscriptions": subs, "matchers": len(table.members) if table else 0},
            "created": rec.created if rec else None, "state": rec.state if rec else "active"}


async def _default(d: Dispatcher) -> dict[str, Any]:
    spaces = SpaceStore(d.store.r)
    rec, subs = await asyncio.gather(spaces.get(DEFAULT_SPACE), spaces.subscriptions(DEFAULT_SPACE))
    return _space_json(d, DEFAULT_SPACE, rec, subs)


@router.get("/v1/spaces", response_model=None)
async def list_spaces(request: Request) -> dict[str, Any]:
    """Every space this cluster serves: `default` alone for now (a space the registry holds
    but the cluster does not serve is not listed, as GET /v1/spaces/{space} would not find it)."""
    return {"spaces": [await _default(state(request))]}


@router.get(SPACE_ROUTES, response_model=None)
async def get_space(request: Request, space: str) -> dict[str, Any]:
    served(space)
    return await _default(state(request))
