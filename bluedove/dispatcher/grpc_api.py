"""The public gRPC API (bluedove.v1.PubSub): a thin servicer over bluedove/dispatcher/operations.py."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, NoReturn, Protocol, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message
from grpc.aio import ServicerContext
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from bluedove.core.apikeys import SUBSCRIBE
from bluedove.core.errors import MESSAGE_MAX, ApiError, printable
from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.dispatcher import grpc_publish, grpc_spaces
from bluedove.dispatcher import operations as ops
from bluedove.dispatcher.auth import parse_bearer
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.errors import as_api_error, grpc_code
from bluedove.dispatcher.grpc_messages import delivery_pb, filter_of, metadata, subscription_info
from bluedove.dispatcher.grpc_options import server_options
from bluedove.dispatcher.grpc_publish import key, managing
from bluedove.dispatcher.operations.queues import seek as seek_queue
from bluedove.runtime import tls
from bluedove.runtime.settings import DispatcherSettings
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc

log = logging.getLogger("bluedove.dispatcher.grpc")

SERVICE = pb.DESCRIPTOR.services_by_name["PubSub"].full_name

# Any call's context, for what reads its metadata or ends it.
Context = ServicerContext[Any, Any]
S = TypeVar("S")
Req = TypeVar("Req")
Resp = TypeVar("Resp")
M = TypeVar("M", bound=Message)


FIELD_MAX = 200  # characters of a field path in an error: a client's key can be any length


def header_safe(text: str, limit: int = FIELD_MAX) -> str:
    """`text` as an ASCII metadata value: other characters escaped (\\x00, \\u00e9), cut to
    `limit` characters with "..." after. A field path holds the client's own keys: a NUL or a
    70 000-character name must not make the status itself invalid (gRPC would answer INTERNAL)."""
    out = "".join(c if " " <= c <= "~" else ascii(c)[1:-1] for c in text[:limit + 1])
    return out if len(out) <= limit else out[:limit] + "..."


# docs/api.md, "Limits": a request message may be the REST body cap and this much more (what
# protobuf's framing may take over JSON's: a double attribute is 9 bytes where JSON writes `1`).
MESSAGE_MARGIN = 1024 * 1024
INT32_MAX = 2**31 - 1  # grpc's largest message length


def message_limits(max_body_bytes: int) -> tuple[int, int]:
    """(most bytes of a request message, most bytes grpc reads of one). A message over the first
    is read, dropped and answered RESOURCE_EXHAUSTED `payload_too_large` (`Oversized`); one over
    the second, twice the first, grpc refuses on its length alone, before reading it, with its
    own RESOURCE_EXHAUSTED: no hostile length makes the server hold more than that."""
    limit = max_body_bytes + MESSAGE_MARGIN
    return limit, min(2 * limit, INT32_MAX)


class TooLarge(ApiError):
    """A request message over the limit: `payload_too_large`, as REST's 413 for a body over its
    cap, with the gRPC status grpc gives a message over its limit, RESOURCE_EXHAUSTED."""


async def abort(context: Context, exc: Exception) -> NoReturn:
    """End the call with the gRPC status of the API error `exc` stands for; re-raise an
    unforeseen one (gRPC answers it UNKNOWN and logs it)."""
    err = as_api_error(exc)
    if err is None:
        raise exc
    field = header_safe(err.field) if err.field else None
    meta = [("bluedove-error-code", err.code)] + ([("bluedove-error-field", field)] if field else [])
    if err.headers and "Retry-After" in err.headers:  # rate_limited: when to try again (seconds)
        meta.append(("retry-after", err.headers["Retry-After"]))
    context.set_trailing_metadata(tuple(meta))
    # grpc-message is %-encoded UTF-8: a lone surrogate escaped, as in a REST error body
    message = printable(err.message, MESSAGE_MAX)
    code = grpc.StatusCode.RESOURCE_EXHAUSTED if isinstance(err, TooLarge) else grpc_code(err)
    await context.abort(code, f"{field}: {message}" if field else message)


class Undecodable:
    """A request whose bytes are not the method's message (what the deserializer hands on
    instead of raising: gRPC would answer a raising deserializer UNKNOWN)."""

    def __init__(self, type_name: str, reason: str) -> None:
        self.type_name = type_name
        self.reason = reason

    def error(self, field: str | None = None) -> ApiError:
        return ApiError(400, "invalid_json", f"the request is not a valid {self.type_name}: {self.reason}", field)


class Oversized(Undecodable):
    """A request message over the limit, dropped unparsed (what the deserializer hands on)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__("message", f"{size} bytes")
        self.size, self.limit = size, limit

    def error(self, field: str | None = None) -> ApiError:
        return TooLarge(413, "payload_too_large", f"the request message is {self.size} bytes, over {self.limit} "
                        "bytes, the limit: split the batch", field)


