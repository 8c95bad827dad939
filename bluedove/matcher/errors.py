"""Why a matcher refuses a call, as the project's errors; the servicer alone turns them into
gRPC status codes (bluedove/matcher/servicer.py), so the matcher's operations can be called
and tested without gRPC.

The dispatcher reads the codes: UNAVAILABLE and FAILED_PRECONDITION send the message to its
next candidate (a matcher still loading, or a stale table), RESOURCE_EXHAUSTED does too without
marking the matcher down (backpressure), ABORTED says the store failed, not the matcher.
"""

from __future__ import annotations

import grpc


class MatcherError(Exception):
    """A refused call; `code` is the gRPC status the servicer answers it with."""

    code = grpc.StatusCode.UNKNOWN


class NotReady(MatcherError):
    """Still starting or loading its subscriptions: try another candidate."""

    code = grpc.StatusCode.UNAVAILABLE


class BadRequest(MatcherError):
    """The request is malformed (a part that does not decode, a dimension that does not exist)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotOwner(MatcherError):
    """A value lies outside this matcher's segment: the caller's table is stale."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Busy(MatcherError):
    """An input queue is at its bound: refused whole, before anything was queued."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class StoreDown(MatcherError):
    """The store failed the write: the matcher is not to blame."""

    code = grpc.StatusCode.ABORTED
