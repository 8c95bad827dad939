"""The API's errors on both transports (docs/api.md, "Errors" and "gRPC").

One table from the project's error codes to the REST status and the gRPC code, and one mapping
from the exceptions a request can end in (an ApiError, the store or a matcher unreachable) to
the API error they stand for. The REST handlers (bluedove/dispatcher/app.py) and the gRPC servicer
(bluedove/dispatcher/grpc_api.py) both answer through these.
"""

from __future__ import annotations

import grpc
import redis.exceptions

from bluedove.core.errors import ApiError, unavailable

_ARG = grpc.StatusCode.INVALID_ARGUMENT
# error code -> (REST status, gRPC code)
ERRORS: dict[str, tuple[int, grpc.StatusCode]] = {
    "invalid_json": (400, _ARG),
    "unauthorized": (401, grpc.StatusCode.UNAUTHENTICATED),
    "forbidden": (403, grpc.StatusCode.PERMISSION_DENIED),
    "not_found": (404, grpc.StatusCode.NOT_FOUND),
    "method_not_allowed": (405, grpc.StatusCode.UNIMPLEMENTED),
    "request_timeout": (408, grpc.StatusCode.DEADLINE_EXCEEDED),  # REST's door only (bluedove/dispatcher/door.py)
    "conflict": (409, grpc.StatusCode.ALREADY_EXISTS),  # a space under its name with another definition
    "payload_too_large": (413, _ARG),
    "invalid_request": (422, _ARG),
    "invalid_subscription": (422, _ARG),
    "invalid_message": (422, _ARG),
    "invalid_parameter": (422, _ARG),
    "invalid_ack": (422, _ARG),
    "invalid_space": (422, _ARG),  # a space's definition (bluedove/core/spaces.py)
    "limit_exceeded": (429, grpc.StatusCode.RESOURCE_EXHAUSTED),
    "rate_limited": (429, grpc.StatusCode.RESOURCE_EXHAUSTED),
    "quota_exceeded": (429, grpc.StatusCode.RESOURCE_EXHAUSTED),  # a space's (bluedove/dispatcher/space_quotas.py)
    "internal": (500, grpc.StatusCode.INTERNAL),
    "unavailable": (503, grpc.StatusCode.UNAVAILABLE),
}

# Headers HTTP asks for with an error status: how to authenticate (RFC 9110 §11.6.1, the
# same for every 401, so it reveals nothing), and when to retry a 503.
HTTP_HEADERS = {401: {"WWW-Authenticate": 'Bearer realm="bluedove"'}, 503: {"Retry-After": "1"}}

# The store unreachable, or a Redis Cluster failing over: a node answers CLUSTERDOWN (or
# TRYAGAIN) while a dead primary's replica is not yet promoted, and the client may find a slot
# served by no node it knows. Each passes once the cluster has settled: 503, retry.
STORE_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.ClusterError,
                redis.exceptions.TryAgainError, redis.exceptions.SlotNotCoveredError)


def http_status(err: ApiError) -> int:
    """The REST status of `err` (the table's; an HTTP error of the framework keeps its own)."""
    return ERRORS[err.code][0] if err.code in ERRORS else err.status


def grpc_code(err: ApiError) -> grpc.StatusCode:
    return ERRORS[err.code][1] if err.code in ERRORS else grpc.StatusCode.INTERNAL


def as_api_error(exc: BaseException) -> ApiError | None:
    """The API error an exception stands for, or None (an unforeseen error)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, STORE_ERRORS):
        return unavailable("the store is unreachable; retry")
    if isinstance(exc, grpc.aio.AioRpcError):
        return unavailable(f"a matcher did not answer: {exc.code().name}")
    return None
