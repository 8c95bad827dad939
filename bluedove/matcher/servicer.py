"""The matcher's gRPC service: each handler decodes, calls one Matcher operation, and turns a
MatcherError into its status code (bluedove/matcher/errors.py). No decision is made here.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import grpc

from bluedove.matcher.errors import MatcherError
from bluedove.matcher.matcher import Matcher
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

R = TypeVar("R")


async def answer(context: grpc.aio.ServicerContext, call: Awaitable[R]) -> R:
    """`call`'s reply, or the call aborted with the status of the MatcherError it raised."""
    try:
        return await call
    except MatcherError as exc:
        await context.abort(exc.code, str(exc))
        raise  # abort raises; this line is never reached


class MatcherServicer(pb_grpc.MatcherServicer):
    """Thin decode-and-dispatch: each handler calls one Matcher operation and maps its errors."""

    def __init__(self, m: Matcher) -> None:
        self.m = m

    async def Forward(self, request, context):
        return await answer(context, self.m.forward(request))

    async def AddSubscriptions(self, request, context):
        return await answer(context, self.m.add_subscriptions(request))

    async def RemoveSubscriptions(self, request, context):
        return await answer(context, self.m.remove_subscriptions(request))

    async def GetTable(self, request, context):
        return await answer(context, self.m.table_reply())

    async def Prepare(self, request, context):
        return await answer(context, self.m.prepare_json(request.table_json, request.adopt, list(request.sources)))

    async def Export(self, request, context):
        return await answer(context, self.m.export(request))

    async def Leave(self, request, context):
        return await answer(context, self.m.leave_now())

    async def ProposeTable(self, request, context):
        return await answer(context, self.m.propose_json(request.table_json, request.reason))

    async def Match(self, request, context):
        return await answer(context, self.m.match(request))

    async def Report(self, request, context):
        return self.m.report()
