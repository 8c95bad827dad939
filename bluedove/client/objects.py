"""What the SDK hands out: queues, subscriptions and deliveries, bound to their client."""

# The same classes serve `Client` and `AsyncClient`: a method returns a value with the first
# and an awaitable (or async iterator) with the second.

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from bluedove.client.transport import Json

DEFAULT_SPACE = "default"  # the cluster's own space: the one the routes without a space address

# A filter as given, {attribute: condition} (`condition_of`; "any_of": [filters]), and as sent:
# the REST API's predicates (docs/api.md, "Typed attributes"). Its first form was
# {dimension: (low, high)}, which still reads the same.
Ranges = Mapping[str, Any]
Predicates = dict[str, Any]
When = datetime | int | str  # a time: a datetime, ms since the epoch, or RFC 3339 text
# a message as `publish_many` takes it: {"attributes": …, "payload": …, "id": …} or (attributes, payload)
MessageLike = Json | tuple[Mapping[str, Any], Any]


@dataclass
class Queue:
    """A delivery queue and its token (the token is shown once, when the queue is created)."""

    id: str
    token: str = field(repr=False)
    # a Client or an AsyncClient (Any: the methods below answer the first's values and the
    # second's awaitables, so their types are the client's)
    client: Any = field(default=None, repr=False, compare=False)

    def deliveries(self, wait: float = 0, max: int = 100) -> Any:  # noqa: A002 - the API's name
        """What is in the queue now, waiting up to `wait` s for the first delivery."""
        return self.client.poll(self, max=max, wait=wait)

    def listen(self, max: int = 100) -> Any:  # noqa: A002
        """Every delivery, forever: the push stream over gRPC, long-polls over REST."""
        return self.client.listen(self, max=max)

    def ack(self, deliveries: Iterable[Delivery | str]) -> Any:
        return self.client.ack(self, deliveries)

    def seek(self, to: datetime | int | str | None = None, *, receipt: Delivery | str | None = None) -> Any:
        """Hand out again what the queue keeps from `to` on (a datetime, milliseconds since the
        epoch, or RFC 3339 text), or from the delivery `receipt` names; what is before counts as
        acked. Returns how many are deliverable now. The queue must keep acked deliveries
        (`create_queue(retain_acked_s=…)`)."""
        return self.client.seek(self, to, receipt=receipt)

    def subscribe(self, predicates: Ranges | None = None, **conditions: Any) -> Any:
        return self.client.subscribe(self, predicates, **conditions)

    def delete(self) -> Any:
        return self.client.delete_queue(self)


@dataclass
class Subscription:
    """A subscription: its id, the queue it delivers to, and its predicates."""

    id: str
    queue: Queue
    predicates: Predicates = field(default_factory=dict)
    replay: Json | None = None  # made with `replay_from`: {"from": its effective start} (docs/api.md, "Replay")

    def delete(self) -> Any:
        return self.queue.client.unsubscribe(self)

    def update(self, predicates: Ranges | None = None, **conditions: Any) -> Any:
        """Replace its predicates in place (`update_subscription`)."""
        return self.queue.client.update_subscription(self, predicates, **conditions)


@dataclass
class Delivery:
    """One message delivered to a queue; ack it once handled, or it comes back."""

    id: str
    attributes: dict[str, Any]  # as published: numbers (floats), strings, booleans
    payload: Any
    subscriptions: list[str]
    receipt: str
    published_at: str
    queue: Queue = field(repr=False, compare=False)
    space: str = DEFAULT_SPACE  # the space the message was published in
    replayed: bool = False  # delivered by a replay of the space's log

    @classmethod
    def from_json(cls, m: Json, queue: Queue) -> Delivery:
        return cls(m["id"], m["attributes"], m.get("payload"), list(m["subscriptions"]), m["receipt"],
                   m.get("published_at", ""), queue, m.get("space", DEFAULT_SPACE), m.get("replayed") is True)

    def ack(self) -> Any:
        return self.queue.client.ack(self.queue, [self])


def message_body(m: MessageLike) -> Json:
    """A message in the API's JSON form from a dict {attributes, payload?, id?} or (attributes, payload)."""
    if isinstance(m, dict) and "attributes" in m:
        return m
    if isinstance(m, tuple) and len(m) == 2:
        return {"attributes": m[0], "payload": m[1]}
    raise TypeError(f"a message is {{'attributes': ..., 'payload': ..., 'id': ...}} or (attributes, payload), "
                    f"got {m!r}")


def condition_of(v: Any) -> Any:
    """A keyword filter's condition as the API takes it: a dict is a condition of the filter
    language ({"prefix": "AB"}, {"gte": 5}, {"in": [...]}, …), a (low, high) pair (any
    iterable but a string) a range, any other value (a string, a number, a boolean) equals."""
    if isinstance(v, Mapping):
        return dict(v)
    if isinstance(v, Iterable) and not isinstance(v, (str, bytes)):
        return list(v)
    return v


def predicates_of(predicates: Ranges | None, conditions: Ranges) -> Predicates:
    """The predicates of a filter given as a mapping and as keywords (`condition_of` each;
    `any_of` a list of filters, each read the same way); a keyword wins over the mapping."""
    out: Predicates = {}
    for k, v in {**(predicates or {}), **conditions}.items():
        if k == "any_of" and isinstance(v, (list, tuple)):
            out[k] = [predicates_of(m, {}) if isinstance(m, Mapping) else m for m in v]
        else:
            out[k] = condition_of(v)
    return out


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def seek_body(to: datetime | int | str | None, receipt: Delivery | str | None) -> Json:
    """A seek's body: {"time": …} (a datetime as milliseconds since the epoch; one without a
    zone is local time, as Python reads it) or {"receipt": …}. Exactly one of the two."""
    if (to is None) == (receipt is None):
        raise TypeError("seek to a time or from a receipt: give one of them")
    if receipt is not None:
        return {"receipt": receipt.receipt if isinstance(receipt, Delivery) else receipt}
    assert to is not None
    return {"time": time_value(to)}


def subscribe_body(preds: Predicates, queue: Queue | None, replay_from: When | None) -> Json:
    """A subscribe's body: the filter, the queue (none: a new one), the replay's start if any."""
    body: Json = {"predicates": preds, **({"queue": queue.id} if queue else {})}
    if replay_from is not None:
        body["replay_from"] = time_value(replay_from)
    return body


def time_value(to: When) -> int | str:
    """A time as the API takes it: a datetime as milliseconds since the epoch (one without a
    zone is local time, as Python reads it); an int (ms) or an RFC 3339 text as given."""
    if isinstance(to, datetime):
        aware = to if to.tzinfo is not None else to.astimezone()
        return (aware - _EPOCH) // timedelta(milliseconds=1)
    return to


def receipts_of(deliveries: Iterable[Delivery | str]) -> list[str]:
    return [d.receipt if isinstance(d, Delivery) else d for d in deliveries]