def lenient(cls: type[M], limit: int = message_limits(DispatcherSettings.max_body_bytes)[0]
            ) -> Callable[[bytes], M | Undecodable]:
    """A deserializer of `cls` that returns an Undecodable for bytes that do not parse, and an
    Oversized for more than `limit` bytes."""

    def parse(data: bytes) -> M | Undecodable:
        if len(data) > limit:
            return Oversized(len(data), limit)
        try:
            return cls.FromString(data)
        except DecodeError as exc:
            return Undecodable(cls.DESCRIPTOR.full_name, str(exc))

    return parse


def add_pubsub(servicer: PubSubServicer, server: grpc.aio.Server, limit: int) -> None:
    """The generated add_PubSubServicer_to_server, with lenient deserializers that refuse a
    message over `limit` bytes."""
    kinds = {(False, False): grpc.unary_unary_rpc_method_handler, (True, False): grpc.stream_unary_rpc_method_handler,
             (False, True): grpc.unary_stream_rpc_method_handler}
    handlers = {m.name: kinds[m.client_streaming, m.server_streaming](
        getattr(servicer, m.name), request_deserializer=lenient(getattr(pb, m.input_type.name), limit),
        response_serializer=getattr(pb, m.output_type.name).SerializeToString)
        for m in pb.DESCRIPTOR.services_by_name["PubSub"].methods}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


def unary(fn: Callable[[S, Req, ServicerContext[Any, Resp]], Awaitable[Resp]]
          ) -> Callable[[S, Req | Undecodable, ServicerContext[Any, Resp]], Coroutine[Any, Any, Resp]]:
    """Run a unary handler, turning API, store and matcher errors into gRPC statuses."""

    @functools.wraps(fn)
    async def handler(self: S, request: Req | Undecodable, context: ServicerContext[Any, Resp]) -> Resp:
        try:
            if isinstance(request, Undecodable):
                raise request.error()
            return await fn(self, request, context)
        except Exception as exc:  # noqa: BLE001 - mapped or re-raised
            await abort(context, exc)

    return handler


def token(context: Context) -> str | None:
    return parse_bearer(metadata(context, "authorization"))


def seek_body(request: pb.SeekRequest) -> dict[str, Any]:
    """A Seek's point as the REST body: {"time": text or ms} or {"receipt": …} ({} for none)."""
    kind = request.WhichOneof("to")
    if kind is None:
        return {}
    return {"receipt" if kind == "receipt" else "time": getattr(request, kind)}


