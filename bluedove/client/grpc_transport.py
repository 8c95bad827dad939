"""gRPC transports (bluedove.v1.PubSub), sync and asyncio, speaking the REST transports' JSON."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import grpc
from google.protobuf.message import Message as ProtoMessage

from bluedove.client.errors import BlueDoveError, api_error
from bluedove.client.grpc_messages import (
    delivery_json,
    message_pb,
    reply_json,
    seek_pb,
    space_json,
    subscribe_batch_pb,
    subscribe_pb,
    subscription_json,
    update_pb,
)
from bluedove.client.transport import Json
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc

STATUS = {
    # Cancelled by the server's grpc before the dispatcher saw it: a burst of calls past its
    # backlog of calls not yet taken is shed this way (docs/api.md, "gRPC"). Retry. (A call the
    # client cancels itself raises asyncio.CancelledError, or ends a blocking listen quietly.)
    grpc.StatusCode.CANCELLED: 503,
    grpc.StatusCode.INVALID_ARGUMENT: 422,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 503,
}


# How grpc itself refuses a request message longer than the server reads at all (docs/api.md,
# "Limits"): RESOURCE_EXHAUSTED with no code of ours. It is the API's payload_too_large.
REFUSED_UNREAD = "SERVER: Received message larger than max"


def _code(exc: grpc.RpcError) -> str | None:
    """The API's code for a status that carries none."""
    if STATUS.get(exc.code()) == 503:
        return "unavailable"
    too_large = exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and REFUSED_UNREAD in (exc.details() or "")
    return "payload_too_large" if too_large else None


def rpc_error(exc: grpc.RpcError) -> BlueDoveError:
    # grpc-stubs type the pairs as objects with .key and .value; they are (key, value) tuples (the
    # blocking call's namedtuples, aio.Metadata's pairs), and our keys are text, so their values str
    meta: dict[str, str] = dict(exc.trailing_metadata() or ())  # type: ignore[arg-type]
    code = meta.get("bluedove-error-code") or _code(exc)
    return api_error(STATUS.get(exc.code(), 500), code, exc.details() or exc.code().name,
                     meta.get("bluedove-error-field"))


Metadata = tuple[tuple[str, str], ...]
# a call's request: a message, or PublishStream's iterator of them
Request = ProtoMessage | Iterator[pb.PublishStreamRequest]


def _md(token: str | None, api_key: str | None = None, space: str | None = None) -> Metadata | None:
    """As over REST: the key in `authorization` and the queue token in `x-queue-token` for a
    managing call of a client given `api_key`; else the queue token in `authorization`. A
    call in a named space names it in `bluedove-space`."""
    named: Metadata = (("bluedove-space", space),) if space is not None else ()
    if api_key:
        return (("authorization", f"Bearer {api_key}"),) + ((("x-queue-token", token),) if token else ()) + named
    return ((("authorization", f"Bearer {token}"),) if token else ()) + named or None


def _target(url: str) -> str:
    return url.removeprefix("grpcs://").removeprefix("grpc://").rstrip("/")


# The public API asks for no client certificate (docs/security.md, "TLS"): grpcs:// trusts
# `tls_ca` (else the system's roots), grpc:// is plain.
def _credentials(tls_ca: str | None) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(root_certificates=Path(tls_ca).read_bytes() if tls_ca else None)


# A `Listen` stream can be quiet for hours, and a connection that died without a FIN (the
# dispatcher's host gone, a balancer or NAT that dropped it) would hold it silent forever: ping
# a quiet connection every 30 s and drop it after 20 s without an answer, so that the stream
# fails UNAVAILABLE and `listen()` reconnects. The dispatcher takes pings every 10 s or more
# (bluedove/dispatcher/grpc_options.py); another server may want fewer (docs/api.md, "gRPC").
KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 20_000

