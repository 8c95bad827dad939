"""`Client` (sync) and `AsyncClient` (asyncio): one shape over REST or gRPC, with retries."""

# Usage: docs/api.md, "Python SDK". Calls safe to repeat (reads, polls, acks, deletes, updates of
# a subscription's predicates, publishes whose every message carries an `id`) are retried with
# exponential backoff on `Unavailable` (503 / UNAVAILABLE); the others raise it at once.

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypedDict, TypeVar, Unpack, cast

from bluedove.client.batches import all_have_ids, chunks, message
from bluedove.client.errors import Unavailable
from bluedove.client.in_space import AsyncInSpace, InSpace
from bluedove.client.objects import (
    Delivery,
    MessageLike,
    Predicates,
    Queue,
    Ranges,
    Subscription,
    When,
    message_body,
    predicates_of,
    receipts_of,
    seek_body,
    subscribe_body,
)
from bluedove.client.transport import AsyncTransport, Json, Transport

if TYPE_CHECKING:
    from bluedove.client.grpc_transport import AsyncGrpcTransport, GrpcTransport

API_KEY_ENV = "BLUEDOVE_API_KEY"


P = ParamSpec("P")
T = TypeVar("T")


class Options(TypedDict, total=False):
    """`Client`'s and `AsyncClient`'s keyword arguments (`_Base`'s)."""

    timeout_s: float
    retries: int
    backoff_s: float
    api_key: str | None
    tls_ca: str | None


# The transport of a URL's scheme; grpc is imported only by a client that speaks it.
def _transport(url: str, timeout_s: float, api_key: str | None, tls_ca: str | None) -> Transport:
    if url.startswith(("grpc://", "grpcs://")):
        from bluedove.client.grpc_transport import GrpcTransport

        return GrpcTransport(url, timeout_s, api_key=api_key, tls_ca=tls_ca)
    from bluedove.client.http import HttpTransport

    return HttpTransport(url, timeout_s, api_key=api_key, tls_ca=tls_ca)


def _async_transport(url: str, timeout_s: float, api_key: str | None, tls_ca: str | None) -> AsyncTransport:
    if url.startswith(("grpc://", "grpcs://")):
        from bluedove.client.grpc_transport import AsyncGrpcTransport

        return AsyncGrpcTransport(url, timeout_s, api_key=api_key, tls_ca=tls_ca)
    from bluedove.client.http import AsyncHttpTransport

    return AsyncHttpTransport(url, timeout_s, api_key=api_key, tls_ca=tls_ca)


def _backoff(attempt: int, base_s: float) -> float:
    return min(base_s * 2.0 ** attempt, 2.0) * (0.5 + random.random() / 2)


class _Base:
    """What the sync and async clients share: the address, the API key, retries and TLS."""

    def __init__(self, url: str = "http://127.0.0.1:8080", *, timeout_s: float = 30.0, retries: int = 4,
                 backoff_s: float = 0.1, api_key: str | None = None, tls_ca: str | None = None) -> None:
        """`url`: http(s)://host:port (REST) or grpc(s)://host:port; `tls_ca`: a PEM file of the
        CA to trust for https:// and grpcs:// (default: the system's roots)."""
        self.url = url
        # An API key (bdk_…) for a cluster run with `--auth keys`: sent with publishes and with
        # creating and deleting queues and subscriptions (the queue token then goes in
        # X-Queue-Token); reads send the queue token alone. Default: BLUEDOVE_API_KEY.
        self.api_key = api_key or os.environ.get(API_KEY_ENV) or None
        self.retries = retries
        self.backoff_s = backoff_s
        self.grpc = url.startswith(("grpc://", "grpcs://"))

    def queue(self, queue_id: str, token: str) -> Queue:
        """A handle on an existing queue."""
        return Queue(queue_id, token, self)

    def _subscription(self, out: Json, queue: Queue | None, predicates: Predicates) -> Subscription:
        q = queue if queue is not None else Queue(out["queue"], out["token"], self)
        return Subscription(out["id"], q, predicates, out.get("replay"))

    @staticmethod
    def _batch_bodies(predicates: Iterable[Ranges], queue: Queue | None) -> tuple[list[Predicates], list[Json]]:
        preds = [predicates_of(p, {}) for p in predicates]
        return preds, [{"predicates": p, **({"queue": queue.id} if queue else {})} for p in preds]


