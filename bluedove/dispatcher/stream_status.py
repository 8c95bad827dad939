"""Calls on one open stream to a matcher: what the subscription adds' stream
(bluedove/dispatcher/add_stream.py) and the Forward stream (bluedove/dispatcher/publish/forward_stream.py)
share — the open call, its end, and how it ended when a write found it ending.

A write racing the end of its call fails with asyncio's InvalidStateError or with grpc's
INTERNAL ("Internal error from Core"), whatever ended the call; the call's status can then be
INTERNAL too. Otherwise its status says why: UNIMPLEMENTED from a matcher that does not serve
the stream (bluedove/dispatcher/add_stream.py and bluedove/dispatcher/publish/forward_stream.py
then send unary calls), UNAVAILABLE from one stopping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Generic, TypeVar

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


class OpenCall:
    """One open call to a matcher, and the task reading its answers."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.reader: asyncio.Task[None] | None = None

    def take_waiting(self) -> list[asyncio.Future[Any]]:
        """Every future still waiting on the call, taken off it."""
        raise NotImplementedError


Op = TypeVar("Op", bound=OpenCall)


class StreamedCalls(Generic[Op]):
    """One matcher's calls of one kind on one open call: the call, whether the matcher takes
    unary calls only, and the call's end."""

    def __init__(self, stopping: Callable[[], Exception]) -> None:
        self.unary = False  # the matcher does not serve the stream
        self._open: Op | None = None
        self._stopping = stopping  # what the calls still waiting hear when the dispatcher stops

    def _end(self, op: Op, error: Exception) -> None:
        """Close `op`'s call (once) and fail what waits on it; a matcher that does not serve the
        stream is sent unary calls from now on."""
        if self._open is op:
            self._open = None
        if unimplemented(error):
            self.unary = True
        op.call.cancel()
        for fut in op.take_waiting():
            if not fut.done():
                fut.set_exception(error)

    async def close(self) -> None:
        """End the open call, if any, and its reader."""
        op, self._open = self._open, None
        if op is None:
            return
        self._end(op, self._stopping())
        if op.reader is not None:
            op.reader.cancel()
            await asyncio.gather(op.reader, return_exceptions=True)


def retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark a failed future's exception seen: a call that timed out is failed with no one awaiting it."""
    if not fut.cancelled():
        fut.exception()
