"""`ForwardStream`: a dispatcher's Forward calls on one long-lived gRPC call.

A unary call costs a matcher ~150 µs of gRPC's own work before any of ours, a message on an
open stream ~50 µs (docs/benchmarks.md, "Capped matchers"), and a publish lane makes a call
for every batch it sends. So a dispatcher writes its calls to a matcher on one open stream
(bluedove/dispatcher/publish/forward_stream.py), each with a number (`seq`), and the matcher
answers each one by its number:

- every call is served at once, as a unary call would be, so calls written one after another
  still join one batch of the input queue (bluedove/matcher/queues.py); answers go out as the
  calls finish, one write at a time;
- a call the matcher refuses is answered with the status code and details the unary call
  would have ended with; the stream goes on;
- when the dispatcher ends its side, the handler answers what is under way, then ends; when
  the server stops, the stream ends with UNAVAILABLE (bluedove/runtime/open_streams.py) and the
  dispatcher sends what had no answer elsewhere (the matcher's dedup makes a late success
  deliver nothing twice).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from bluedove.matcher.errors import MatcherError
from bluedove.runtime.open_streams import OpenStreams
from bluedove.v1 import matcher_pb2 as pb

log = logging.getLogger("bluedove.matcher")

Forward = Callable[[pb.ForwardRequest], Awaitable[pb.ForwardReply]]
Context = grpc.aio.ServicerContext[pb.ForwardCall, pb.ForwardAnswer]


async def _answer(forward: Forward, call: pb.ForwardCall) -> pb.ForwardAnswer:
    """The call's answer: its reply, or the status the unary Forward would end with."""
    try:
        return pb.ForwardAnswer(seq=call.seq, reply=await forward(call.request))
    except MatcherError as exc:
        return pb.ForwardAnswer(seq=call.seq, code=exc.code.value[0], details=str(exc))
    except Exception as exc:  # as grpc answers a unary handler that raised: UNKNOWN; the stream goes on
        log.exception("a streamed Forward call failed")
        return pb.ForwardAnswer(seq=call.seq, code=grpc.StatusCode.UNKNOWN.value[0], details=repr(exc))


async def serve(forward: Forward, streams: OpenStreams, requests: AsyncIterator[pb.ForwardCall],
                context: Context) -> None:
    """Serve one dispatcher's stream (the module docstring): each call at once, answers by seq."""
    writing = asyncio.Lock()
    under_way: set[asyncio.Task[None]] = set()

    async def one(call: pb.ForwardCall) -> None:
        answer = await _answer(forward, call)
        async with writing:
            try:
                await context.write(answer)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError, RuntimeError):
                pass  # the call has ended: the dispatcher has failed this call over already

    loop = asyncio.get_running_loop()
    try:
        async for call in streams.requests(context, requests):
            task = loop.create_task(one(call))
            under_way.add(task)
            task.add_done_callback(under_way.discard)
        if under_way:
            await asyncio.wait(list(under_way))
    finally:
        for task in under_way:  # the stream ended under them: nobody reads their answers
            task.cancel()
