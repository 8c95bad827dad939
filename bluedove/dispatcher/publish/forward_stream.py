"""A matcher's Forward calls on one long-lived gRPC call (`ForwardStream`).

A unary Forward costs the matcher ~150 µs of gRPC's own work, a message on an open stream ~50
µs (docs/benchmarks.md, "Capped matchers"); the saving grows as matchers are added and each
call carries fewer messages. So each publish lane (bluedove/dispatcher/publish/forwarder.py)
writes its calls on one open call to its matcher, each with a number, and the matcher answers
each by its number as it finishes it (bluedove/matcher/forward_stream.py). To the lane a
streamed call behaves as a unary one:

- its answer is the reply, or a `grpc.aio.AioRpcError` with the status code and details the
  matcher gave (FAILED_PRECONDITION, RESOURCE_EXHAUSTED, ...), so failover reads it alike;
- a call not answered within its timeout fails with DEADLINE_EXCEEDED, and only that call: a
  late answer is dropped (the matcher's dedup makes the retry elsewhere deliver nothing twice);
- the stream breaking (the matcher stopping, restarting, unreachable) fails every call
  waiting on it with the stream's error; the next call opens a new stream;
- a matcher that does not serve the stream (UNIMPLEMENTED: an older version) is sent unary
  calls from then on, the failed call among them; a call whose stream broke under its write
  (grpc's INTERNAL, its status lost: bluedove/dispatcher/stream_status.py) is sent again unary.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc

from bluedove.dispatcher.stream_status import (
    OpenCall,
    StreamedCalls,
    ended_with,
    retrieve,
    rpc_error,
    send_unary,
    unimplemented,
)
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

_CODES = {c.value[0]: c for c in grpc.StatusCode}


class _Open(OpenCall):
    """One open call: its calls awaiting answers by seq, and the task reading them."""

    def __init__(self, call: Any) -> None:
        super().__init__(call)
        self.pending: dict[int, asyncio.Future[pb.ForwardReply]] = {}

    def take_waiting(self) -> list[asyncio.Future[Any]]:
        waiting, self.pending = list(self.pending.values()), {}
        return waiting


class ForwardStream(StreamedCalls[_Open]):
    """One matcher's Forward calls on one open call (see the module docstring)."""

    def __init__(self, stub: Callable[[], pb_grpc.MatcherStub]) -> None:
        super().__init__(lambda: rpc_error(grpc.StatusCode.UNAVAILABLE, "the dispatcher is stopping"))
        self.stub = stub
        self._writing = asyncio.Lock()  # one write at a time on a call
        self._seq = 0

    async def forward(self, request: pb.ForwardRequest, timeout_s: float) -> pb.ForwardReply:
        """`request` matched and stored by the matcher: its reply, or the error a unary call
        would raise."""
        if not self.unary:
            try:
                return await self._on_stream(request, timeout_s)
            except grpc.aio.AioRpcError as exc:
                if not send_unary(exc, self.unary):
                    raise
        reply: pb.ForwardReply = await self.stub().Forward(request, timeout=timeout_s)
        return reply

    async def _on_stream(self, request: pb.ForwardRequest, timeout_s: float) -> pb.ForwardReply:
        self._seq += 1
        seq = self._seq
        fut: asyncio.Future[pb.ForwardReply] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(retrieve)
        async with self._writing:
            for attempt in (1, 2):  # a call found finished when written to: nothing was sent; once more
                if self._open is None:
                    self._open = self._start()
                op = self._open
                op.pending[seq] = fut
                try:
                    await op.call.write(pb.ForwardCall(seq=seq, request=request))
                    break
                except (asyncio.InvalidStateError, grpc.aio.AioRpcError):  # it ended under the write
                    if fut.done():  # its reader failed it already: awaited below, its error is the call's
                        break
                    op.pending.pop(seq, None)
                    error = await ended_with(op.call, _ended())
                    self._end(op, error)
                    if attempt == 2 or unimplemented(error):
                        raise error from None
                except BaseException as exc:
                    self._end(op, exc if isinstance(exc, Exception) else _ended())
                    raise
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            op.pending.pop(seq, None)
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "no answer on the stream in time") from None

    def _start(self) -> _Open:
        op = _Open(self.stub().ForwardStream())
        op.reader = asyncio.get_running_loop().create_task(self._read(op))
        return op

    async def _read(self, op: _Open) -> None:
        error: Exception = _ended()
        try:
            async for answer in op.call:
                fut = op.pending.pop(answer.seq, None)
                if fut is None or fut.done():
                    continue  # timed out meanwhile
                if answer.code:
                    code = _CODES.get(answer.code, grpc.StatusCode.UNKNOWN)
                    fut.set_exception(rpc_error(code, answer.details))
                else:
                    fut.set_result(answer.reply)
        except asyncio.CancelledError:
            error = rpc_error(grpc.StatusCode.UNAVAILABLE, "the stream was closed")
        except grpc.aio.AioRpcError as exc:
            error = exc
        self._end(op, error)


def _ended() -> grpc.aio.AioRpcError:
    return rpc_error(grpc.StatusCode.UNAVAILABLE, "the matcher ended the stream")
