"""API errors: one exception type carrying docs/api.md's status, code, message and field."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as _field
from typing import Any

FIELD_MAX = 200  # characters of a field path an error body carries: a client's key can be any length
MESSAGE_MAX = 2000
ECHO_MAX = 100  # characters of a client's key or value an error message repeats


def echo(value: Any) -> str:
    """`value` as an error message repeats it: its repr (a lone surrogate or a NUL escaped), cut
    to ECHO_MAX characters ending "...": a client's key can be any length."""
    text = repr(value[:ECHO_MAX + 1] if isinstance(value, str) else value)
    return text if len(text) <= ECHO_MAX else text[:ECHO_MAX] + "..."


def printable(text: str, limit: int) -> str:
    """`text` as an error body carries it: a lone surrogate (what a request's JSON may hold,
    and UTF-8 cannot encode) written as its escape `\\udc80`, cut to `limit` characters with
    "..." after."""
    text = text[:limit + 1].encode("utf-8", "backslashreplace").decode()
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass
class ApiError(Exception):
    """An error the public API returns as `{"error": {"code", "message", "field"?}}`."""

    status: int
    code: str
    message: str
    field: str | None = None
    # HTTP headers the error calls for besides its status's (WWW-Authenticate, Retry-After).
    headers: dict[str, str] | None = _field(default=None, compare=False)

    def __str__(self) -> str:  # pragma: no cover - used in logs only
        where = f" ({self.field})" if self.field else ""
        return f"{self.status} {self.code}: {self.message}{where}"

    def body(self) -> dict[str, Any]:
        """docs/api.md's error body, every string encodable as UTF-8 and of bounded length."""
        err: dict[str, Any] = {"code": self.code, "message": printable(self.message, MESSAGE_MAX)}
        if self.field is not None:
            err["field"] = printable(self.field, FIELD_MAX)
        return {"error": err}


def unauthorized() -> ApiError:
    # One message for a missing queue and a wrong token: the answer must not reveal which.
    return ApiError(401, "unauthorized", "a valid queue token is required (Authorization: Bearer <token>; "
                    "with API keys on, a managing call sends it in X-Queue-Token)")


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} does not exist")


def unavailable(message: str) -> ApiError:
    return ApiError(503, "unavailable", message)
