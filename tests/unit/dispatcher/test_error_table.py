"""bluedove/dispatcher/errors.py's table is the one source of each error code's REST status and gRPC code:
every error the code raises carries the status the table gives its code."""

from __future__ import annotations

import re
from pathlib import Path

import grpc

from bluedove.core.errors import ApiError, not_found, unauthorized, unavailable
from bluedove.dispatcher.errors import ERRORS, as_api_error, grpc_code, http_status

ROOT = Path(__file__).resolve().parents[3]
RAISED = re.compile(r'(?:ApiError\(|bad\(.*, )(\d{3}), "([a-z_]+)"')


def test_every_status_and_code_written_in_the_source_agrees_with_the_table():
    pairs = {(int(s), c) for d in ("bluedove", "dispatcher") for f in (ROOT / d).rglob("*.py")
             for s, c in RAISED.findall(f.read_text(encoding="utf-8"))}
    pairs |= {(e.status, e.code) for e in (unauthorized(), not_found("x"), unavailable("x"))}
    assert len(pairs) >= 10
    assert {(s, c) for s, c in pairs if ERRORS[c][0] != s} == set()


def test_both_transports_read_the_table():
    err = ApiError(413, "payload_too_large", "too big", "payload")
    assert http_status(err) == 413 and grpc_code(err) == grpc.StatusCode.INVALID_ARGUMENT
    assert grpc_code(unauthorized()) == grpc.StatusCode.UNAUTHENTICATED
    # a framework HTTP error outside the table keeps its own status
    assert http_status(ApiError(418, "http_error", "teapot")) == 418


def test_an_unreachable_matcher_is_unavailable_and_an_unforeseen_error_is_none():
    rpc = grpc.aio.AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, grpc.aio.Metadata(), grpc.aio.Metadata())
    assert as_api_error(rpc).code == "unavailable" and "DEADLINE_EXCEEDED" in as_api_error(rpc).message
    assert as_api_error(ValueError()) is None