class PubSubServicer(pb_grpc.PubSubServicer):
    """The public bluedove.v1.PubSub service: each call handed to bluedove/dispatcher/operations.py."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.d = dispatcher

    @unary
    async def GetSpace(self, request: pb.GetSpaceRequest,
                       context: ServicerContext[pb.GetSpaceRequest, pb.Space]) -> pb.Space:
        return grpc_spaces.space_pb(self.d.space)

    @unary
    async def CreateSpace(self, request: pb.CreateSpaceRequest, context: Context) -> pb.SpaceInfo:
        return await grpc_spaces.create(self.d, request, metadata(context, "authorization"))

    @unary
    async def ListSpaces(self, request: pb.ListSpacesRequest, context: Context) -> pb.ListSpacesReply:
        return await grpc_spaces.listed(self.d)

    @unary
    async def GetSpaceInfo(self, request: pb.SpaceRef, context: Context) -> pb.SpaceInfo:
        return await grpc_spaces.get(self.d, request)

    @unary
    async def DeleteSpace(self, request: pb.SpaceRef, context: Context) -> pb.Empty:
        return await grpc_spaces.delete(self.d, request, metadata(context, "authorization"))

    @unary
    async def CreateQueue(self, request: pb.CreateQueueRequest,
                          context: ServicerContext[pb.CreateQueueRequest, pb.CreateQueueReply]) -> pb.CreateQueueReply:
        await key(self.d, context, SUBSCRIBE, None)  # a queue is in no space
        body = {"retain_acked_s": request.retain_acked_s} if request.retain_acked_s else None
        return pb.CreateQueueReply(**await ops.create_queue(self.d, body))

    @unary
    async def DeleteQueue(self, request: pb.DeleteQueueRequest,
                          context: ServicerContext[pb.DeleteQueueRequest, pb.Empty]) -> pb.Empty:
        await ops.delete_queue(self.d, request.queue, await managing(self.d, context, None))
        return pb.Empty()

    @unary
    async def Subscribe(self, request: pb.SubscribeRequest,
                        context: ServicerContext[pb.SubscribeRequest, pb.SubscribeReply]) -> pb.SubscribeReply:
        return await grpc_publish.subscribe(self.d, request, context)

    @unary
    async def Unsubscribe(self, request: pb.SubscriptionRef,
                          context: ServicerContext[pb.SubscriptionRef, pb.Empty]) -> pb.Empty:
        await ops.unsubscribe(self.d, request.id, await managing(self.d, context))
        return pb.Empty()

    @unary
    async def GetSubscription(self, request: pb.SubscriptionRef,
                              context: ServicerContext[pb.SubscriptionRef, pb.SubscriptionInfo]) -> pb.SubscriptionInfo:
        sub = await ops.get_subscription(self.d, request.id, token(context))
        return subscription_info(sub, (await self.d.paths.get(sub.get("space", DEFAULT_SPACE))).space)

    @unary
    async def UpdateSubscription(self, request: pb.UpdateSubscriptionRequest,
                                 context: ServicerContext[pb.UpdateSubscriptionRequest, pb.SubscriptionInfo]
                                 ) -> pb.SubscriptionInfo:
        body = {"predicates": filter_of(request.predicates, request.filter_json)}
        sub = await ops.update_subscription(self.d, request.id, body, await managing(self.d, context))
        return subscription_info(sub, (await self.d.paths.get(sub.get("space", DEFAULT_SPACE))).space)

    @unary
    async def Publish(self, request: pb.Message,
                      context: ServicerContext[pb.Message, pb.PublishReply]) -> pb.PublishReply:
        return await grpc_publish.publish(self.d, request, context)

    @unary
    async def PublishBatch(self, request: pb.PublishBatchRequest,
                           context: ServicerContext[pb.PublishBatchRequest, pb.PublishBatchReply]
                           ) -> pb.PublishBatchReply:
        return await grpc_publish.publish_batch(self.d, request, context)

    @unary
    async def PublishStream(self, request_iterator: AsyncIterator[pb.PublishStreamRequest | Undecodable],
                            context: ServicerContext[pb.PublishStreamRequest, pb.PublishBatchReply]
                            ) -> pb.PublishBatchReply:
        return await grpc_publish.publish_stream(self.d, request_iterator, context, Undecodable)

    @unary
    async def Poll(self, request: pb.PollRequest,
                   context: ServicerContext[pb.PollRequest, pb.PollReply]) -> pb.PollReply:
        msgs = await ops.poll(self.d, request.queue, token(context), request.max or ops.DEFAULT_POLL_MAX, request.wait)
        return pb.PollReply(messages=[delivery_pb(m) for m in msgs])

    @unary
    async def Ack(self, request: pb.AckRequest, context: ServicerContext[pb.AckRequest, pb.Empty]) -> pb.Empty:
        await ops.ack(self.d, request.queue, token(context), list(request.receipts))
        return pb.Empty()

    @unary
    async def Seek(self, request: pb.SeekRequest, context: ServicerContext[pb.SeekRequest, pb.SeekReply]
                   ) -> pb.SeekReply:
        return pb.SeekReply(**await seek_queue(self.d, request.queue, token(context), seek_body(request)))

    @unary
    async def SubscribeBatch(self, request: pb.SubscribeBatchRequest,
                             context: ServicerContext[pb.SubscribeBatchRequest, pb.SubscribeBatchReply]
                             ) -> pb.SubscribeBatchReply:
        return await grpc_publish.subscribe_batch(self.d, request, context)

    async def Listen(self, request: pb.ListenRequest | Undecodable,
                     context: ServicerContext[pb.ListenRequest, pb.Delivery]) -> AsyncIterator[pb.Delivery]:
        try:
            if isinstance(request, Undecodable):
                raise request.error()
            async for m in ops.listen(self.d, request.queue, token(context), request.max or ops.DEFAULT_LISTEN_MAX):
                yield delivery_pb(m)
        except Exception as exc:  # noqa: BLE001 - mapped or re-raised
            await abort(context, exc)


class ReadinessHealth(health.aio.HealthServicer):  # type: ignore[name-defined,misc]  # the stubs lack aio
    """grpc.health.v1, SERVING exactly while the dispatcher is ready (`ops.readiness`, as
    /readyz): asked at each Check and at the start of each Watch, not polled, so it never lags
    behind /readyz. A watcher also sees every change a Check observes."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        super().__init__()
        self.d = dispatcher

    async def refresh(self) -> None:
        ready = not await ops.readiness(self.d)
        status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE):
            await self.set(name, status)  # (ignored once shutting down: NOT_SERVING for good)

    async def Check(self, request: health_pb2.HealthCheckRequest,
                    context: ServicerContext[Any, Any]) -> health_pb2.HealthCheckResponse:
        await self.refresh()
        reply: health_pb2.HealthCheckResponse = await super().Check(request, context)
        return reply

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: ServicerContext[Any, Any]) -> None:
        await self.refresh()
        await super().Watch(request, context)  # streams its answers through `context`, returns nothing


