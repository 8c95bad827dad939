"""The autoscaler on a thread of this process, acting on a LocalCluster's children
(`bluedove up --autoscale`, the elastic bench)."""

from __future__ import annotations

import asyncio
import threading
from typing import Protocol

from bluedove.autoscaler.backends import LocalBackend, Processes
from bluedove.autoscaler.metrics import autoscaler_registry
from bluedove.autoscaler.policy import ScalingConfig
from bluedove.autoscaler.runner import Autoscaler
from bluedove.runtime.telemetry import serve_metrics
from bluedove.store.store import AutoscalerStore


class Cluster(Processes, Protocol):
    """What the thread needs of a LocalCluster: its matcher processes, its store and its host."""

    @property
    def store_url(self) -> str | None: ...
    @property
    def host(self) -> str: ...


class AutoscalerThread:
    """An Autoscaler on a thread and event loop of its own, scaling a LocalCluster's matchers."""

    def __init__(self, cluster: Cluster, config: ScalingConfig, interval_s: float = 1.0,
                 metrics_port: int | None = None) -> None:
        self.cluster = cluster
        self.metrics_port = metrics_port  # /metrics on the cluster's host (0: a free port; None: none)
        self.config = config
        self.interval_s = interval_s
        self.autoscaler: Autoscaler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="autoscaler", daemon=True)
        self._ready = threading.Event()

    def start(self) -> "AutoscalerThread":
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self.cluster.store_url is None:
            raise RuntimeError("the cluster's store is not started")
        store = AutoscalerStore(self.cluster.store_url)
        self.autoscaler = Autoscaler(LocalBackend(self.cluster), store, self.config, self.interval_s,
                                     tls_files=getattr(self.cluster, "tls", None))
        server = None
        if self.metrics_port is not None:
            server = await serve_metrics(self.cluster.host, self.metrics_port, autoscaler_registry(self.autoscaler))
            self.metrics_port = server.port
        self._ready.set()
        try:
            await self.autoscaler.run(self._stop)
        finally:
            if server is not None:
                await server.close()
            await store.close()
