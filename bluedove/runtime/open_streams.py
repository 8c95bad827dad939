"""A gRPC server's long-lived incoming streams, ended at once when the server stops.

A peer's gossip stream (bluedove/gossip/grpc_transport.py) and a dispatcher's subscription
stream (bluedove/matcher/servicer.py) never end by themselves, so `server.stop(grace)` would
wait out its whole grace for them. A handler reads its requests through `requests(context, it)`;
`close()`, called before the server stops, refuses new streams and ends the open ones with
UNAVAILABLE (a cancelled handler alone leaves the call open until the grace ends).

Only a handler waiting for its next request is cancelled. One busy with a request, or writing
its answer, is outside this module's code, where a cancel would end the task but not the call;
it finishes that request and ends when it comes back for the next.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, NoReturn, TypeVar

import grpc

T = TypeVar("T")


class OpenStreams:
    """The handler tasks waiting on an open stream's next request, and whether it is stopping."""

    def __init__(self) -> None:
        self._waiting: set[asyncio.Task[Any]] = set()
        self._closing = False

    def closing(self) -> bool:
        """Whether `close` was called (a call, so a check is never narrowed across an await)."""
        return self._closing

    async def requests(self, context: grpc.aio.ServicerContext[Any, Any],
                       iterator: AsyncIterable[T]) -> AsyncIterator[T]:
        """`iterator`'s requests, until the client ends the stream or the server is stopping."""
        task = asyncio.current_task()
        assert task is not None
        requests = aiter(iterator)
        while True:
            if self.closing():
                await self._end(context)
            self._waiting.add(task)
            try:
                request = await anext(requests)
            except StopAsyncIteration:
                return
            except asyncio.CancelledError:
                if not self.closing():
                    raise
                await self._end(context)
            finally:
                self._waiting.discard(task)
            yield request

    @staticmethod
    async def _end(context: grpc.aio.ServicerContext[Any, Any]) -> NoReturn:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is stopping")
        raise AssertionError("abort raises")

    def close(self) -> None:
        """End every open stream (its sender sees it break and opens another, elsewhere)."""
        self._closing = True
        for task in list(self._waiting):
            task.cancel()
