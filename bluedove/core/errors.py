"""API errors: one exception type carrying docs/api.md's status, code, message and field."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as _field
from typing import Any


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
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            err["field"] = self.field
        return {"error": err}


def unauthorized() -> ApiError:
    # One message for a missing queue and a wrong token: the answer must not reveal which.
    return ApiError(401, "unauthorized", "a valid queue token is required (Authorization: Bearer <token>)")


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} does not exist")


def unavailable(message: str) -> ApiError:
    return ApiError(503, "unavailable", message)
