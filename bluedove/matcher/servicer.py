"""The matcher's gRPC service: each handler decodes, calls one Matcher operation, and turns a
MatcherError into its status code (bluedove/matcher/errors.py). No decision is made here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import grpc

from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.matcher import forward_stream
from bluedove.matcher.errors import MatcherError
from bluedove.matcher.matcher import Matcher
from bluedove.runtime.open_streams import OpenStreams
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

Q = TypeVar("Q")
R = TypeVar("R")


async def answer(context: grpc.aio.ServicerContext[Q, R], call: Awaitable[R]) -> R:
    """`call`'s reply, or the call aborted with the status of the MatcherError it raised."""
    try:
        return await call
    except MatcherError as exc:
        await context.abort(exc.code, str(exc))
        raise  # abort raises; this line is never reached


class MatcherServicer(pb_grpc.MatcherServicer):
    """Thin decode-and-dispatch: each handler calls one Matcher operation and maps its errors.
    `close` ends the dispatchers' open streams, which would otherwise hold the server's stop
    for its whole grace period."""

    def __init__(self, m: Matcher) -> None:
        self.m = m
        self._streams = OpenStreams()

    def close(self) -> None:
        """End every open stream (its dispatcher sees it break and opens another)."""
        self._streams.close()

    async def Forward(self, request: pb.ForwardRequest,
                      context: grpc.aio.ServicerContext[pb.ForwardRequest, pb.ForwardReply]) -> pb.ForwardReply:
        return await answer(context, self.m.forward(request))

    async def ForwardStream(self, request_iterator: AsyncIterator[pb.ForwardCall],
                            context: grpc.aio.ServicerContext[pb.ForwardCall, pb.ForwardAnswer]) -> None:
        """Forward on one long-lived call: each call served at once, answered by its seq
        (bluedove/matcher/forward_stream.py)."""
        await forward_stream.serve(self.m.forward, self._streams, request_iterator, context)

    async def AddSubscriptions(self, request: pb.SubscriptionBatch,
                               context: grpc.aio.ServicerContext[pb.SubscriptionBatch, pb.SubscriptionAck]
                               ) -> pb.SubscriptionAck:
        return await answer(context, self.m.add_subscriptions(request))

    async def AddSubscriptionsStream(self, request_iterator: AsyncIterator[pb.SubscriptionBatch],
                                     context: grpc.aio.ServicerContext[pb.SubscriptionBatch, pb.SubscriptionAck]
                                     ) -> AsyncIterator[pb.SubscriptionAck]:
        """AddSubscriptions on one long-lived call: a batch at a time, each acked in order; an
        error (NotReady) ends the call with its status, as it would end a unary call."""
        async for request in self._streams.requests(context, request_iterator):
            yield await answer(context, self.m.add_subscriptions(request))

    async def ReplaceSubscriptions(self, request: pb.SubscriptionBatch,
                                   context: grpc.aio.ServicerContext[pb.SubscriptionBatch, pb.SubscriptionAck]
                                   ) -> pb.SubscriptionAck:
        return await answer(context, self.m.replace_subscriptions(request))

    async def RemoveSubscriptions(self, request: pb.RemoveRequest,
                                  context: grpc.aio.ServicerContext[pb.RemoveRequest, pb.SubscriptionAck]
                                  ) -> pb.SubscriptionAck:
        return await answer(context, self.m.remove_subscriptions(request))

    async def GetTable(self, request: pb.TableRequest,
                       context: grpc.aio.ServicerContext[pb.TableRequest, pb.TableReply]) -> pb.TableReply:
        return await answer(context, self.m.table_reply())

    async def Prepare(self, request: pb.PrepareRequest,
                      context: grpc.aio.ServicerContext[pb.PrepareRequest, pb.PrepareReply]) -> pb.PrepareReply:
        return await answer(context, self.m.prepare_json(request.table_json, request.adopt,
                                                              list(request.sources), request.space))

    async def Export(self, request: pb.ExportRequest,
                     context: grpc.aio.ServicerContext[pb.ExportRequest, pb.ExportReply]) -> pb.ExportReply:
        return await answer(context, self.m.export(request))

    async def Leave(self, request: pb.LeaveRequest,
                    context: grpc.aio.ServicerContext[pb.LeaveRequest, pb.LeaveReply]) -> pb.LeaveReply:
        return await answer(context, self.m.leave_now())

    async def ProposeTable(self, request: pb.ProposeRequest,
                           context: grpc.aio.ServicerContext[pb.ProposeRequest, pb.ProposeReply]) -> pb.ProposeReply:
        return await answer(context, self.m.propose_json(request.table_json, request.reason,
                                                         request.space or DEFAULT_SPACE))

    async def Match(self, request: pb.ForwardRequest,
                    context: grpc.aio.ServicerContext[pb.ForwardRequest, pb.MatchReply]) -> pb.MatchReply:
        return await answer(context, self.m.match(request))

    async def Report(self, request: pb.ReportRequest,
                     context: grpc.aio.ServicerContext[pb.ReportRequest, pb.ReportReply]) -> pb.ReportReply:
        if request.space:
            return await answer(context, self.m.report_in(request.space))
        return self.m.report(with_spaces=request.with_spaces)
