"""How a stream to a matcher ended, when a write found it ending.

A write racing the end of its call fails with asyncio's InvalidStateError or with grpc's
INTERNAL ("Internal error from Core"), whatever ended the call; the call's status can then be
INTERNAL too. Otherwise its status says why: UNIMPLEMENTED from a matcher that does not serve
the stream (bluedove/dispatcher/add_stream.py and bluedove/dispatcher/publish/forward_stream.py
then send unary calls), UNAVAILABLE from one stopping.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

# How long to wait for the status of a call a write found ending (it is on its way).
STATUS_WAIT_S = 1.0


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """The error a unary call ending with `code` raises."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details, None)


def unimplemented(exc: BaseException) -> bool:
    return isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.UNIMPLEMENTED


def send_unary(exc: BaseException, unary: bool) -> bool:
    """Whether a request the stream failed is sent again as a unary call: the matcher does not
    serve the stream (UNIMPLEMENTED, or `unary` already known), or the call broke under a write
    (INTERNAL, which a matcher never answers itself) and its own status is lost."""
    if unary or unimplemented(exc):
        return True
    return isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.INTERNAL


async def ended_with(call: Any, default: Exception) -> Exception:
    """The error `call` ended with (its status, unless OK or not known in time), else `default`."""
    try:
        code = await asyncio.wait_for(call.code(), STATUS_WAIT_S)
        details = await asyncio.wait_for(call.details(), STATUS_WAIT_S)
    except (TimeoutError, grpc.aio.AioRpcError, asyncio.InvalidStateError):
        return default
    if code == grpc.StatusCode.OK or code is None:
        return default
    return rpc_error(code, details or "")