class Client(_Base):
    """Synchronous client (httpx for REST, a blocking channel for gRPC)."""

    def __init__(self, url: str = "http://127.0.0.1:8080", **kw: Unpack[Options]) -> None:
        super().__init__(url, **kw)
        self.t = _transport(url, kw.get("timeout_s", 30.0), self.api_key, kw.get("tls_ca"))

    def close(self) -> None:
        self.t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _retry(self, idempotent: bool, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        attempt = 0
        while True:
            try:
                return fn(*args, **kwargs)
            except Unavailable:
                if not idempotent or attempt >= self.retries:
                    raise
            time.sleep(_backoff(attempt, self.backoff_s))
            attempt += 1

    def space(self) -> Json:
        return self._retry(True, self.t.space)

    def spaces(self) -> list[Json]:
        """GET /v1/spaces (gRPC ListSpaces): every space, each as `space_info` gives it."""
        return self._retry(True, self.t.spaces)

    def space_info(self, name: str) -> Json:
        """GET /v1/spaces/{name}: the space's schema, its table's epoch and its counts."""
        return self._retry(True, self.t.space_info, name)

    def create_space(self, spec: Json) -> Json:
        """POST /v1/spaces: the space made, or the existing one of this very definition (a retry
        is safe); Conflict for another definition under its name."""
        return self._retry(True, self.t.create_space, spec)

    def delete_space(self, name: str) -> None:
        """DELETE /v1/spaces/{name}: its subscriptions go, queues stay (NotFound: no such space)."""
        self.t.delete_space(name)

    def create_queue(self, retain_acked_s: int = 0) -> Queue:
        """A new queue; `retain_acked_s`: keep acked deliveries that long, for `seek`."""
        out = self.t.create_queue(retain_acked_s)
        return Queue(out["queue"], out["token"], self)

    def delete_queue(self, queue: Queue) -> None:
        self._retry(True, self.t.delete_queue, queue.id, queue.token)

    def in_space(self, name: str) -> InSpace:
        """Publish and subscribe in the named space `name` (docs/api.md, "Spaces")."""
        return InSpace(self, name)

    def subscribe(self, queue: Queue | None = None, predicates: Ranges | None = None, *,
                  replay_from: When | None = None, **conditions: Any) -> Subscription:
        """Subscribe `queue` (a new one when None) to a filter, as a dict or keywords: per
        attribute a (low, high) range, a dict of the filter language ({"prefix": "AB"}), or a
        value it equals; `predicates` may hold "any_of" (docs/api.md, "Python SDK").
        `replay_from`: in a space with a log, its messages since then too (docs/api.md, "Replay")."""
        return self.subscribe_in(None, queue, predicates_of(predicates, conditions), replay_from)

    def subscribe_in(self, space: str | None, queue: Queue | None, preds: Predicates,
                     replay_from: When | None = None) -> Subscription:
        """`subscribe` in `space` (None: the default space), the filter given whole."""
        body = subscribe_body(preds, queue, replay_from)
        out = self.t.subscribe(body, queue.token if queue else None, space)
        return self._subscription(out, queue, preds)

    def subscribe_many(self, predicates: Iterable[Ranges], queue: Queue | None = None,
                       space: str | None = None) -> list[Subscription]:
        """Subscribe `queue` to each {dim: (low, high)} of `predicates` (each on a new queue of
        its own when None), in POST /v1/subscriptions:batch calls of up to 1000; each call is
        all or nothing. In order. `space`: a named space's (None: the default space)."""
        preds, bodies = self._batch_bodies(predicates, queue)
        token = queue.token if queue else None
        outs = [o for chunk in chunks(bodies) for o in self.t.subscribe_batch(chunk, token, space)]
        return [self._subscription(o, queue, p) for o, p in zip(outs, preds)]

    def get_subscription(self, sub_id: str, queue: Queue) -> Subscription:
        out = self._retry(True, self.t.get_subscription, sub_id, queue.token)
        return Subscription(out["id"], queue, out["predicates"], out.get("replay"))

    def unsubscribe(self, sub: Subscription) -> None:
        self._retry(True, self.t.unsubscribe, sub.id, sub.queue.token)

    def update_subscription(self, sub: Subscription, predicates: Ranges | None = None,
                            **conditions: Any) -> Subscription:
        """Replace `sub`'s predicates with a filter given as `subscribe` takes it (the whole
        filter: attributes left out match anything). Once it returns, every message published
        afterwards is matched against the new ones only. Safe to repeat, so retried. `sub`
        holds the predicates as stored (ranges clipped to the space) and is returned."""
        body = {"predicates": predicates_of(predicates, conditions)}
        sub.predicates = self._retry(True, self.t.update_subscription, sub.id, body, sub.queue.token)["predicates"]
        return sub

    def publish(self, attributes: Mapping[str, Any], payload: Any = None, id: str | None = None,  # noqa: A002
                space: str | None = None) -> str:
        """One message, in the default space or the named `space`."""
        return self._retry(id is not None, self.t.publish, message(attributes, payload, id), space)

    def publish_many(self, messages: Iterable[MessageLike], space: str | None = None) -> list[str]:
        """Publish in batches of up to 1000 messages and 8 MiB (a PublishStream per batch over
        gRPC); ids in order."""
        bodies = [message_body(m) for m in messages]
        send = cast("GrpcTransport", self.t).publish_stream if self.grpc else self.t.publish_batch
        return [mid for chunk in chunks(bodies) for mid in self._retry(all_have_ids(chunk), send, chunk, space)]

    def poll(self, queue: Queue, max: int = 100, wait: float = 0) -> list[Delivery]:  # noqa: A002
        msgs = self._retry(True, self.t.poll, queue.id, queue.token, max, wait)
        return [Delivery.from_json(m, queue) for m in msgs]

    def ack(self, queue: Queue, deliveries: Iterable[Delivery | str]) -> None:
        receipts = receipts_of(deliveries)
        if receipts:
            self._retry(True, self.t.ack, queue.id, queue.token, receipts)

    def seek(self, queue: Queue, to: datetime | int | str | None = None, *,
             receipt: Delivery | str | None = None) -> int:
        """`Queue.seek`: how many deliveries are deliverable after it. Safe to repeat, so retried."""
        return self._retry(True, self.t.seek, queue.id, queue.token, seek_body(to, receipt))

    def listen(self, queue: Queue, max: int = 100) -> Iterator[Delivery]:  # noqa: A002
        """Every delivery, forever; reconnects (with backoff) when the stream ends or fails."""
        attempt = 0
        while True:
            try:
                for m in self.t.listen(queue.id, queue.token, max):
                    attempt = 0
                    yield Delivery.from_json(m, queue)
            except Unavailable:
                pass
            time.sleep(_backoff(attempt, self.backoff_s))
            attempt = min(attempt + 1, 8)


class AsyncClient(_Base):
    """asyncio client: the same methods as `Client`, to be awaited (listen: `async for`)."""

    def __init__(self, url: str = "http://127.0.0.1:8080", **kw: Unpack[Options]) -> None:
        super().__init__(url, **kw)
        self.t = _async_transport(url, kw.get("timeout_s", 30.0), self.api_key, kw.get("tls_ca"))

    async def close(self) -> None:
        await self.t.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _retry(self, idempotent: bool, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        attempt = 0
        while True:
            try:
                return await fn(*args, **kwargs)
            except Unavailable:
                if not idempotent or attempt >= self.retries:
                    raise
            await asyncio.sleep(_backoff(attempt, self.backoff_s))
            attempt += 1

    async def space(self) -> Json:
        return await self._retry(True, self.t.space)

    async def spaces(self) -> list[Json]:
        """GET /v1/spaces (gRPC ListSpaces): every space, each as `space_info` gives it."""
        return await self._retry(True, self.t.spaces)

    async def space_info(self, name: str) -> Json:
        """GET /v1/spaces/{name}: the space's schema, its table's epoch and its counts."""
        return await self._retry(True, self.t.space_info, name)

    async def create_space(self, spec: Json) -> Json:
        """POST /v1/spaces (as `Client.create_space`)."""
        return await self._retry(True, self.t.create_space, spec)

    async def delete_space(self, name: str) -> None:
        """DELETE /v1/spaces/{name} (as `Client.delete_space`)."""
        await self.t.delete_space(name)

    async def create_queue(self, retain_acked_s: int = 0) -> Queue:
        out = await self.t.create_queue(retain_acked_s)
        return Queue(out["queue"], out["token"], self)

    async def delete_queue(self, queue: Queue) -> None:
        await self._retry(True, self.t.delete_queue, queue.id, queue.token)

    def in_space(self, name: str) -> AsyncInSpace:
        """Publish and subscribe in the named space `name` (docs/api.md, "Spaces")."""
        return AsyncInSpace(self, name)

    async def subscribe(self, queue: Queue | None = None, predicates: Ranges | None = None, *,
                        replay_from: When | None = None, **conditions: Any) -> Subscription:
        return await self.subscribe_in(None, queue, predicates_of(predicates, conditions), replay_from)

    async def subscribe_in(self, space: str | None, queue: Queue | None, preds: Predicates,
                           replay_from: When | None = None) -> Subscription:
        body = subscribe_body(preds, queue, replay_from)
        out = await self.t.subscribe(body, queue.token if queue else None, space)
        return self._subscription(out, queue, preds)

    async def subscribe_many(self, predicates: Iterable[Ranges], queue: Queue | None = None,
                             space: str | None = None) -> list[Subscription]:
        preds, bodies = self._batch_bodies(predicates, queue)
        token = queue.token if queue else None
        outs: list[Json] = []
        for chunk in chunks(bodies):
            outs += await self.t.subscribe_batch(chunk, token, space)
        return [self._subscription(o, queue, p) for o, p in zip(outs, preds)]

    async def get_subscription(self, sub_id: str, queue: Queue) -> Subscription:
        out = await self._retry(True, self.t.get_subscription, sub_id, queue.token)
        return Subscription(out["id"], queue, out["predicates"], out.get("replay"))

    async def unsubscribe(self, sub: Subscription) -> None:
        await self._retry(True, self.t.unsubscribe, sub.id, sub.queue.token)

    async def update_subscription(self, sub: Subscription, predicates: Ranges | None = None,
                                  **conditions: Any) -> Subscription:
        body = {"predicates": predicates_of(predicates, conditions)}
        out = await self._retry(True, self.t.update_subscription, sub.id, body, sub.queue.token)
        sub.predicates = out["predicates"]
        return sub

    async def publish(self, attributes: Mapping[str, Any], payload: Any = None,
                      id: str | None = None, space: str | None = None) -> str:  # noqa: A002
        return await self._retry(id is not None, self.t.publish, message(attributes, payload, id), space)

    async def publish_many(self, messages: Iterable[MessageLike], space: str | None = None) -> list[str]:
        bodies = [message_body(m) for m in messages]
        send = cast("AsyncGrpcTransport", self.t).publish_stream if self.grpc else self.t.publish_batch
        out: list[str] = []
        for chunk in chunks(bodies):
            out += await self._retry(all_have_ids(chunk), send, chunk, space)
        return out

    async def poll(self, queue: Queue, max: int = 100, wait: float = 0) -> list[Delivery]:  # noqa: A002
        msgs = await self._retry(True, self.t.poll, queue.id, queue.token, max, wait)
        return [Delivery.from_json(m, queue) for m in msgs]

    async def ack(self, queue: Queue, deliveries: Iterable[Delivery | str]) -> None:
        receipts = receipts_of(deliveries)
        if receipts:
            await self._retry(True, self.t.ack, queue.id, queue.token, receipts)

    async def seek(self, queue: Queue, to: datetime | int | str | None = None, *,
                   receipt: Delivery | str | None = None) -> int:
        return await self._retry(True, self.t.seek, queue.id, queue.token, seek_body(to, receipt))

    async def listen(self, queue: Queue, max: int = 100) -> AsyncIterator[Delivery]:  # noqa: A002
        attempt = 0
        while True:
            try:
                async for m in self.t.listen(queue.id, queue.token, max):
                    attempt = 0
                    yield Delivery.from_json(m, queue)
            except Unavailable:
                pass
            await asyncio.sleep(_backoff(attempt, self.backoff_s))
            attempt = min(attempt + 1, 8)
