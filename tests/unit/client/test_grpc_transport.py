"""bluedove/client/grpc_transport.py's errors: a status is the API's error by its
`bluedove-error-code`, else by what it is (grpc's own refusal of a request too long to read is
payload_too_large, as the dispatcher's own answer over the limit is)."""

from __future__ import annotations

import grpc

from bluedove.client.errors import LimitExceeded, PayloadTooLarge, Unavailable
from bluedove.client.grpc_transport import rpc_error


class Status(grpc.RpcError):
    """A failed call's status, as the SDK reads it."""

    def __init__(self, code: grpc.StatusCode, details: str, meta: tuple = ()) -> None:
        self._code, self._details, self._meta = code, details, meta

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple:
        return self._meta


def test_a_request_over_the_limit_is_payload_too_large_whoever_refuses_it():
    ours = rpc_error(Status(grpc.StatusCode.RESOURCE_EXHAUSTED, "the request message is 20 bytes, over 10 bytes",
                            (("bluedove-error-code", "payload_too_large"),)))
    theirs = rpc_error(Status(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              "SERVER: Received message larger than max (104857600 vs. 35651584)"))
    assert isinstance(ours, PayloadTooLarge) and isinstance(theirs, PayloadTooLarge)
    assert theirs.code == "payload_too_large" and "104857600" in str(theirs)


def test_other_statuses_without_a_code_keep_their_meaning():
    assert isinstance(rpc_error(Status(grpc.StatusCode.RESOURCE_EXHAUSTED, "quota")), LimitExceeded)
    assert isinstance(rpc_error(Status(grpc.StatusCode.UNAVAILABLE, "down")), Unavailable)


def test_a_call_the_server_cancelled_is_unavailable_and_so_retried():
    """grpc sheds a burst of calls past its server's backlog with CANCELLED and no metadata."""
    err = rpc_error(Status(grpc.StatusCode.CANCELLED, "CANCELLED"))
    assert isinstance(err, Unavailable) and err.code == "unavailable"
