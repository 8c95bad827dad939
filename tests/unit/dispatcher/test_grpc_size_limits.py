"""The gRPC API's message limit (bluedove/dispatcher/grpc_api.py): the REST body cap plus 1 MiB,
a message over it handed on unparsed and answered RESOURCE_EXHAUSTED with the API's code, and
grpc reading at most twice the limit of any message."""

from __future__ import annotations

import grpc
import pytest

from bluedove.dispatcher.grpc_api import INT32_MAX, Oversized, TooLarge, abort, lenient, message_limits
from bluedove.v1 import pubsub_pb2 as pb

MIB = 1024 * 1024


class Context:
    """What abort() uses of a call's context, recorded."""

    def __init__(self) -> None:
        self.meta: tuple = ()
        self.status: tuple = ()

    def set_trailing_metadata(self, meta: tuple) -> None:
        self.meta = meta

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.status = (code, details)
        raise RuntimeError("aborted")


def test_the_limit_is_the_rest_cap_and_a_mib_and_grpc_reads_at_most_twice_it():
    assert message_limits(16 * MIB) == (17 * MIB, 34 * MIB)
    assert message_limits(1500 * MIB) == (1501 * MIB, INT32_MAX)


def test_a_message_over_the_limit_is_handed_on_unparsed():
    parse = lenient(pb.PollRequest, 10)
    assert parse(pb.PollRequest(queue="q").SerializeToString()) == pb.PollRequest(queue="q")
    over = parse(pb.PollRequest(queue="q" * 9).SerializeToString())
    assert isinstance(over, Oversized) and over.size == 11
    err = over.error("messages[2]")
    assert isinstance(err, TooLarge) and (err.code, err.field) == ("payload_too_large", "messages[2]")
    assert "11 bytes, over 10 bytes, the limit" in err.message


async def test_it_is_answered_resource_exhausted_with_the_apis_code():
    ctx = Context()
    with pytest.raises(RuntimeError):
        await abort(ctx, Oversized(11, 10).error("messages[2]"))  # type: ignore[arg-type]
    assert ctx.status[0] == grpc.StatusCode.RESOURCE_EXHAUSTED and "over 10 bytes" in ctx.status[1]
    assert dict(ctx.meta) == {"bluedove-error-code": "payload_too_large", "bluedove-error-field": "messages[2]"}
