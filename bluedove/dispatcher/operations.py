"""The public API's operations, one function each, shared by the REST routes and the gRPC servicer;
and the operational ones, readiness and the cluster view."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import numpy as np
from redis.exceptions import ResponseError

from bluedove.core.errors import ApiError, not_found, unauthorized
from bluedove.core.model import build_subscription, parse_subscription_batch, parse_subscription_request
from bluedove.core.queue_bounds import parse_queue_request
from bluedove.core.wire import bodies, iso_time, new_ids
from bluedove.dispatcher.last_hour import member_stats
from bluedove.dispatcher.publish.decode import Batch
from bluedove.dispatcher.publish.forwarder import Outgoing
from bluedove.gossip.state import DISPATCHER, MATCHER
from bluedove.store.ids import first_invalid_receipt, new_id
from bluedove.store.store import BadToken, LimitExceeded, QueueMissing

log = logging.getLogger("bluedove.dispatcher")

# How long one store read of a Listen stream blocks before it looks at its queue again.
LISTEN_POLL_S = 5.0
DEFAULT_POLL_MAX = 10
DEFAULT_LISTEN_MAX = 100
# How long readiness waits for the store to answer a ping.
READY_PING_S = 2.0


def check_range(name: str, v: float, lo: float, hi: float) -> float:
    """`v` if lo <= v <= hi, else 422 invalid_parameter naming `name` (NaN fails too)."""
    if not lo <= v <= hi:
        raise ApiError(422, "invalid_parameter", f"{name} must be a number from {lo:g} to {hi:g}", name)
    return v


async def require_queue_token(d, queue: str, token: str | None) -> None:
    if not await d.store.check_token(queue, token):
        raise unauthorized()


# -- operations -------------------------------------------------------------------------------
async def readiness(d) -> list[str]:
    """What keeps the dispatcher from serving, none when ready: it needs a segment table and the
    store. /readyz and gRPC health (SERVING while ready) both ask this, each time."""
    problems = []
    if d.cluster.table is None:
        problems.append("no segment table")
    try:
        await asyncio.wait_for(d.store.ping(), READY_PING_S)
    except Exception as exc:  # noqa: BLE001 - reported
        problems.append(f"store unreachable: {exc or type(exc).__name__}")
    return problems


def _member_view(view, table, m: str, now: float, extra: dict) -> dict:
    names = table.space.names
    segs = table.segments_of(m)
    g = view.gossip.get(m)
    return {
        "id": m,
        "role": MATCHER,
        "address": view.address(m),
        "status": view.status(m, now),
        "generation": g.generation if g else None,
        # An alive member that owns no segment (restarted after a takeover) is idle
        # until a split gives it some.
        "idle": not segs,
        "segments": {names[i]: [lo, hi] for i, (lo, hi) in sorted(segs.items())},
        "subscriptions": {names[i]: view.reports[(m, i)].subs for i in range(len(names)) if (m, i) in view.reports},
        "load": {
            names[i]: {"lambda": round(r.lam, 3), "mu": round(r.mu, 3), "q": r.q, "matched": r.matched_total,
                       "congestion": round(r.lam / r.mu, 6) if r.mu > 0 else None}
            for i in range(len(names)) if (r := view.reports.get((m, i))) is not None
        },
        "cpu": extra.get("cpu"),  # from the matcher's stats entry in the store (bluedove/matcher/series.py)
        "rss_bytes": extra.get("rss_bytes"),
    }


async def _dispatchers(d) -> list[dict]:
    """Every dispatcher gossip or the store knows of: its status and gossip address as gossip
    sees it, its HTTP address, table epoch and adoption time as it registered them."""
    registered = {r["id"]: r for r in await d.store.dispatchers()}
    gossip = d.cluster.dispatchers
    out = []
    for i in sorted(set(registered) | set(gossip)):
        r, g = registered.get(i, {}), gossip.get(i)
        out.append({"id": i, "role": DISPATCHER, "address": r.get("address"),
                    "gossip_address": g.address if g else None, "status": g.status if g else None,
                    "generation": g.generation if g else None, "epoch": r.get("epoch"),
                    "adopted_at": r.get("adopted_at")})
    return out


async def cluster_view(d) -> dict:
    """GET /v1/cluster: the table's epoch, each member as this dispatcher sees it, the
    dispatchers, and the autoscaler with its events."""
    view = d.cluster
    table = view.table
    now = time.monotonic()
    members = []
    if table is not None:
        extra = await member_stats(d)  # CPU and RSS, from the matchers' stats entries
        members = [_member_view(view, table, m, now, extra.get(m, {})) for m in view.known()]
    return {
        "epoch": table.epoch if table else 0,
        "space": d.space.to_json(),
        "policy": d.s.policy,
        "partition": d.s.partition,
        "members": members,
        "dispatchers": await _dispatchers(d),
        "autoscaler": {**(await d.store.get_autoscaler() or {"enabled": False, "min": None, "max": None}),
                       "events": await d.store.events()},
    }


# -- queues ------------------------------------------------------------------------------------
async def create_queue(d, body: Any = None, token: str | None = None) -> dict:
    """A new queue with the bounds `body` asks for (none: the dispatcher's defaults). A
    dead-letter queue must exist and `token` must open it: only its owner sends it deliveries."""
    bounds = parse_queue_request(body, d.store.default_bounds())
    if bounds.dead_letter_queue is not None and not await d.store.check_token(bounds.dead_letter_queue, token):
        raise ApiError(401, "unauthorized", "dead_letter.queue must be a queue the bearer token opens",
                       "dead_letter.queue")
    queue, created = await d.store.create_queue(bounds)
    return {"queue": queue, "token": created}


async def queue_info(d, queue: str, token: str | None) -> dict:
    """GET /v1/queues/{queue}: its bounds, depth and counters, for its token's holder."""
    await require_queue_token(d, queue, token)
    return await d.store.queue_info(queue)


async def delete_queue(d, queue: str, token: str | None) -> None:
    await require_queue_token(d, queue, token)
    removed = await d.store.delete_queue(queue)
    await d.broadcast_removals(removed)


# -- subscriptions -----------------------------------------------------------------------------
def _limit_error(exc: LimitExceeded, field: str) -> ApiError:
    return ApiError(429, "limit_exceeded", f"a queue holds at most {exc.args[0]} subscriptions", field)


async def subscribe(d, body: Any, token: str | None) -> dict:
    """Catalogue first, then every matcher mPartition names; returns {id, queue, token?}.
    The store write and the matcher calls share round trips with the subscribes under way
    (bluedove/dispatcher/subscriber.py)."""
    queue, predicates = parse_subscription_request(body)
    # Validate fully before touching anything: a bad request leaves no trace.
    sub = build_subscription(new_id(), queue or "-", predicates, d.space)
    created = None
    if queue is not None:
        await require_queue_token(d, queue, token)
    else:
        queue, created = await d.store.create_queue()
    sub = replace(sub, queue=queue)
    try:
        await d.subscriber.write(sub)
    except QueueMissing:  # deleted between the token check and now
        raise unauthorized() from None
    except LimitExceeded as exc:
        raise _limit_error(exc, "queue") from None
    await d.send_subscriptions([sub])
    d.metrics.subscriptions.inc()
    out = {"id": sub.id, "queue": queue}
    if created:
        out["token"] = created
    return out


def _batch_queue(items: list, token: str | None) -> str | None:
    """The one queue a batch's items name (None: none does). Items may name only the queue
    the bearer token opens, so a batch naming two queues is refused (401) before any lookup."""
    named = [(i, q) for i, (q, _) in enumerate(items) if q is not None]
    if not named:
        return None
    first = named[0][1]
    for i, q in named:
        if q != first:
            raise ApiError(401, "unauthorized", "the items of a batch may name one queue only: the one the bearer "
                                                "token opens", f"subscriptions[{i}].queue")
    return first


async def subscribe_batch(d, body: Any, token: str | None) -> list[dict]:
    """POST /v1/subscriptions:batch: every item validated first, then all stored or none.

    Items naming a queue must all name the queue the bearer token opens; each item without
    one gets a queue of its own (its token in the answer). The named queue's subscriptions
    are one atomic step against its limit; the new queues are created only once that step
    has succeeded, and a failure after it removes what was written (the removals are logged,
    so matchers that followed the log drop them too). Answers, like a single subscribe, once
    every matcher has them: [{id, queue, token?}] in order."""
    items = parse_subscription_batch(body, d.space, d.s.max_batch)
    queue = _batch_queue(items, token)
    if queue is not None:
        await require_queue_token(d, queue, token)
    subs: list = [None] * len(items)
    tokens: dict[int, str] = {}
    named = [i for i, (q, _) in enumerate(items) if q is not None]
    unnamed = [i for i, (q, _) in enumerate(items) if q is None]
    for i in named:
        subs[i] = replace(items[i][1], id=new_id(), queue=queue)
    if named:
        try:
            await d.store.add_queue_subscriptions(queue, [subs[i].to_json() for i in named])
        except QueueMissing:  # deleted between the token check and now
            raise unauthorized() from None
        except LimitExceeded as exc:
            raise _limit_error(exc, f"subscriptions[{named[0]}].queue") from None
    made: list[tuple[str, str]] = []
    try:
        if unnamed:
            made = await d.store.create_queues(len(unnamed))
            for i, (q, t) in zip(unnamed, made):
                subs[i], tokens[i] = replace(items[i][1], id=new_id(), queue=q), t
            for i, x in zip(unnamed, await d.store.add_subscriptions_each([subs[i].to_json() for i in unnamed])):
                if isinstance(x, LimitExceeded):
                    raise _limit_error(x, f"subscriptions[{i}]")
                if isinstance(x, Exception):
                    raise x
    except BaseException:
        await _undo_batch(d, [(subs[i].id, queue) for i in named], [q for q, _ in made])
        raise
    await d.send_subscriptions(subs)
    d.metrics.subscriptions.inc(len(subs))
    return [{"id": s.id, "queue": s.queue, **({"token": tokens[i]} if i in tokens else {})} for i, s in enumerate(subs)]


async def _undo_batch(d, written: list[tuple[str, str]], queues: list[str]) -> None:
    """Remove a failed batch's subscriptions of the named queue and the queues it created
    (with their subscriptions); best effort, as the store may be what failed."""
    try:
        await d.store.remove_subscriptions(written)
        await asyncio.gather(*(d.store.delete_queue(q) for q in queues))
    except Exception as exc:  # noqa: BLE001 - the batch's own error is what the client sees
        log.warning("could not undo a failed subscription batch: %r", exc)


async def get_subscription(d, sub_id: str, token: str | None) -> dict:
    """The subscription, if the token opens its queue: 401 without a valid token, 404 when
    the token is valid but names no such subscription of its queue."""
    queue = await d.store.queue_for_token(token)
    if queue is None:
        raise unauthorized()
    sub = await d.store.get_subscription(sub_id, queue)
    if sub is None:
        raise not_found("subscription")
    return sub


async def unsubscribe(d, sub_id: str, token: str | None) -> None:
    sub = await get_subscription(d, sub_id, token)
    if await d.store.remove_subscription(sub_id, sub["queue"]) is None:
        raise not_found("subscription")
    await d.broadcast_removals([sub_id])


# -- publishing --------------------------------------------------------------------------------
def outgoing(d, batch: Batch, published: float, key_id: str | None = None) -> Outgoing:
    """Validated messages with their ids (ours where the publisher gave none) and stored bodies.

    With a key (auth on), a publisher-given id travels to the matchers as `<key id>/<id>`, so
    its dedup marks are the key's own: two keys using the same id both deliver. The body, and
    the id answered, stay the publisher's (an id never holds `/`, so no two keys' ids meet)."""
    ids = batch.ids
    missing = [i for i, mid in enumerate(ids) if mid is None]
    client = np.ones(len(ids), dtype=np.bool_)
    if missing:
        ids = list(ids)
        for i, mid in zip(missing, new_ids(len(missing))):
            ids[i] = mid
        client[missing] = False
    ids_b = [i.encode() for i in ids]
    wire = ids_b
    if key_id is not None:
        scope = key_id.encode() + b"/"
        wire = [scope + i if c else i for i, c in zip(ids_b, client.tolist())]
    return Outgoing(ids, wire, batch.points,
                    bodies(d.body_template, ids_b, batch.points, batch.payloads, iso_time(published)), client)


async def publish_parsed(d, batch: Batch, key=None) -> list[str]:
    """Forward validated messages (published with API key `key`, None when auth is off);
    returns their ids once all are stored."""
    now = time.time()
    out = outgoing(d, batch, now, key.id if key is not None else None)
    t0 = time.perf_counter()
    try:
        await d.forwarder.publish(out)
    except Exception:
        d.metrics.publish_failures.inc(len(out))
        raise
    took = time.perf_counter() - t0
    d.metrics.publish_seconds.observe(took)
    d.series.on_publish(batch.points, took)
    d.metrics.published.inc(len(out))
    if d.sampler is not None:
        d.sampler.offer(now, batch.points)
    return out.ids


def admit(d, key, n_msgs: int, n_bytes: int) -> None:
    """The key's rate limits (429 taking nothing when over); nothing without a key."""
    if key is not None:
        d.auth.admit(key, n_msgs, n_bytes)


async def publish(d, raw: bytes, key=None) -> str:
    """`POST /v1/messages`: the body's bytes (refused before decoding when the forwarder is full)."""
    if d.forwarder.full():
        d.forwarder.refuse()
    batch = d.decoder.one(raw)
    admit(d, key, 1, len(raw))
    return (await publish_parsed(d, batch, key))[0]


async def publish_batch(d, raw: bytes, key=None) -> list[str]:
    """`POST /v1/messages:batch`: the body's bytes, decoded and checked whole first (refused
    whole before decoding when the forwarder is full: backpressure costs the least there)."""
    if d.forwarder.full():
        d.forwarder.refuse()
    batch = d.decoder.batch(raw)
    admit(d, key, len(batch), len(raw))
    return await publish_parsed(d, batch, key)


async def publish_stream(d, batches: AsyncIterator[Batch], key=None) -> list[str]:
    """Publish a stream of validated batches as they arrive; returns every id in order.

    One batch is in flight at a time; what arrives meanwhile is sent as one next batch (up to
    max_batch messages or more, never split), so batches grow with the rate. A bad message
    ends the call (the iterator raises): it and what follows are not published, batches
    already sent are."""
    sent: list[asyncio.Task] = []
    waiting: list[Batch] = []
    held = 0
    k = d.space.k

    def flush() -> None:
        nonlocal waiting, held
        if waiting:
            sent.append(asyncio.ensure_future(publish_parsed(d, Batch.concat(waiting, k), key)))
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


# -- receiving ---------------------------------------------------------------------------------
# Poll and ack check the token inside their one store call (the POLL and ACK scripts) rather
# than with a lookup of their own: a round trip less per request (docs/benchmarks.md,
# "Delivery"). A request that is also invalid has its token checked first, so that a wrong
# token is a 401 whatever else is wrong, as everywhere in the API.
async def poll(d, queue: str, token: str | None, max_n: float, wait: float) -> list[dict]:
    return json.loads(await poll_json(d, queue, token, max_n, wait))["messages"]


async def poll_json(d, queue: str, token: str | None, max_n: float, wait: float) -> str:
    """The REST body `{"messages": [...]}`, as the store spliced it from the stored JSON."""
    try:
        max_n = int(check_range("max", max_n, 1, 1000))
        wait = check_range("wait", wait, 0, d.s.max_wait_s)
    except ApiError:
        await require_queue_token(d, queue, token)  # a wrong token is a 401 first
        raise
    try:
        n, body = await d.store.poll_json(queue, max_n, wait, stop=d.closing, token=_given(token))
    except BadToken:
        raise unauthorized() from None
    except ResponseError as exc:  # NOGROUP: the queue was deleted while we waited (as in listen)
        if "NOGROUP" not in str(exc):
            raise
        raise unauthorized() from None
    d.metrics.polled.inc(n)
    return body


def _given(token: str | None) -> str:
    """The token to check in the store; no token at all is a 401 without asking it."""
    if token is None:
        raise unauthorized()
    return token


def _ack_error(receipts: Any, unknown_field: str | None) -> ApiError | None:
    if unknown_field is not None:
        return ApiError(422, "invalid_ack", f"unknown field {unknown_field!r}", unknown_field)
    if not isinstance(receipts, list):
        return ApiError(422, "invalid_ack", "the body must be {\"receipts\": [...]}", "receipts")
    i = first_invalid_receipt(receipts)
    if i is not None:
        return ApiError(422, "invalid_ack", f"not a receipt: {receipts[i]!r}", f"receipts[{i}]")
    return None


async def ack(d, queue: str, token: str | None, receipts: Any, unknown_field: str | None = None) -> None:
    """Ack `receipts`; `unknown_field`, a field of the REST body other than receipts, is an
    error once the token is checked (like a bad receipt)."""
    error = _ack_error(receipts, unknown_field)
    if error is not None:
        await require_queue_token(d, queue, token)
        raise error
    try:
        acked = await d.store.ack(queue, receipts, token=_given(token))
    except BadToken:
        raise unauthorized() from None
    d.metrics.acked.inc(acked)


async def listen(d, queue: str, token: str | None, max_n: float) -> AsyncIterator[dict]:
    """Deliveries of `queue` as they arrive, until the dispatcher closes or the queue goes.

    Each read takes at most `max_n` from the store; the consumer's pace (gRPC flow control)
    decides when the next read happens, so what a slow listener cannot take stays queued."""
    await require_queue_token(d, queue, token)
    max_n = int(check_range("max", max_n, 1, 1000))
    while not d.closing.is_set():
        try:
            msgs = await d.store.poll(queue, max_n, LISTEN_POLL_S, stop=d.closing)
        except ResponseError as exc:  # NOGROUP: the queue was deleted under the stream
            if "NOGROUP" not in str(exc):
                raise
            raise unauthorized() from None
        d.metrics.polled.inc(len(msgs))
        for m in msgs:
            yield m
        if not msgs:
            await require_queue_token(d, queue, token)  # the queue may have been deleted
