"""Every error renders, on both transports: an error that repeats a client's key (a lone
surrogate, a NUL, 70,000 characters) still makes a REST body that is UTF-8 JSON of bounded size,
and a gRPC status whose message and trailing metadata are valid. Before, an attribute named
"\\ud800" in a publish (or a predicate key "\\udc80" in a subscribe) made a 422 body that could
not be encoded: the dispatcher answered 500 and closed the connection.
"""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from bluedove.core.errors import FIELD_MAX, MESSAGE_MAX, ApiError
from bluedove.core.model import build_subscription, parse_message
from bluedove.core.space import Dimension, Space
from bluedove.dispatcher.app import error_response
from bluedove.dispatcher.grpc_api import abort

SPACE = Space(tuple(Dimension(f"x{i}", 0.0, 1000.0) for i in range(4)))
HOSTILE = ["\ud800", "\udc80", "a\udfffb", "x0\x00", "\udcff" * 3, "y" * 70_000, "\u00e9\U0001F600"]


def raised(fn) -> ApiError:
    with pytest.raises(ApiError) as e:
        fn()
    return e.value


def errors_echoing(key: str) -> list[ApiError]:
    """The errors the model makes that repeat `key`, in a message and in a field."""
    attrs = {key: 1, "x0": 1, "x1": 1, "x2": 1, "x3": 1}
    return [raised(lambda: parse_message({"attributes": attrs}, SPACE)),
            raised(lambda: parse_message({"attributes": {"x0": 1}, key: 1}, SPACE)),
            raised(lambda: build_subscription("s", "q", {key: [0, 1]}, SPACE)),
            raised(lambda: build_subscription("s", "q", {"x0": [key, 1]}, SPACE)),
            ApiError(422, "invalid_request", f"unknown field {key}", key)]


@pytest.mark.parametrize("key", HOSTILE)
def test_a_rest_error_body_is_utf8_json_however_hostile_the_key_it_repeats(key):
    for err in errors_echoing(key):
        response = error_response(err)
        assert response.status_code == 422
        body = json.loads(response.body.decode("utf-8"))  # strict: the bytes are UTF-8
        assert body["error"]["code"] == err.code
        assert len(body["error"]["message"]) <= MESSAGE_MAX + 3
        if "field" in body["error"]:
            assert len(body["error"]["field"]) <= FIELD_MAX + 3
        json.dumps(body, ensure_ascii=False).encode()  # no lone surrogate left in what the client reads


def test_a_lone_surrogate_is_written_as_its_escape_and_the_rest_kept():
    err = raised(lambda: parse_message({"attributes": {"\ud800": 1, "x0": 1, "x1": 1, "x2": 1, "x3": 1}}, SPACE,
                                       "messages[2]."))
    body = json.loads(error_response(err).body)["error"]
    assert body["field"] == "messages[2].attributes.\\ud800"
    assert "\\ud800" in body["message"] and "x0" in body["message"]  # the space's names are still said
    nul = json.loads(error_response(ApiError(422, "invalid_message", "m", "attributes.x0\x00")).body)["error"]
    assert nul["field"] == "attributes.x0\x00"  # JSON carries a NUL (escaped) as it is


class Aborted(Exception):
    """What the fake context's abort raises, as grpc's does."""


class Context:
    """The part of a grpc.aio ServicerContext `abort` uses; it checks what grpc would send."""

    def __init__(self) -> None:
        self.trailing: tuple = ()
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def set_trailing_metadata(self, md: tuple) -> None:
        self.trailing = md

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise Aborted


@pytest.mark.parametrize("key", HOSTILE)
def test_a_grpc_status_is_valid_however_hostile_the_key_it_repeats(key):
    for err in errors_echoing(key):
        ctx = Context()
        with pytest.raises(Aborted):
            asyncio.run(abort(ctx, err))  # type: ignore[arg-type]
        assert ctx.code == grpc.StatusCode.INVALID_ARGUMENT
        ctx.details.encode("utf-8")  # grpc-message: UTF-8, %-encoded
        assert len(ctx.details) <= FIELD_MAX + MESSAGE_MAX + 10
        for name, value in ctx.trailing:
            assert value.isascii() and value.isprintable(), (name, value)  # a metadata value is printable ASCII
