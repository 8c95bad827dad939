"""Subscriptions: subscribe (one, or a batch all or none), look one up, change its predicates, unsubscribe."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from bluedove.core.errors import ApiError, echo, not_found, unauthorized
from bluedove.core.model import Subscription, build_subscription, parse_subscription_batch, parse_subscription_request
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.operations.common import require_queue_token
from bluedove.dispatcher.operations.replays import replay_from, replay_view, start_replay
from bluedove.dispatcher.space_paths import SpacePath, no_space
from bluedove.store.ids import new_id
from bluedove.store.space_entry import SpaceGone
from bluedove.store.store import LimitExceeded, QueueMissing

log = logging.getLogger("bluedove.dispatcher")


def _limit_error(exc: LimitExceeded, field: str) -> ApiError:
    return ApiError(429, "limit_exceeded", f"a queue holds at most {exc.args[0]} subscriptions", field)


async def subscribe(d: Dispatcher, body: Any, token: str | None, path: SpacePath | None = None) -> dict[str, Any]:
    """Catalogue first, then every matcher mPartition names, in the space of `path` (None: the
    default space); returns {id, queue, token?}. The store write and the matcher calls share
    round trips with the subscribes under way (bluedove/dispatcher/subscriber.py)."""
    p = path or d.paths.default
    body, replay_ms = replay_from(body, p)
    queue, predicates = parse_subscription_request(body)
    # Validate fully before touching anything: a bad request leaves no trace.
    sub = build_subscription(new_id(), queue or "-", predicates, p.space)
    created = None
    if queue is not None:
        await require_queue_token(d, queue, token)
    if p.quotas is not None:  # before a queue is made: a refusal leaves nothing
        await p.quotas.check_subscriptions(1)
    if queue is None:
        queue, created = await d.store.create_queue()
    sub = sub.named(sub.id, queue)
    try:
        await p.subscriber.write(sub)
    except QueueMissing:  # deleted between the token check and now
        raise unauthorized() from None
    except LimitExceeded as exc:
        raise _limit_error(exc, "queue") from None
    except SpaceGone:  # deleted meanwhile: the queue made for it goes too
        if created:
            await d.store.delete_queue(queue)
        raise no_space(p.name) from None
    sent_at = time.monotonic()
    missed = await p.subscriber.send([sub], replay_ms or 0)
    out: dict[str, Any] = {"id": sub.id, "queue": queue}
    if replay_ms is not None:
        out["replay"] = await start_replay(d, p, sub, replay_ms, missed, sent_at, created is not None)
    d.metrics.space(p.name).subscriptions.inc()
    if created:
        out["token"] = created
    return out


def _batch_queue(items: list[tuple[str | None, Subscription]], token: str | None) -> str | None:
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


async def subscribe_batch(d: Dispatcher, body: Any, token: str | None,
                          path: SpacePath | None = None) -> list[dict[str, str]]:
    """POST /v1/subscriptions:batch: every item validated first, then all stored or none.

    Items naming a queue must all name the queue the bearer token opens; each item without
    one gets a queue of its own (its token in the answer). The named queue's subscriptions
    are one atomic step against its limit; the new queues are created only once that step
    has succeeded, and a failure after it removes what was written (the removals are logged,
    so matchers that followed the log drop them too). Answers, like a single subscribe, once
    every matcher has them: [{id, queue, token?}] in order."""
    p = path or d.paths.default
    items = parse_subscription_batch(body, p.space, d.s.max_batch)
    queue = _batch_queue(items, token)
    subs = [sub for _, sub in items]  # each given its id and queue below
    tokens: dict[int, str] = {}
    named = [i for i, (q, _) in enumerate(items) if q is not None]
    unnamed = [i for i, (q, _) in enumerate(items) if q is None]
    if queue is not None:
        await require_queue_token(d, queue, token)
    if p.quotas is not None:
        await p.quotas.check_subscriptions(len(items))
    if queue is not None:  # the items in `named` all name it
        for i in named:
            subs[i] = items[i][1].named(new_id(), queue)
        try:
            await d.store.add_queue_subscriptions(queue, [subs[i].to_json() for i in named], p.at)
        except QueueMissing:  # deleted between the token check and now
            raise unauthorized() from None
        except LimitExceeded as exc:
            raise _limit_error(exc, f"subscriptions[{named[0]}].queue") from None
        except SpaceGone:
            raise no_space(p.name) from None
    made: list[tuple[str, str]] = []
    try:
        if unnamed:
            made = await d.store.create_queues(len(unnamed))
            for i, (q, t) in zip(unnamed, made):
                subs[i], tokens[i] = items[i][1].named(new_id(), q), t
            for i, x in zip(unnamed, await d.store.add_subscriptions_each([subs[i].to_json() for i in unnamed],
                                                                          p.at)):
                if isinstance(x, LimitExceeded):
                    raise _limit_error(x, f"subscriptions[{i}]")
                if isinstance(x, SpaceGone):
                    raise no_space(p.name)
                if isinstance(x, Exception):
                    raise x
    except BaseException:
        await _undo_batch(d, [(subs[i].id, subs[i].queue) for i in named], [q for q, _ in made], p)
        raise
    await p.subscriber.send(subs)
    d.metrics.space(p.name).subscriptions.inc(len(subs))
    return [{"id": s.id, "queue": s.queue, **({"token": tokens[i]} if i in tokens else {})} for i, s in enumerate(subs)]


async def _undo_batch(d: Dispatcher, written: list[tuple[str, str]], queues: list[str], p: SpacePath) -> None:
    """Remove a failed batch's subscriptions of the named queue and the queues it created
    (with their subscriptions); best effort, as the store may be what failed."""
    try:
        await d.store.remove_subscriptions(written, p.at)
        await asyncio.gather(*(d.store.delete_queue(q) for q in queues))
    except Exception as exc:  # noqa: BLE001 - the batch's own error is what the client sees
        log.warning("could not undo a failed subscription batch: %r", exc)


async def get_subscription(d: Dispatcher, sub_id: str, token: str | None) -> dict[str, Any]:
    """The subscription, if the token opens its queue: 401 without a valid token, 404 when
    the token is valid but names no such subscription of its queue. One of a named space says
    its `space`; one made with `replay_from`, its `replay`."""
    sub, p = await find_subscription(d, sub_id, token)
    replay = await replay_view(d, p, sub_id)
    return {**sub, **({"space": p.name} if p.named else {}), **({"replay": replay} if replay is not None else {})}


async def find_subscription(d: Dispatcher, sub_id: str, token: str | None) -> tuple[dict[str, Any], SpacePath]:
    """The stored subscription and the path of its space: the default space's catalogue first,
    then those of the named spaces its queue has entered (401, 404 as `get_subscription`)."""
    queue = await d.store.queue_for_token(token)
    if queue is None:
        raise unauthorized()
    sub = await d.store.get_subscription(sub_id, queue)
    if sub is not None:
        return sub, d.paths.default
    for name in await d.store.entered_spaces(queue):
        try:
            p = await d.paths.get(name)
        except ApiError:  # deleted (its subscriptions go with it), or not ready
            continue
        sub = await d.store.get_subscription(sub_id, queue, p.at)
        if sub is not None:
            return sub, p
    raise not_found("subscription")


def _new_predicates(body: Any) -> Any:
    """The predicates of a PUT /v1/subscriptions/{id} body, `{"predicates": ...}`: 422 naming
    the field for any other shape (a subscription keeps its id and its queue)."""
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_subscription", 'the body must be {"predicates": ...}', None)
    for name in sorted(body):
        if name in ("id", "queue"):
            raise ApiError(422, "invalid_subscription", f"{name} cannot change: the body holds the predicates only",
                           name)
        if name != "predicates":
            raise ApiError(422, "invalid_subscription", f"unknown field {echo(name)}", name)
    if "predicates" not in body:
        raise ApiError(422, "invalid_subscription", "predicates is required (use {} to match everything)",
                       "predicates")
    return body["predicates"]


def _stored(p: SpacePath, raw: dict[str, Any] | None) -> Subscription | None:
    """The version a replace took the place of, as stored; None if it cannot be read (the
    replace then goes to every matcher)."""
    try:
        return None if raw is None else Subscription.from_json(raw, p.space)
    except Exception:  # noqa: BLE001 - stored valid; the catalogue changed already, so this may not fail the call
        return None


async def update_subscription(d: Dispatcher, sub_id: str, body: Any, token: str | None) -> dict[str, Any]:
    """PUT /v1/subscriptions/{id}: the subscription's predicates replaced, if the token opens
    its queue (401 without a valid token, 404 when it names no such subscription of its
    queue, 422 for bad predicates: each before anything changes). The catalogue changes in
    one step, then every matcher that holds either version swaps them in one step; answered
    (the subscription, as GET shows it) once each has, so every message published afterwards
    is matched against the new predicates only (bluedove/dispatcher/subscriber.py)."""
    predicates = _new_predicates(body)
    current, p = await find_subscription(d, sub_id, token)  # the space the predicates are checked in
    sub = build_subscription(sub_id, current["queue"], predicates, p.space)
    try:
        out = await d.store.replace_subscription(sub.to_json(), p.at)
    except QueueMissing:  # deleted since the token was checked
        raise unauthorized() from None
    if out is None:  # removed since it was read
        raise not_found("subscription")
    log_id, old = out
    await p.subscriber.send_replace(sub, _stored(p, old), log_id)
    return {**sub.to_json(), "space": p.name} if p.named else sub.to_json()


async def unsubscribe(d: Dispatcher, sub_id: str, token: str | None) -> None:
    """Remove the subscription, if the token opens its queue; once answered, no matcher that
    answered in time matches it any more. Concurrent unsubscribes share their store round
    trips and matcher calls (bluedove/dispatcher/subscriber.py)."""
    sub, p = await find_subscription(d, sub_id, token)
    if not await p.subscriber.remove(sub_id, sub["queue"]):
        raise not_found("subscription")
    await p.subscriber.send_removal(sub_id)
