"""Request-scoped helpers shared by the routers (and the door's polls): the dispatcher state, JSON
bodies, bearer tokens, numbers in the query."""

from __future__ import annotations

from typing import Any, cast

from fastapi import Request
from starlette.datastructures import QueryParams

from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.dispatcher.auth import parse_bearer
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.publish.decode import loads_body


def state(request: Request) -> Dispatcher:
    """The dispatcher serving this request (create_app puts it in the app's state)."""
    return cast(Dispatcher, request.app.state.dispatcher)


async def json_body(request: Request) -> Any:
    return loads_body(await request.body())


def bearer(request: Request) -> str | None:
    return parse_bearer(request.headers.get("authorization"))


SPACE_KEY = "bluedove.space"  # set in the request's scope by a space's routes (routes/spaces.py)


def space_of(request: Request) -> str:
    """The space a publish or subscribe request is in: its route's, `default` without one."""
    return cast(str, request.scope.get(SPACE_KEY, DEFAULT_SPACE))


def number(query: QueryParams, name: str, default: float) -> float:
    """The query parameter `name` as a number; NaN when it is not one (check_range names it)."""
    raw = query.get(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        return float("nan")
