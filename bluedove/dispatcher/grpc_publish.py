"""The gRPC calls that publish or subscribe in a space: Publish, PublishBatch, PublishStream,
Subscribe and SubscribeBatch, for bluedove/dispatcher/grpc_api.py's servicer.

A call names its space in the metadata `bluedove-space` (none: `default`), as the REST routes
do in their path: the same check of the name (422, 404, 503 while its table is laid out), and
then the same operations in that space's path (bluedove/dispatcher/space_paths.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from grpc.aio import ServicerContext

from bluedove.core.apikeys import PUBLISH, SUBSCRIBE, KeyRecord
from bluedove.core.errors import ApiError
from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.dispatcher import operations as ops
from bluedove.dispatcher.auth import caller, queue_token
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.grpc_messages import metadata, replay_pb, subscription_json
from bluedove.dispatcher.publish.decode import Batch
from bluedove.dispatcher.space_paths import SpacePath
from bluedove.v1 import pubsub_pb2 as pb

Context = ServicerContext[Any, Any]
SPACE_HEADER = "bluedove-space"


async def path_of(d: Dispatcher, context: Context) -> SpacePath:
    """The path of the call's space (`bluedove-space`, `default` without one)."""
    return await d.paths.get(metadata(context, SPACE_HEADER) or DEFAULT_SPACE)


async def key(d: Dispatcher, context: Context, scope: str, space: str | None = DEFAULT_SPACE) -> KeyRecord | None:
    """The call's API key when keys are on (None when off): 401 / 403 as over REST. A queue's
    calls are in no space (`space` None)."""
    return await caller(d.auth, metadata(context, "authorization"), scope, space)


async def managing(d: Dispatcher, context: Context, space: str | None = DEFAULT_SPACE) -> str | None:
    """A managing call's queue token, once its API key (when keys are on) is checked."""
    await key(d, context, SUBSCRIBE, space)
    return queue_token(d.auth, metadata(context, "authorization"), metadata(context, "x-queue-token"))


async def publish(d: Dispatcher, request: pb.Message, context: Context) -> pb.PublishReply:
    p = await path_of(d, context)
    k = await key(d, context, PUBLISH, p.name)
    size = request.ByteSize() if k or p.quotas else 0
    ids = await ops.publish(d, lambda: p.decoder.messages([request], None), size, k, p)
    return pb.PublishReply(id=ids[0])


async def publish_batch(d: Dispatcher, request: pb.PublishBatchRequest, context: Context) -> pb.PublishBatchReply:
    p = await path_of(d, context)
    k = await key(d, context, PUBLISH, p.name)
    size = request.ByteSize() if k or p.quotas else 0
    ids = await ops.publish(d, lambda: p.decoder.pb_batch(request.messages), size, k, p)
    return pb.PublishBatchReply(ids=ids)


async def publish_stream(d: Dispatcher, elements: AsyncIterator[Any], context: Context,
                         undecodable: type[Any]) -> pb.PublishBatchReply:
    """PublishStream: each element a message or a batch, decoded as it comes; an element that
    did not decode (an `undecodable`) ends the call naming its index."""
    p = await path_of(d, context)
    k = await key(d, context, PUBLISH, p.name)

    async def batches() -> AsyncIterator[Batch]:
        i = 0  # messages so far: an error names messages[i] counted over the whole stream
        async for el in elements:
            if isinstance(el, undecodable):
                raise el.error(f"messages[{i}]")
            ops.gate(d, p)  # a full dispatcher refuses before decoding, as for every publish
            if el.messages:
                if el.attributes or el.values or el.payload or el.id:
                    raise ApiError(422, "invalid_message", "a stream element carries one message or a batch "
                                   "in `messages`, not both", f"messages[{i}]")
                batch = p.decoder.messages(el.messages, "messages", i)
            else:
                batch = p.decoder.messages([el], "messages", i)
            # over the space's quota or the key's rate: this element and what follows are not sent
            ops.admit(d, k, len(batch), el.ByteSize() if k or p.quotas else 0, p)
            i += len(batch)
            yield batch

    return pb.PublishBatchReply(ids=await ops.publish_stream(d, batches(), k, p))


async def subscribe(d: Dispatcher, request: pb.SubscribeRequest, context: Context) -> pb.SubscribeReply:
    p = await path_of(d, context)
    tok = await managing(d, context, p.name)
    out = await ops.subscribe(d, subscription_json(request), tok, p)
    return pb.SubscribeReply(id=out["id"], queue=out["queue"], token=out.get("token", ""),
                             replay=replay_pb(out.get("replay")))


async def subscribe_batch(d: Dispatcher, request: pb.SubscribeBatchRequest,
                          context: Context) -> pb.SubscribeBatchReply:
    p = await path_of(d, context)
    tok = await managing(d, context, p.name)
    items = request.subscriptions
    body = {"subscriptions": [subscription_json(r, f"subscriptions[{i}].") for i, r in enumerate(items)]}
    return pb.SubscribeBatchReply(subscriptions=[pb.SubscribeReply(id=s["id"], queue=s["queue"],
                                                                   token=s.get("token", ""))
                                                 for s in await ops.subscribe_batch(d, body, tok, p)])
