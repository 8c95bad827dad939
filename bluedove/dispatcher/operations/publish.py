"""The one publish path of every transport: REST single and batch, gRPC Publish, PublishBatch
and PublishStream all go through `publish` (or, a stream, `publish_stream`).

In order: the cheapest refusals before anything is decoded (`gate`: a full dispatcher's 503, a
space's quota that would not admit even one message of the request's bytes), the transport's
decode, the key's rate limits (`admit`), then the forwarder, which keeps its own bound on the
messages under way. Ids and stored bodies are made once per batch (`outgoing`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import cast

import numpy as np

from bluedove.core.apikeys import KeyRecord
from bluedove.core.wire import bodies, iso_time, new_ids, typed_bodies
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.publish.decode import Batch
from bluedove.dispatcher.publish.forwarder import Outgoing
from bluedove.dispatcher.space_paths import SpacePath


def gate(d: Dispatcher, path: SpacePath | None = None, size: int | None = None) -> None:
    """Before decoding: 503 when the space's forwarder already holds its bound of messages under
    way; with the request's `size` in bytes, 429 when the space's quotas would not admit one
    message of that size (a space flooding past its quota costs its dispatcher no decoding)."""
    p = path or d.paths.default
    if p.forwarder.full():
        p.forwarder.refuse()
    if size is not None and p.quotas is not None:
        p.quotas.check(1, size, d.share)


async def publish(d: Dispatcher, decode: Callable[[], Batch], size: int, key: KeyRecord | None = None,
                  path: SpacePath | None = None) -> list[str]:
    """Gate, decode (the transport's `decode`), admit `size` bytes under the space's quotas and
    the key's rates, forward in the space of `path` (None: the default space); the ids once
    every message is stored."""
    gate(d, path, size)
    batch = decode()
    admit(d, key, len(batch), size, path)
    return await publish_parsed(d, batch, key, path)


def outgoing(p: SpacePath, batch: Batch, published: float, key_id: str | None = None) -> Outgoing:
    """Validated messages with their ids (ours where the publisher gave none) and stored bodies
    (a typed space's with its attributes' texts, bluedove/core/wire.py `typed_bodies`).

    With a key (auth on), a publisher-given id travels to the matchers as `<key id>/<id>`, so
    its dedup marks are the key's own: two keys using the same id both deliver. The body, and
    the id answered, stay the publisher's (an id never holds `/`, so no two keys' ids meet).
    A named space's bodies begin with its name (`"space"`), as its deliveries show it."""
    ids = batch.ids
    missing = [i for i, mid in enumerate(ids) if mid is None]
    client = np.ones(len(ids), dtype=np.bool_)
    if missing:
        ids = list(ids)
        for i, mid in zip(missing, new_ids(len(missing))):
            ids[i] = mid
        client[missing] = False
    filled = cast(list[str], ids)  # every None replaced by a new id
    ids_b = [i.encode() for i in filled]
    wire = ids_b
    if key_id is not None:
        scope = key_id.encode() + b"/"
        wire = [scope + i if c else i for i, c in zip(ids_b, client.tolist())]
    at = iso_time(published)
    stored = bodies(p.body_template, ids_b, batch.points, batch.payloads, at) if batch.attributes is None \
        else typed_bodies(ids_b, batch.attributes, batch.payloads, at)  # a typed space: its attributes' texts
    if p.stamp:
        stored = [p.stamp + b[1:] for b in stored]
    return Outgoing(filled, wire, batch.points, stored, client)


async def publish_parsed(d: Dispatcher, batch: Batch, key: KeyRecord | None = None,
                         path: SpacePath | None = None) -> list[str]:
    """Forward validated messages (published with API key `key`, None when auth is off);
    returns their ids once all are stored. The last hour's series and the sample are the
    default space's (a named space's messages count in the metrics alone)."""
    p = path or d.paths.default
    now = time.time()
    out = outgoing(p, batch, now, key.id if key is not None else None)
    t0 = time.perf_counter()
    try:
        await p.forwarder.publish(out)
    except Exception:
        d.metrics.space(p.name).publish_failures.inc(len(out))
        raise
    took = time.perf_counter() - t0
    m = d.metrics.space(p.name)
    m.publish_seconds.observe(took)
    m.published.inc(len(out))
    if p.named:
        return out.ids
    d.series.on_publish(batch.points, took)
    if d.sampler is not None:
        d.sampler.offer(now, batch.points, batch.attributes)
    return out.ids


def admit(d: Dispatcher, key: KeyRecord | None, n_msgs: int, n_bytes: int, path: SpacePath | None = None) -> None:
    """The space's quotas, then the key's rates: a 429 from either takes nothing from both."""
    quotas = path.quotas if path is not None else None
    if quotas is not None:
        quotas.check(n_msgs, n_bytes, d.share)
    if key is not None:
        assert d.auth is not None  # a key comes only from d.auth: auth is on
        d.auth.admit(key, n_msgs, n_bytes)
    if quotas is not None:
        quotas.take(n_msgs, n_bytes)


async def publish_rest(d: Dispatcher, raw: bytes, key: KeyRecord | None = None,
                       path: SpacePath | None = None) -> str:
    """`POST /v1/messages` (or a space's): the body's bytes."""
    p = path or d.paths.default
    return (await publish(d, lambda: p.decoder.one(raw), len(raw), key, p))[0]


async def publish_rest_batch(d: Dispatcher, raw: bytes, key: KeyRecord | None = None,
                             path: SpacePath | None = None) -> list[str]:
    """`POST /v1/messages:batch` (or a space's): the body's bytes, decoded and checked whole."""
    p = path or d.paths.default
    return await publish(d, lambda: p.decoder.batch(raw), len(raw), key, p)


async def publish_stream(d: Dispatcher, batches: AsyncIterator[Batch], key: KeyRecord | None = None,
                         path: SpacePath | None = None) -> list[str]:
    """Publish a stream of validated batches as they arrive; returns every id in order.

    One batch is in flight at a time; what arrives meanwhile is sent as one next batch (up to
    max_batch messages or more, never split), so batches grow with the rate. A bad message
    ends the call (the iterator raises): it and what follows are not published, batches
    already sent are."""
    sent: list[asyncio.Task[list[str]]] = []
    waiting: list[Batch] = []
    held = 0
    p = path or d.paths.default
    k = p.space.k

    def flush() -> None:
        nonlocal waiting, held
        if waiting:
            sent.append(asyncio.ensure_future(publish_parsed(d, Batch.concat(waiting, k), key, p)))
            waiting, held = [], 0

    try:
        async for batch in batches:
            waiting.append(batch)
            held += len(batch)
            if not sent or sent[-1].done() or held >= d.s.max_batch:
                if sent:
                    await sent[-1]
                flush()
        flush()
        return [mid for ids in await asyncio.gather(*sent) for mid in ids]
    except BaseException:
        await asyncio.gather(*sent, return_exceptions=True)
        raise