# A Poll answer is as large as the deliveries asked for (1,000 payloads of 256 KiB and more):
# read it whole, where grpc's default stops at 4 MiB, after the deliveries were handed out.
OPTIONS = [("grpc.max_receive_message_length", -1),
           ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS), ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
           ("grpc.http2.max_pings_without_data", 0)]  # keep pinging a quiet stream (grpc stops after 2)


def _channel(url: str, tls_ca: str | None) -> grpc.Channel:
    if url.startswith("grpcs://"):
        return grpc.secure_channel(_target(url), _credentials(tls_ca), options=OPTIONS)
    return grpc.insecure_channel(_target(url), options=OPTIONS)


def _aio_channel(url: str, tls_ca: str | None) -> grpc.aio.Channel:
    if url.startswith("grpcs://"):
        return grpc.aio.secure_channel(_target(url), _credentials(tls_ca), options=OPTIONS)
    return grpc.aio.insecure_channel(_target(url), options=OPTIONS)


# Messages per PublishStream element: a stream of batches costs the dispatcher what
# PublishBatch does per message, where a stream of single messages costs it several times more.
# (The SDK's calls carry at most 8 MiB, batches.py's BATCH_BYTES: so does each element.)
STREAM_ELEMENT = 200


def stream_elements(msgs: list[pb.Message]) -> Iterator[pb.PublishStreamRequest]:
    """A PublishStream's elements: the messages in batches of STREAM_ELEMENT."""
    return iter([pb.PublishStreamRequest(messages=msgs[i:i + STREAM_ELEMENT])
                 for i in range(0, len(msgs), STREAM_ELEMENT)])


