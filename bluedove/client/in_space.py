"""A client's calls in one named space: `Client.in_space("orders")` (and `AsyncClient`'s)
publishes and subscribes there, on the client's own connection, retries and key. Queues are in
no space: poll, ack and listen on the client itself; a delivery says its `space`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from bluedove.client.objects import MessageLike, Predicates, Queue, Ranges, Subscription, When, predicates_of


class Client(Protocol):
    """What of `Client` its calls in a space use."""

    def publish(self, attributes: Mapping[str, Any], payload: Any = None, id: str | None = None,  # noqa: A002
                space: str | None = None) -> str: ...

    def publish_many(self, messages: Iterable[MessageLike], space: str | None = None) -> list[str]: ...

    def subscribe_in(self, space: str | None, queue: Queue | None, preds: Predicates,
                     replay_from: When | None = None) -> Subscription: ...

    def subscribe_many(self, predicates: Iterable[Ranges], queue: Queue | None = None,
                       space: str | None = None) -> list[Subscription]: ...

    def space_info(self, name: str) -> dict[str, Any]: ...


class AsyncClient(Protocol):
    """What of `AsyncClient` its calls in a space use."""

    async def publish(self, attributes: Mapping[str, Any], payload: Any = None, id: str | None = None,  # noqa: A002
                      space: str | None = None) -> str: ...

    async def publish_many(self, messages: Iterable[MessageLike], space: str | None = None) -> list[str]: ...

    async def subscribe_in(self, space: str | None, queue: Queue | None, preds: Predicates,
                           replay_from: When | None = None) -> Subscription: ...

    async def subscribe_many(self, predicates: Iterable[Ranges], queue: Queue | None = None,
                             space: str | None = None) -> list[Subscription]: ...

    async def space_info(self, name: str) -> dict[str, Any]: ...


class InSpace:
    """`Client`'s publish and subscribe calls in space `name`."""

    def __init__(self, client: Client, name: str) -> None:
        self.client, self.name = client, name

    def publish(self, attributes: Mapping[str, Any], payload: Any = None, id: str | None = None) -> str:  # noqa: A002
        return self.client.publish(attributes, payload, id, space=self.name)

    def publish_many(self, messages: Iterable[MessageLike]) -> list[str]:
        return self.client.publish_many(messages, space=self.name)

    def subscribe(self, queue: Queue | None = None, predicates: Ranges | None = None, *,
                  replay_from: When | None = None, **conditions: Any) -> Subscription:
        """As `Client.subscribe`, by this space's attributes (`replay_from`: docs/api.md, "Replay")."""
        return self.client.subscribe_in(self.name, queue, predicates_of(predicates, conditions), replay_from)

    def subscribe_many(self, predicates: Iterable[Ranges], queue: Queue | None = None) -> list[Subscription]:
        return self.client.subscribe_many(predicates, queue, space=self.name)

    def info(self) -> dict[str, Any]:
        """The space: its schema, its table's epoch and its counts (GET /v1/spaces/{name})."""
        return self.client.space_info(self.name)


class AsyncInSpace:
    """`AsyncClient`'s publish and subscribe calls in space `name`."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client, self.name = client, name

    async def publish(self, attributes: Mapping[str, Any], payload: Any = None,
                      id: str | None = None) -> str:  # noqa: A002
        return await self.client.publish(attributes, payload, id, space=self.name)

    async def publish_many(self, messages: Iterable[MessageLike]) -> list[str]:
        return await self.client.publish_many(messages, space=self.name)

    async def subscribe(self, queue: Queue | None = None, predicates: Ranges | None = None, *,
                        replay_from: When | None = None, **conditions: Any) -> Subscription:
        return await self.client.subscribe_in(self.name, queue, predicates_of(predicates, conditions), replay_from)

    async def subscribe_many(self, predicates: Iterable[Ranges], queue: Queue | None = None) -> list[Subscription]:
        return await self.client.subscribe_many(predicates, queue, space=self.name)

    async def info(self) -> dict[str, Any]:
        return await self.client.space_info(self.name)
