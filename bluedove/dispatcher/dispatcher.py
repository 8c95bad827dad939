"""One dispatcher's state: its store, cluster view, forwarder, decoder, subscriber, metrics,
sample, series and key checks, started and stopped together. The operations
(bluedove/dispatcher/operations/) take it as their first argument; the REST app
(bluedove/dispatcher/app.py) and the gRPC API (bluedove/dispatcher/grpc_api.py) hold one.
"""

from __future__ import annotations

import asyncio
import gc
import logging

from bluedove.core import forwarding, replay_match
from bluedove.core.errors import ApiError
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import Space
from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.core.wire import body_template
from bluedove.dispatcher.auth import KeyAuth
from bluedove.dispatcher.metrics import Metrics
from bluedove.dispatcher.publish.decode import Decoder
from bluedove.dispatcher.publish.forwarder import Forwarder
from bluedove.dispatcher.replay import Replayer
from bluedove.dispatcher.sampler import Sampler
from bluedove.dispatcher.series import DispatcherSeries
from bluedove.dispatcher.space_paths import SpacePath, SpacePaths
from bluedove.dispatcher.space_registry import SpaceRegistry
from bluedove.dispatcher.subscriber import Subscriber
from bluedove.dispatcher.view import ClusterView
from bluedove.runtime.settings import DispatcherSettings
from bluedove.runtime.telemetry import CpuMeter
from bluedove.store.space_entry import SpaceAt
from bluedove.store.store import DispatcherStore, StoreLimits

log = logging.getLogger("bluedove.dispatcher")


class Dispatcher:
    """Everything one dispatcher process holds: all of it can be rebuilt from the matchers."""

    def __init__(self, settings: DispatcherSettings, space: Space, seeds: tuple[str, ...] = ()) -> None:
        self.s = settings
        self.space = space
        self.store = DispatcherStore(settings.store_url, StoreLimits(
            max_subscriptions_per_queue=settings.max_subscriptions_per_queue,
            visibility_timeout_s=settings.visibility_timeout_s,
            max_undelivered=settings.max_undelivered, retention_s=settings.retention_s,
        ))
        self.cluster = ClusterView(settings, self.store, seeds)
        self.forwarder = Forwarder(settings, self.cluster)
        self.decoder = Decoder(space, settings.max_batch, settings.max_payload_bytes)
        self.body_template = body_template(space.names)
        self.subscriber = Subscriber(settings, self.cluster, self.store)
        self.metrics = Metrics(settings.metrics_spaces)
        self.sampler = None if settings.sample_rate <= 0 else Sampler(
            settings.sample_rate, settings.sample_dir, settings.id, space, settings.sample_rotate_s,
            settings.sample_rotate_mb, settings.sample_keep, self.metrics.sampled, self.metrics.sample_dropped)
        # Set when the process is told to exit, so long-polls answer at once.
        self.closing = asyncio.Event()
        self._heartbeat: asyncio.Task[None] | None = None
        self._metrics_tick: asyncio.Task[None] | None = None
        # its part of the last hour in the store (/v1/stats)
        self.series = DispatcherSeries(self.store, space, settings.id, self.cluster)
        self.store.on_answered = self.series.on_answered
        # API keys (bluedove/dispatcher/auth.py); None: auth off, anyone may publish and create queues.
        self.auth = KeyAuth(self.store, settings.auth_refresh_s) if settings.auth == "keys" else None
        # its share of the cluster's rates (1/N, N the dispatchers registered): the spaces' quotas
        self.share = 1.0
        # its copy of the registry of spaces, and the purges of those deleted
        self.registry = SpaceRegistry(self.store.r, settings.spaces_refresh_s)
        # each space's publish and subscribe path: the default's over the cluster view, and
        # a named space's as it is first used
        self.paths = SpacePaths(settings, self.cluster, self.store, self.registry, SpacePath(
            DEFAULT_SPACE, space, self.decoder, self.body_template, self.forwarder, self.subscriber),
            self.metrics.refused_by_quota)
        self.registry.on_refresh.append(self.paths.registered)
        member = self.cluster.member
        member.on_change.append(lambda: self.paths.heard(member.space_rises()))
        # the replays this dispatcher works on, and those it takes over (bluedove/dispatcher/replay.py)
        self.replayer = Replayer(self.store, self._logged_space, settings.replay_rate, settings.replay_lease_s)

    async def _logged_space(self, name: str) -> tuple[Space, SpaceAt | None] | None:
        """A space's schema and identity, if it keeps a log (else None)."""
        try:
            p = await self.paths.get(name)
        except ApiError:
            return None
        return (p.space, p.at) if p.retention_s else None

    async def start(self, address: str) -> None:
        forwarding.warm_up()  # compiled (or loaded from its cache) before the first publish
        replay_match.warm_up()  # and the replay's scan, before a first replay
        if self.sampler is not None:
            self.sampler.start()
        await self.cluster.start()
        if self.auth is not None:
            self.auth.start()
        self.registry.start()
        self.series.start()
        self.replayer.start(lambda: [n for n, r in self.registry.records.items() if r.spec.retention_s])
        self._heartbeat = asyncio.get_running_loop().create_task(self._register(address))
        self.metrics.parked_now = lambda: self.store.wakeups.parked
        self.metrics.replays_now = lambda: (len(self.replayer.running), self.replayer.delivered)
        self._metrics_tick = asyncio.get_running_loop().create_task(self.metrics.run(self.forwarder.counts))
        # Start-up's objects (imports, the compiled kernels) out of the collector's reach: full
        # collections, which a publish waits through, no longer walk them.
        gc.collect()
        gc.freeze()

    async def stop(self) -> None:
        for task in (self._heartbeat, self._metrics_tick):
            if task:
                task.cancel()
        await self.series.stop()
        await self.replayer.stop()
        await self.registry.stop()
        if self.auth is not None:
            await self.auth.stop()
        self.metrics.close()
        await self.paths.close()
        await self.subscriber.close()
        await self.cluster.stop()
        await self.store.close()
        if self.sampler is not None:  # the last samples written, the file renamed whole
            await asyncio.to_thread(self.sampler.stop)

    async def _register(self, address: str) -> None:
        cpu = CpuMeter()  # its CPU in the heartbeat: the autoscaler names the dispatchers as the limit by it
        while True:
            try:
                table = self.cluster.table
                await self.store.register_dispatcher(self.s.id, address, epoch=table.epoch if table else 0,
                                                     adopted_at=self.cluster.adopted_at, cpu=cpu.read())
                self.share = 1.0 / max(1, len(await self.store.dispatchers()))
                if self.auth is not None:  # the keys' rates are shared out as the spaces' quotas are
                    self.auth.share = self.share
            except Exception:  # noqa: BLE001 - the store may be briefly away
                log.warning("could not register in the store")
            await asyncio.sleep(3)

    @property
    def table(self) -> SegmentTable | None:
        return self.cluster.table