class GrpcTransport:
    """The blocking gRPC transport: one channel to the PubSub API, calls answered as JSON."""

    def __init__(self, url: str, timeout_s: float, api_key: str | None = None, tls_ca: str | None = None) -> None:
        self.api_key = api_key
        self.channel = _channel(url, tls_ca)
        self.stub = pb_grpc.PubSubStub(self.channel)
        self.timeout_s = timeout_s

    def close(self) -> None:
        self.channel.close()

    def _call(self, name: str, req: Request, token: str | None = None, extra_s: float = 0.0,
              api_key: str | None = None, space: str | None = None) -> Any:
        """RPC `name`'s reply message (the generated stub is untyped: each caller names its type)."""
        try:
            return getattr(self.stub, name)(req, metadata=_md(token, api_key, space), timeout=self.timeout_s + extra_s)
        except grpc.RpcError as exc:
            raise rpc_error(exc) from None

    def _manage(self, name: str, req: Request, token: str | None = None, extra_s: float = 0.0,
                space: str | None = None) -> Any:
        """A call that carries the API key (publish, create, subscribe, delete); reads do not."""
        return self._call(name, req, token, extra_s, self.api_key, space)

    def space(self) -> Json:
        return space_json(self._call("GetSpace", pb.GetSpaceRequest()))

    def spaces(self) -> list[Json]:
        return [json.loads(i.info_json) for i in self._call("ListSpaces", pb.ListSpacesRequest()).spaces]

    def space_info(self, name: str) -> Json:
        return cast(Json, json.loads(self._call("GetSpaceInfo", pb.SpaceRef(name=name)).info_json))

    def create_space(self, spec: Json) -> Json:
        return cast(Json, json.loads(self._manage("CreateSpace", pb.CreateSpaceRequest(
            definition_json=json.dumps(spec))).info_json))

    def delete_space(self, name: str) -> None:
        self._manage("DeleteSpace", pb.SpaceRef(name=name))

    def create_queue(self, retain_acked_s: int = 0) -> Json:
        return reply_json(self._manage("CreateQueue", pb.CreateQueueRequest(retain_acked_s=retain_acked_s)))

    def delete_queue(self, queue: str, token: str) -> None:
        self._manage("DeleteQueue", pb.DeleteQueueRequest(queue=queue), token)

    def subscribe(self, body: Json, token: str | None, space: str | None = None) -> Json:
        return reply_json(self._manage("Subscribe", subscribe_pb(body), token, space=space))

    def subscribe_batch(self, bodies: list[Json], token: str | None, space: str | None = None) -> list[Json]:
        r = self._manage("SubscribeBatch", subscribe_batch_pb(bodies), token, extra_s=len(bodies) / 1000,
                          space=space)
        return [reply_json(x) for x in r.subscriptions]

    def get_subscription(self, sub_id: str, token: str) -> Json:
        return subscription_json(self._call("GetSubscription", pb.SubscriptionRef(id=sub_id), token))

    def unsubscribe(self, sub_id: str, token: str) -> None:
        self._manage("Unsubscribe", pb.SubscriptionRef(id=sub_id), token)

    def update_subscription(self, sub_id: str, body: Json, token: str) -> Json:
        return subscription_json(self._manage("UpdateSubscription", update_pb(sub_id, body), token))

    def publish(self, body: Json, space: str | None = None) -> str:
        reply: pb.PublishReply = self._manage("Publish", message_pb(body), space=space)
        return reply.id

    def publish_batch(self, bodies: list[Json], space: str | None = None) -> list[str]:
        msgs = [message_pb(b, f"messages[{i}].") for i, b in enumerate(bodies)]
        return list(self._manage("PublishBatch", pb.PublishBatchRequest(messages=msgs), space=space).ids)

    def publish_stream(self, bodies: list[Json], space: str | None = None) -> list[str]:
        msgs = [message_pb(b, f"messages[{i}].") for i, b in enumerate(bodies)]
        return list(self._manage("PublishStream", stream_elements(msgs), extra_s=len(msgs) / 1000, space=space).ids)

    def poll(self, queue: str, token: str, max_n: int, wait: float) -> list[Json]:
        r = self._call("Poll", pb.PollRequest(queue=queue, max=max_n, wait=wait), token, extra_s=wait)
        return [delivery_json(m) for m in r.messages]

    def ack(self, queue: str, token: str, receipts: list[str]) -> None:
        self._call("Ack", pb.AckRequest(queue=queue, receipts=receipts), token)

    def seek(self, queue: str, token: str, body: Json) -> int:
        return int(self._call("Seek", seek_pb(queue, body), token).redeliverable)

    def listen(self, queue: str, token: str, max_n: int) -> Iterator[Json]:
        """The push stream; ends when the dispatcher closes it (the caller reconnects)."""
        call = self.stub.Listen(pb.ListenRequest(queue=queue, max=max_n), metadata=_md(token))
        try:
            for m in call:
                yield delivery_json(m)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                raise rpc_error(exc) from None
        finally:
            call.cancel()