class ApiSettings(tls.TlsFiles, Protocol):
    """What the public gRPC server reads of the settings: TLS, and the REST body cap its
    message limit follows."""

    @property
    def max_body_bytes(self) -> int: ...


class GrpcApi:
    """The gRPC server of one dispatcher: PubSub, health (SERVING while ready) and reflection."""

    def __init__(self, dispatcher: Dispatcher, host: str, port: int, settings: ApiSettings | None = None) -> None:
        """`settings`: TLS and the body cap (none: plain, and the default cap)."""
        self.d = dispatcher
        limit, read = message_limits(settings.max_body_bytes if settings else DispatcherSettings.max_body_bytes)
        # (a Poll answer has no limit: a client asking for 1,000 deliveries reads them all)
        self.server = grpc.aio.server(options=[("grpc.so_reuseport", 1), ("grpc.max_receive_message_length", read),
                                               *server_options()])  # for Listen streams that stay open
        add_pubsub(PubSubServicer(dispatcher), self.server, limit)
        self.health = ReadinessHealth(dispatcher)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection([SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME], self.server)
        # public: no client certificate
        self.port = tls.add_port(self.server, f"{host}:{port}", settings, internal=False)

    async def start(self) -> None:
        await self.health.refresh()  # both services known from the start (NOT_SERVING on shutdown)
        await self.server.start()

    async def stop(self, grace_s: float = 3.0) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)
