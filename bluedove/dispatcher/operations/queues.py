"""Queues: create, inspect, delete; poll, ack and listen.

Poll and ack check the token inside their one store call (the POLL and ACK scripts) rather
than with a lookup of their own: a round trip less per request (docs/benchmarks.md,
"Delivery"). A request that is also invalid has its token checked first, so that a wrong
token is a 401 whatever else is wrong, as everywhere in the API.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import ResponseError

from bluedove.core.errors import ApiError, echo, unauthorized
from bluedove.core.queue_bounds import parse_queue_request, parse_seek_request
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.operations.common import check_range, require_queue_token
from bluedove.store.ids import first_invalid_receipt, receipt_tag, valid_receipt
from bluedove.store.queue_state import SeekRefused
from bluedove.store.store import BadToken

# How long one store read of a Listen stream stays parked before it looks at its queue again
# (a delivery wakes it at once; this only bounds how late a deleted queue ends its streams).
LISTEN_POLL_S = 20.0
DEFAULT_POLL_MAX = 10
DEFAULT_LISTEN_MAX = 100
T = TypeVar("T")


async def create_queue(d: Dispatcher, body: Any = None, token: str | None = None) -> dict[str, str]:
    """A new queue with the bounds `body` asks for (none: the dispatcher's defaults). A
    dead-letter queue must exist and `token` must open it: only its owner sends it deliveries."""
    bounds = parse_queue_request(body, d.store.default_bounds())
    if bounds.dead_letter_queue is not None and not await d.store.check_token(bounds.dead_letter_queue, token):
        raise ApiError(401, "unauthorized", "dead_letter.queue must be a queue whose token the request carries "
                       "(Authorization: Bearer, or X-Queue-Token with API keys on)", "dead_letter.queue")
    queue, created = await d.store.create_queue(bounds)
    return {"queue": queue, "token": created}


async def queue_info(d: Dispatcher, queue: str, token: str | None) -> dict[str, Any]:
    """GET /v1/queues/{queue}: its bounds, depth and counters, for its token's holder."""
    await require_queue_token(d, queue, token)
    return await d.store.queue_info(queue)


async def delete_queue(d: Dispatcher, queue: str, token: str | None) -> None:
    """DELETE /v1/queues/{queue}: the store deletes it in bounded steps (`Queues.delete_queue`),
    logging the removal of each of its subscriptions in the catalogue. The matchers drop them
    from the log they tail, a bounded slice per index job (bluedove/matcher/sets_owner.py),
    not from a call of ours: that would remove each one a second time, one by one, in jobs a
    Forward waits behind, for nothing: by the time we answer, the queue's stream is gone, and
    a delivery matched for it until they have dropped it is not written (DELIVER's NOMKSTREAM)."""
    await require_queue_token(d, queue, token)
    await d.store.delete_queue(queue)


async def poll(d: Dispatcher, queue: str, token: str | None, max_n: float, wait: float) -> list[dict[str, Any]]:
    """The deliveries as dicts (gRPC's Poll): what Python's json cannot read is set aside too."""
    n, wait, given = await poll_args(d, queue, token, max_n, wait)
    msgs = await _polled(d, d.store.poll(queue, n, wait, stop=d.closing, token=given))
    d.metrics.polled.inc(len(msgs))
    return msgs


async def poll_json(d: Dispatcher, queue: str, token: str | None, max_n: float, wait: float,
                    gone: Callable[[], bool] | None = None) -> str:
    """The REST body `{"messages": [...]}`, as the store spliced it from the stored JSON.
    `gone`: whether the client has left (a parked poll then ends, taking nothing out).
    The HTTP door serves the same poll as callbacks (bluedove/dispatcher/door_poll.py)."""
    n, wait, given = await poll_args(d, queue, token, max_n, wait)
    got, body = await _polled(d, d.store.poll_json(queue, n, wait, stop=d.closing, token=given, gone=gone))
    d.metrics.polled.inc(got)
    return body


async def poll_args(d: Dispatcher, queue: str, token: str | None, max_n: float,
                    wait: float) -> tuple[int, float, str]:
    """(max, wait, token) of a poll, checked: ApiError (422, or 401 first for a wrong token)."""
    try:
        n, wait = int(check_range("max", max_n, 1, 1000)), check_range("wait", wait, 0, d.s.max_wait_s)
    except ApiError:
        await require_queue_token(d, queue, token)  # a wrong token is a 401 first
        raise
    if token is None:
        raise unauthorized()  # no token at all is a 401 without asking the store
    return n, wait, token


def poll_error(exc: BaseException) -> BaseException:
    """A store poll's error as the API's: a wrong token, or the queue deleted while the poll
    waited (NOGROUP, as in listen), is a 401; anything else is itself."""
    if isinstance(exc, BadToken) or (isinstance(exc, ResponseError) and "NOGROUP" in str(exc)):
        return unauthorized()
    return exc


async def _polled(d: Dispatcher, call: Awaitable[T]) -> T:
    """A store poll's answer, its errors as the API's; the deliveries it set aside counted."""
    try:
        return await call
    except (BadToken, ResponseError) as exc:
        err = poll_error(exc)
        if err is exc:
            raise
        raise err from None
    finally:
        d.metrics.count_undeliverable(d.store.undeliverable)


def _ack_error(receipts: Any, unknown_field: str | None) -> ApiError | None:
    if unknown_field is not None:
        return ApiError(422, "invalid_ack", f"unknown field {unknown_field!r}", unknown_field)
    if not isinstance(receipts, list):
        return ApiError(422, "invalid_ack", "the body must be {\"receipts\": [...]}", "receipts")
    i = first_invalid_receipt(receipts)
    if i is not None:
        return ApiError(422, "invalid_ack", f"not a receipt (send back one a poll gave): {receipts[i]!r:.100}",
                        f"receipts[{i}]")
    return None


async def ack(d: Dispatcher, queue: str, token: str | None, receipts: Any, unknown_field: str | None = None) -> None:
    """Ack `receipts`; `unknown_field`, a field of the REST body other than receipts, is an
    error once the token is checked (like a bad receipt)."""
    error = _ack_error(receipts, unknown_field)
    if error is not None:
        await require_queue_token(d, queue, token)
        raise error
    if token is None:
        raise unauthorized()
    try:
        acked = await d.store.ack(queue, receipts, token=token)
    except BadToken:
        raise unauthorized() from None
    d.metrics.acked.inc(acked)


async def listen(d: Dispatcher, queue: str, token: str | None, max_n: float) -> AsyncIterator[dict[str, Any]]:
    """Deliveries of `queue` as they arrive, until the dispatcher closes or the queue goes.

    Each read takes at most `max_n` from the store; the consumer's pace (gRPC flow control)
    decides when the next read happens, so what a slow listener cannot take stays queued."""
    await require_queue_token(d, queue, token)
    max_n = int(check_range("max", max_n, 1, 1000))
    while not d.closing.is_set():
        msgs = await _polled(d, d.store.poll(queue, max_n, LISTEN_POLL_S, stop=d.closing))
        d.metrics.polled.inc(len(msgs))
        for m in msgs:
            yield m
        if not msgs:
            await require_queue_token(d, queue, token)  # the queue may have been deleted


def _seek_point(queue: str, body: Any) -> tuple[str, int, int]:
    """(the field, ms, seq) of the point a seek body names: a time is `ms-0`, a receipt the
    entry it names, which must be one of this queue's. ApiError 422 naming the field."""
    field, point = parse_seek_request(body)
    if field == "time":
        return field, point, 0
    tag = receipt_tag(queue)
    if not (valid_receipt(point) and point.endswith(tag)):
        raise ApiError(422, "invalid_request", f"not a receipt of this queue (send one a poll of it gave): "
                       f"{echo(point)}", "receipt")
    ms, _, seq = point[:-len(tag)].partition("-")
    return field, int(ms), int(seq)


_REFUSED = {"keeps_none": "the queue keeps no acked deliveries to seek among (create it with retain_acked_s)",
            "future": "is in the future (by the store's clock): a seek goes back to deliveries stored"}


async def seek(d: Dispatcher, queue: str, token: str | None, body: Any) -> dict[str, int]:
    """POST /v1/queues/{queue}/seek: every delivery the queue keeps from a time (or from the
    delivery a receipt names) on is handed out again, acked or not, and every one before it
    counts as acked; answers how many are deliverable now. One store script, atomic with the
    queue's deliveries (bluedove/store/kept_scripts.py). A bad body is a 422 naming its field
    once the token is checked; so is a queue that keeps no acked deliveries, naming the field
    the client sent. A refused seek changes nothing."""
    try:
        field, ms, seq = _seek_point(queue, body)
    except ApiError:
        await require_queue_token(d, queue, token)  # a wrong token is a 401 first
        raise
    if token is None:
        raise unauthorized()
    try:
        n = await d.store.seek(queue, ms, seq, token=token)
    except BadToken:
        raise unauthorized() from None
    except SeekRefused as exc:
        why = _REFUSED[exc.reason]
        raise ApiError(422, "invalid_request", why if exc.reason == "keeps_none" else f"{field} {why}", field) from None
    return {"redeliverable": n}
