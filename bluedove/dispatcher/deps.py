"""Request-scoped helpers shared by the routers: the dispatcher state, JSON bodies, bearer tokens."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from bluedove.dispatcher.publish.decode import loads_body


def state(request: Request):
    return request.app.state.dispatcher


async def json_body(request: Request) -> Any:
    return loads_body(await request.body())


def parse_bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` value (REST header or gRPC metadata);
    None when there is none or the scheme is another."""
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def bearer(request: Request) -> str | None:
    return parse_bearer(request.headers.get("authorization"))

