"""Spaces: create, list, read and delete them (the operations are
bluedove/dispatcher/operations/spaces.py's), and the routes of a space, `/v1/spaces/{space}/…`
(docs/api.md, "Spaces").

The routes under `/v1/spaces/{space}/…` are the routes without a space, by the same functions
(the API key's scopes, the rate limits and the bodies are theirs), after `served` has checked
the name, which for `default`, the space of the cluster's own table, costs nothing; they are
served below FastAPI like the routes they alias (bluedove/dispatcher/routes/hot.py). Each route
finds its space's path (decoder, forwarder, subscriber) by the name `served` left in the request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute

from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.dispatcher.deps import SPACE_KEY, json_body, state
from bluedove.dispatcher.operations import spaces
from bluedove.dispatcher.routes import messages, subscriptions

router = APIRouter()
SPACE_ROUTES = "/v1/spaces/{space}"


async def served(request: Request, space: str) -> None:
    """Nothing if this cluster serves `space`, which the request then names (for the API key's
    check and the route's path): `default` with no lookup; another once the dispatcher has its
    path (bluedove/dispatcher/space_paths.py: 422 for a name that cannot be one, 404 for no such
    space or one being deleted, 503 while its table is being laid out)."""
    if space != DEFAULT_SPACE:
        await state(request).paths.get(space)
    request.scope[SPACE_KEY] = space


def _alias(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request, str], Awaitable[Response]]:
    """The route function of a space's route: `endpoint` once `served` has passed."""
    async def in_space(request: Request, space: str) -> Response:
        await served(request, space)
        return await endpoint(request)
    return in_space


# The routes without a space that a space's routes alias, under SPACE_ROUTES + the part after
# /v1, and the space's route functions: served by hot.py, declared below for the OpenAPI.
IN_SPACE = {"/v1/messages": _alias(messages.publish), "/v1/messages:batch": _alias(messages.publish_batch),
            "/v1/subscriptions": _alias(subscriptions.subscribe),
            "/v1/subscriptions:batch": _alias(subscriptions.subscribe_batch)}


def _add_aliases() -> None:
    """Declare each IN_SPACE route under SPACE_ROUTES with the route's own status, body schema and
    documentation: one definition, two paths."""
    routes = [r for src in (messages.router, subscriptions.router) for r in src.routes
              if isinstance(r, APIRoute) and r.path in IN_SPACE and "POST" in (r.methods or ())]
    for r in routes:
        router.add_api_route(SPACE_ROUTES + r.path.removeprefix("/v1"), IN_SPACE[r.path],
                             methods=["POST"], status_code=r.status_code, response_model=None,
                             openapi_extra=r.openapi_extra, description=r.description,
                             name=f"{r.name}_in_space")


_add_aliases()


@router.post("/v1/spaces", status_code=201, response_model=None)
async def create_space(request: Request, response: Response) -> dict[str, Any]:
    """201 and the space when made now; 200 and it when it exists with this very definition."""
    body, made = await spaces.create_space(state(request), await json_body(request),
                                           request.headers.get("authorization"))
    if not made:
        response.status_code = 200
    return body


@router.get("/v1/spaces", response_model=None)
async def list_spaces(request: Request) -> dict[str, Any]:
    return {"spaces": await spaces.list_spaces(state(request))}


@router.get(SPACE_ROUTES, response_model=None)
async def get_space(request: Request, space: str) -> dict[str, Any]:
    return await spaces.get_space(state(request), space)


@router.delete(SPACE_ROUTES, status_code=204)
async def delete_space(request: Request, space: str) -> Response:
    await spaces.delete_space(state(request), space, request.headers.get("authorization"))
    return Response(status_code=204)
