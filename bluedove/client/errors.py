"""Typed SDK exceptions, one per API error code (docs/api.md), raised by every transport."""

from __future__ import annotations


class BlueDoveError(Exception):
    """An error the service answered (or a transport failure, as `Unavailable`)."""

    status = 0

    def __init__(self, code: str, message: str, field: str | None = None, status: int | None = None) -> None:
        super().__init__(f"{code}: {message}" + (f" ({field})" if field else ""))
        self.code = code
        self.message = message
        self.field = field
        if status is not None:
            self.status = status


class InvalidRequest(BlueDoveError):
    """400/422: the request is malformed; `field` names the part at fault. Nothing changed."""

    status = 422


class InvalidJson(InvalidRequest):
    """400 `invalid_json`: the request body is not JSON."""

    status = 400


class InvalidSubscription(InvalidRequest):
    """422 `invalid_subscription`: a malformed subscription or batch of subscriptions."""
    pass


class InvalidMessage(InvalidRequest):
    """422 `invalid_message`: a malformed message or batch of messages."""
    pass


class InvalidParameter(InvalidRequest):
    """422 `invalid_parameter`: a query parameter out of its range (`max`, `wait`, `since`)."""
    pass


class InvalidAck(InvalidRequest):
    """422 `invalid_ack`: an ack whose `receipts` are missing or not receipts."""
    pass


class PayloadTooLarge(InvalidRequest):
    """413 `payload_too_large`: a message payload over the size limit."""

    status = 413


class Unauthorized(BlueDoveError):
    """401: missing or wrong queue token (the same whether or not the queue exists)."""

    status = 401


class Forbidden(BlueDoveError):
    """403: a valid API key without the operation's scope (the message starts `insufficient_scope:`)."""

    status = 403


class NotFound(BlueDoveError):
    """404 `not_found`: an unknown route, or a subscription that is not of the token's queue."""

    status = 404


class Conflict(BlueDoveError):
    """409 `conflict`: a space exists under that name with another definition (`field` names the
    first difference), or the `default` space asked to be deleted."""

    status = 409


class LimitExceeded(BlueDoveError):
    """429: a limit such as subscriptions per queue."""

    status = 429


class RateLimited(LimitExceeded):
    """429 `rate_limited`: the API key is over its messages or bytes per second; nothing of the
    request was published. Retry after the answer's Retry-After seconds."""


class Unavailable(BlueDoveError):
    """503 / UNAVAILABLE, or the service could not be reached: retry later (REST: after
    `retry_after_s`, the answer's Retry-After, when it gave one)."""

    status = 503
    retry_after_s: float | None = None


BY_CODE: dict[str, type[BlueDoveError]] = {
    "invalid_json": InvalidJson,
    "invalid_request": InvalidRequest,
    "invalid_subscription": InvalidSubscription,
    "invalid_message": InvalidMessage,
    "invalid_parameter": InvalidParameter,
    "invalid_ack": InvalidAck,
    "payload_too_large": PayloadTooLarge,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "conflict": Conflict,
    "limit_exceeded": LimitExceeded,
    "rate_limited": RateLimited,
    "unavailable": Unavailable,
}
BY_STATUS: dict[int, type[BlueDoveError]] = {
    400: InvalidRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 413: PayloadTooLarge,
    422: InvalidRequest, 429: LimitExceeded, 503: Unavailable,
}


def api_error(status: int, code: str | None, message: str, field: str | None = None) -> BlueDoveError:
    """The exception for an error answer: by its code, else by its status."""
    cls = BY_CODE.get(code or "") or BY_STATUS.get(status) or BlueDoveError
    return cls(code or "error", message, field, status)