class AsyncGrpcTransport:
    """The asyncio gRPC transport; its channel is made on first use, inside the running loop."""

    def __init__(self, url: str, timeout_s: float, api_key: str | None = None, tls_ca: str | None = None) -> None:
        self.api_key = api_key
        self.url = url
        self.tls_ca = tls_ca
        self.timeout_s = timeout_s
        self._channel: grpc.aio.Channel | None = None

    @property
    def stub(self) -> pb_grpc.PubSubStub:
        if self._channel is None:  # made on first use, inside the running loop
            self._channel = _aio_channel(self.url, self.tls_ca)
            self._stub = pb_grpc.PubSubStub(self._channel)
        return self._stub

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(None)  # no grace: calls still running are cancelled

    async def _call(self, name: str, req: Request, token: str | None = None, extra_s: float = 0.0,
                    api_key: str | None = None, space: str | None = None) -> Any:
        try:
            return await getattr(self.stub, name)(req, metadata=_md(token, api_key, space),
                                                  timeout=self.timeout_s + extra_s)
        except grpc.RpcError as exc:
            raise rpc_error(exc) from None

    async def _manage(self, name: str, req: Request, token: str | None = None, extra_s: float = 0.0,
                      space: str | None = None) -> Any:
        """A call that carries the API key (publish, create, subscribe, delete); reads do not."""
        return await self._call(name, req, token, extra_s, self.api_key, space)

    async def space(self) -> Json:
        return space_json(await self._call("GetSpace", pb.GetSpaceRequest()))

    async def spaces(self) -> list[Json]:
        return [json.loads(i.info_json) for i in (await self._call("ListSpaces", pb.ListSpacesRequest())).spaces]

    async def space_info(self, name: str) -> Json:
        return cast(Json, json.loads((await self._call("GetSpaceInfo", pb.SpaceRef(name=name))).info_json))

    async def create_space(self, spec: Json) -> Json:
        return cast(Json, json.loads((await self._manage("CreateSpace", pb.CreateSpaceRequest(
            definition_json=json.dumps(spec)))).info_json))

    async def delete_space(self, name: str) -> None:
        await self._manage("DeleteSpace", pb.SpaceRef(name=name))

    async def create_queue(self, retain_acked_s: int = 0) -> Json:
        return reply_json(await self._manage("CreateQueue", pb.CreateQueueRequest(retain_acked_s=retain_acked_s)))

    async def delete_queue(self, queue: str, token: str) -> None:
        await self._manage("DeleteQueue", pb.DeleteQueueRequest(queue=queue), token)

    async def subscribe(self, body: Json, token: str | None, space: str | None = None) -> Json:
        return reply_json(await self._manage("Subscribe", subscribe_pb(body), token, space=space))

    async def subscribe_batch(self, bodies: list[Json], token: str | None, space: str | None = None) -> list[Json]:
        r = await self._manage("SubscribeBatch", subscribe_batch_pb(bodies), token, extra_s=len(bodies) / 1000,
                          space=space)
        return [reply_json(x) for x in r.subscriptions]

    async def get_subscription(self, sub_id: str, token: str) -> Json:
        return subscription_json(await self._call("GetSubscription", pb.SubscriptionRef(id=sub_id), token))

    async def unsubscribe(self, sub_id: str, token: str) -> None:
        await self._manage("Unsubscribe", pb.SubscriptionRef(id=sub_id), token)

    async def update_subscription(self, sub_id: str, body: Json, token: str) -> Json:
        return subscription_json(await self._manage("UpdateSubscription", update_pb(sub_id, body), token))

    async def publish(self, body: Json, space: str | None = None) -> str:
        reply: pb.PublishReply = await self._manage("Publish", message_pb(body), space=space)
        return reply.id

    async def publish_batch(self, bodies: list[Json], space: str | None = None) -> list[str]:
        msgs = [message_pb(b, f"messages[{i}].") for i, b in enumerate(bodies)]
        return list((await self._manage("PublishBatch", pb.PublishBatchRequest(messages=msgs), space=space)).ids)

    async def publish_stream(self, bodies: list[Json], space: str | None = None) -> list[str]:
        msgs = [message_pb(b, f"messages[{i}].") for i, b in enumerate(bodies)]
        return list((await self._manage("PublishStream", stream_elements(msgs), extra_s=len(msgs) / 1000,
                                        space=space)).ids)

    async def poll(self, queue: str, token: str, max_n: int, wait: float) -> list[Json]:
        r = await self._call("Poll", pb.PollRequest(queue=queue, max=max_n, wait=wait), token, extra_s=wait)
        return [delivery_json(m) for m in r.messages]

    async def ack(self, queue: str, token: str, receipts: list[str]) -> None:
        await self._call("Ack", pb.AckRequest(queue=queue, receipts=receipts), token)

    async def seek(self, queue: str, token: str, body: Json) -> int:
        return int((await self._call("Seek", seek_pb(queue, body), token)).redeliverable)

    async def listen(self, queue: str, token: str, max_n: int) -> AsyncIterator[Json]:
        call = self.stub.Listen(pb.ListenRequest(queue=queue, max=max_n), metadata=_md(token))
        try:
            async for m in call:
                yield delivery_json(m)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                raise rpc_error(exc) from None
        finally:
            call.cancel()
