"""What the SDK hands out: queues, subscriptions and deliveries, bound to their client."""

# The same classes serve `Client` and `AsyncClient`: a method returns a value with the first
# and an awaitable (or async iterator) with the second.

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bluedove.client.transport import Json

# {dimension: (low, high)} as given, and as sent: {dimension: [low, high]}
Ranges = Mapping[str, Iterable[float]]
Predicates = dict[str, list[float]]
# a message as `publish_many` takes it: {"attributes": …, "payload": …, "id": …} or (attributes, payload)
MessageLike = Json | tuple[Mapping[str, float], Any]


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

    def subscribe(self, predicates: Ranges | None = None, **ranges: Iterable[float]) -> Any:
        return self.client.subscribe(self, predicates, **ranges)

    def delete(self) -> Any:
        return self.client.delete_queue(self)


@dataclass
class Subscription:
    """A subscription: its id, the queue it delivers to, and its predicates."""

    id: str
    queue: Queue
    predicates: Predicates = field(default_factory=dict)

    def delete(self) -> Any:
        return self.queue.client.unsubscribe(self)

    def update(self, predicates: Ranges | None = None, **ranges: Iterable[float]) -> Any:
        """Replace its predicates in place (`update_subscription`)."""
        return self.queue.client.update_subscription(self, predicates, **ranges)


@dataclass
class Delivery:
    """One message delivered to a queue; ack it once handled, or it comes back."""

    id: str
    attributes: dict[str, float]
    payload: Any
    subscriptions: list[str]
    receipt: str
    published_at: str
    queue: Queue = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, m: Json, queue: Queue) -> Delivery:
        return cls(m["id"], m["attributes"], m.get("payload"), list(m["subscriptions"]), m["receipt"],
                   m.get("published_at", ""), queue)

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


def predicates_of(predicates: Ranges | None, ranges: Ranges) -> Predicates:
    out = {k: list(v) for k, v in (predicates or {}).items()}
    out.update({k: list(v) for k, v in ranges.items()})
    return out


def receipts_of(deliveries: Iterable[Delivery | str]) -> list[str]:
    return [d.receipt if isinstance(d, Delivery) else d for d in deliveries]
