"""The publish and subscribe paths of each space a dispatcher serves: the space's decoder and
stored-body form, its forwarder (lanes of Forward calls naming the space) and its subscriber
(the space's catalogue, and lanes of subscription calls naming it), both over the space's
routing (bluedove/dispatcher/routing.py).

The default space's path is made with the dispatcher, over the cluster view. A named space's
is made at its first request, from the dispatcher's copy of the registry (an active space)
and the space's table in the store, over a `SpaceView` (bluedove/dispatcher/space_view.py);
it is kept while the registry holds that very space (a space deleted and made again under its
name is another: its path is made anew), and closed once it does not.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from bluedove.core.errors import ApiError, unavailable
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import Space
from bluedove.core.spaces import DEFAULT_SPACE, SpaceSpec, check_space_name
from bluedove.core.wire import body_template
from bluedove.dispatcher.publish.decode import Decoder
from bluedove.dispatcher.publish.forwarder import Forwarder
from bluedove.dispatcher.space_quotas import SpaceQuotas
from bluedove.dispatcher.space_registry import SpaceRegistry
from bluedove.dispatcher.space_view import SpaceView
from bluedove.dispatcher.subscriber import Subscriber
from bluedove.dispatcher.view import ClusterView
from bluedove.runtime.settings import DispatcherSettings
from bluedove.store.space_entry import SpaceAt
from bluedove.store.spaces import ACTIVE
from bluedove.store.store import DispatcherStore

log = logging.getLogger("bluedove.dispatcher")


@dataclass
class SpacePath:
    """What publishing and subscribing in one space use."""

    name: str
    space: Space
    decoder: Decoder
    body_template: bytes
    forwarder: Forwarder
    subscriber: Subscriber
    at: SpaceAt | None = None  # a named space's name and `created`; None: the default space
    # put in front of each stored body's fields: a named space's deliveries say their space
    stamp: bytes = b""
    quotas: SpaceQuotas | None = None  # a named space's, when it has any
    view: SpaceView | None = None  # a named space's routing (the default's is the cluster view)
    retention_s: int = 0  # its log keeps this long (0: it has none)
    log_since: int = 0  # when its log began (Unix ms): when the space was registered

    @property
    def named(self) -> bool:
        return self.at is not None


def no_space(space: str) -> ApiError:
    return ApiError(404, "not_found", f"no space {space!r}", "space")


class SpacePaths:
    """The dispatcher's paths: the default space's, and each named space's as it is used."""

    def __init__(self, settings: DispatcherSettings, cluster: ClusterView, store: DispatcherStore,
                 registry: SpaceRegistry, default: SpacePath,
                 quota_refused: Callable[[str, str], None] | None = None) -> None:
        self.s, self.cluster, self.store, self.registry = settings, cluster, store, registry
        self.quota_refused = quota_refused  # (space, quota) of each request a quota refused
        self.default = default
        self.named: dict[str, SpacePath] = {}

    async def get(self, name: str) -> SpacePath:
        """The path of space `name`: 422 for a name that cannot be one, 404 for no active space
        of that name, 503 while its table is not in the store yet (its create is under way)."""
        if name == DEFAULT_SPACE:
            return self.default
        check_space_name(name, "space")
        rec = await self.registry.lookup(name)
        if rec is None or rec.state != ACTIVE:
            await self._drop(name)
            raise no_space(name)
        path = self.named.get(name)
        if path is not None and path.at == SpaceAt(name, rec.created):
            if path.view is not None:
                path.view.refresh_soon(self.s.store_fallback_s)
            return path
        await self._drop(name)
        raw = await self.store.get_table(name)
        if raw is None:
            raise unavailable(f"space {name!r} is being made: its table is not laid out yet; retry")
        self.named[name] = path = self._make(SpaceAt(name, rec.created), rec.spec, SegmentTable.from_json(raw))
        return path

    def registered(self) -> None:
        """The default space's log as the registry's copy has it: fixed when `default` was
        registered (bluedove/store/spaces.py's `ensure_default`), so every matcher logs."""
        rec = self.registry.records.get(DEFAULT_SPACE)
        if rec is not None:
            self.default.retention_s, self.default.log_since = rec.spec.retention_s, rec.created

    def heard(self, rises: dict[str, int]) -> None:
        """Named spaces' epochs the gossip brought (bluedove/gossip/space_epochs.py): a path
        whose table is older reads the space's table now, before a matcher refuses it."""
        for name, epoch in rises.items():
            path = self.named.get(name)
            if path is not None and path.view is not None and path.view.current().epoch < epoch:
                path.view.refresh_soon(0.0)

    def _make(self, at: SpaceAt, spec: SpaceSpec, table: SegmentTable) -> SpacePath:
        view, space = SpaceView(at.name, self.cluster, self.store, table), spec.space
        q = spec.quotas
        told = self.quota_refused
        refused = None if told is None else lambda quota: told(at.name, quota)
        quotas = SpaceQuotas(at.name, q, lambda: self.registry.spaces.subscriptions(at.name), refused) \
            if (q.messages_per_s or q.bytes_per_s or q.subscriptions) else None
        return SpacePath(at.name, space, Decoder(space, self.s.max_batch, self.s.max_payload_bytes),
                         body_template(space.names), Forwarder(self.s, view, at.name),
                         Subscriber(self.s, view, self.store, at), at,
                         b'{"space":' + json.dumps(at.name).encode() + b",", quotas, view, spec.retention_s,
                         at.created)

    async def _drop(self, name: str) -> None:
        path = self.named.pop(name, None)
        if path is not None:
            await path.subscriber.close()
            await path.forwarder.close()

    async def close(self) -> None:
        for name in list(self.named):
            await self._drop(name)
        await self.default.forwarder.close()
