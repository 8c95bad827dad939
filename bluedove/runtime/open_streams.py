"""A gRPC server's long-lived incoming streams, ended at once when the server stops.

A peer's gossip stream (bluedove/gossip/grpc_transport.py) and a dispatcher's subscription
stream (bluedove/matcher/servicer.py) never end by themselves, so `server.stop(grace)` would
wait out its whole grace for them. A handler runs its stream inside `held(context)`; `close()`,
called before the server stops, cancels each one, which then ends its call UNAVAILABLE (a
cancelled handler alone leaves the call open until the grace ends) and refuses new ones.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc


class OpenStreams:
    """The handler tasks of a server's open streams, and whether it is stopping."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = asyncio.Event()

    @contextlib.asynccontextmanager
    async def held(self, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[None]:
        """Around a stream's handling: refused while stopping, ended by `close`."""
        if self._closing.is_set():
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is stopping")
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            yield
        except asyncio.CancelledError:
            if not self._closing.is_set():
                raise
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is stopping")
        finally:
            self._tasks.discard(task)

    def close(self) -> None:
        """End every open stream (its sender sees it break and opens another, elsewhere)."""
        self._closing.set()
        for task in list(self._tasks):
            task.cancel()
