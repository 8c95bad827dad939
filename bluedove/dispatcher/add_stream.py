"""A matcher's direct subscription adds on one long-lived call (`AddSubscriptionsStream`).

A unary `AddSubscriptions` costs the matcher ~370 µs of gRPC alone, a message on an open stream
~150 µs (docs/benchmarks.md, "Subscribe: single calls and batches"). So each subscribe lane
(bluedove/dispatcher/subscriber.py) writes its batches on one open call to its matcher and
reads each one's ack, in order:

- writes go one at a time, each batch's future queued in write order; one reader task
  resolves them as the acks come;
- the call breaking (the matcher restarting, stopping, not ready) fails every batch waiting on
  it with that error, as a unary call would fail, and the next batch opens a new call;
- a batch not acked within `timeout_s` fails with TimeoutError and ends the call (acks after
  it would be out of step);
- a batch is built for its call (`add` takes a builder): in columns once an ack on that call
  said the matcher reads them (bluedove/dispatcher/subscriber.py), each subscription a message
  before that and on unary calls;
- a matcher that does not serve the stream (UNIMPLEMENTED: an older version) is sent unary
  calls from then on; a batch whose stream broke under its write (grpc's INTERNAL, its status
  lost: bluedove/dispatcher/stream_status.py) is sent again unary.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

import grpc

from bluedove.dispatcher.stream_status import OpenCall, StreamedCalls, ended_with, retrieve, send_unary, unimplemented
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

Acks = deque["asyncio.Future[pb.SubscriptionAck]"]


class _Open(OpenCall):
    """One open call: its batches awaiting acks, and the task reading them."""

    def __init__(self, call: Any) -> None:
        super().__init__(call)
        self.pending: Acks = deque()
        self.columns = False  # an ack on this call said the matcher reads SubscriptionBatch.boxes

    def take_waiting(self) -> list[asyncio.Future[Any]]:
        waiting = list(self.pending)
        self.pending.clear()
        return waiting


class AddStream(StreamedCalls[_Open]):
    """One matcher's adds, each batch acked in order on one open call (see the module docstring)."""

    def __init__(self, stub: Callable[[], pb_grpc.MatcherStub], timeout_s: float) -> None:
        super().__init__(lambda: ConnectionError("the dispatcher is stopping"))
        self.stub, self.timeout_s = stub, timeout_s
        self._lock = asyncio.Lock()

    async def add(self, build: Callable[[bool], pb.SubscriptionBatch]) -> pb.SubscriptionAck:
        """The batch `build(columns)` makes filed by the matcher: its ack, or the error a unary
        call would raise."""
        if not self.unary:
            try:
                return await self._on_stream(build)
            except (grpc.aio.AioRpcError, ConnectionError) as exc:
                if not send_unary(exc, self.unary):
                    raise
        reply: pb.SubscriptionAck = await self.stub().AddSubscriptions(build(False), timeout=self.timeout_s)
        return reply

    async def _on_stream(self, build: Callable[[bool], pb.SubscriptionBatch]) -> pb.SubscriptionAck:
        fut: asyncio.Future[pb.SubscriptionAck] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(retrieve)
        async with self._lock:
            for attempt in (1, 2):  # a call found finished when written to: nothing was sent; once more
                if self._open is None:
                    self._open = self._start()
                op = self._open
                batch = build(op.columns)
                op.pending.append(fut)
                try:
                    await op.call.write(batch)
                    break
                except (asyncio.InvalidStateError, grpc.aio.AioRpcError):  # it ended under the write
                    if fut.done():  # its reader failed it already: awaited below, its error is the call's
                        break
                    op.pending.remove(fut)  # (still there: the reader has not ended the call)
                    error = await ended_with(op.call, ConnectionError("the matcher ended the stream"))
                    self._end(op, error)
                    if attempt == 2 or unimplemented(error):
                        raise error from None
                except BaseException as exc:
                    self._end(op, exc if isinstance(exc, Exception) else ConnectionError("the call was cancelled"))
                    raise
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.timeout_s)
        except TimeoutError:
            self._end(op, TimeoutError("no ack in time"))
            raise

    def _start(self) -> _Open:
        op = _Open(self.stub().AddSubscriptionsStream())
        op.reader = asyncio.get_running_loop().create_task(self._read(op))
        return op

    async def _read(self, op: _Open) -> None:
        error: Exception = ConnectionError("the matcher ended the stream")
        try:
            async for ack in op.call:
                op.columns = op.columns or ack.columns
                if op.pending:
                    fut = op.pending.popleft()
                    if not fut.done():
                        fut.set_result(ack)
        except asyncio.CancelledError:
            error = ConnectionError("the stream was closed")
        except grpc.aio.AioRpcError as exc:
            error = exc
        self._end(op, error)
