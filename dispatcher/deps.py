"""Request-scoped helpers shared by the routers: the dispatcher state, JSON bodies, bearer tokens."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from bluedove.errors import ApiError


def state(request: Request):
    return request.app.state.dispatcher


async def json_body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw) if raw else None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, "invalid_json", "the body is JSON nested too deeply to read") from None


def parse_bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` value (REST header or gRPC metadata);
    None when there is none or the scheme is another."""
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def bearer(request: Request) -> str | None:
    return parse_bearer(request.headers.get("authorization"))

