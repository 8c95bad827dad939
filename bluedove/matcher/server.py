"""The matcher process: a grpc.aio server around one Matcher (bluedove/matcher/matcher.py), its
health service and metrics port, run until a signal or a leave stops it.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from bluedove.core.space import Space
from bluedove.gossip.config import GossipConfig
from bluedove.matcher.health import READY_SERVICE, HealthService, publish_health
from bluedove.matcher.matcher import Matcher
from bluedove.matcher.metrics import matcher_registry
from bluedove.matcher.servicer import MatcherServicer
from bluedove.runtime import tls
from bluedove.runtime.settings import MatcherSettings, from_env
from bluedove.runtime.telemetry import MetricsServer
from bluedove.store.store import MatcherStore, StoreLimits
from bluedove.v1 import gossip_pb2_grpc
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

log = logging.getLogger("bluedove.matcher")


async def _leave_or_stop(m: Matcher) -> None:
    reply = await m.leave()
    if not reply.ok:
        log.warning("matcher %s could not hand off (%s); exiting", m.s.id, reply.reason)
        m.stopping.set()


async def _start_grpc(m: Matcher, settings: MatcherSettings
                      ) -> tuple[grpc.aio.Server, HealthService, MatcherServicer]:
    """The matcher's gRPC server (its API, gossip and health) started on its port, health NOT_SERVING."""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 * 1024 * 1024),
                                      ("grpc.so_reuseport", 0)])
    servicer = MatcherServicer(m)
    pb_grpc.add_MatcherServicer_to_server(servicer, server)
    gossip_pb2_grpc.add_GossipServicer_to_server(m.membership.servicer(), server)
    health_servicer: HealthService = health.aio.HealthServicer()  # type: ignore[attr-defined]  # stubs lack aio
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    tls.add_port(server, f"{settings.host}:{settings.port}", settings, internal=True)
    await server.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    await health_servicer.set(READY_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
    return server, health_servicer, servicer


def _on_signals(m: Matcher, settings: MatcherSettings, loop: asyncio.AbstractEventLoop) -> None:
    """SIGTERM and SIGINT stop the matcher; with --leave-on-sigterm the first SIGTERM of a ready
    matcher hands its segments off first (Kubernetes scales a StatefulSet in with SIGTERM)."""
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if settings.leave_on_sigterm and signals == 1 and m.ready:
            loop.create_task(_leave_or_stop(m))
        else:
            m.stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)


async def serve(settings: MatcherSettings, deliver: str = "store", seeds: tuple[str, ...] = (),
                space: Space | None = None, seed: dict[str, Any] | None = None, space_log: int | None = None) -> None:
    """Run a matcher until a signal (or a leave) stops it. Raises SpaceMismatch when the stored
    table's space is not `space`. `space_log`: the space file's `retention_s` (Matcher says how)."""
    store = MatcherStore(settings.store_url, StoreLimits(dedup_window_s=settings.dedup_window_s,
                                                  max_undelivered=settings.max_undelivered,
                                                  retention_s=settings.retention_s))
    m = Matcher(settings, store, deliver, from_env(GossipConfig), seeds, space, seed, space_log)
    # Bound first: a metrics port taken ends the start (MetricsBindError) before anything runs.
    up = asyncio.Event()  # as health service "": set once started, cleared when stopping
    # /healthz and /readyz beside /metrics: the probes where the gRPC port speaks TLS (docs/kubernetes.md)
    checks = {"/healthz": up.is_set, "/readyz": lambda: up.is_set() and m.serving_ready()}
    metrics = (MetricsServer(settings.host, settings.metrics_port, matcher_registry(m), checks)
               if settings.metrics_port else None)
    server, health_servicer, servicer = await _start_grpc(m, settings)
    stop = m.stopping
    loop = asyncio.get_running_loop()
    _on_signals(m, settings, loop)
    publisher = None
    if metrics is not None:
        await metrics.start()
    try:
        # A signal while waiting for a table (or loading) stops at once.
        starting = loop.create_task(m.start())
        stopped = loop.create_task(stop.wait())
        await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
        else:
            stopped.cancel()
            starting.result()  # SpaceMismatch, or a failed start, ends the process
            await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
            up.set()
            publisher = loop.create_task(publish_health(m.serving_ready, health_servicer))
            await stop.wait()
        up.clear()
        await health_servicer.enter_graceful_shutdown()
    finally:
        if publisher is not None:
            publisher.cancel()
        if metrics is not None:
            await metrics.close()
        m.membership.gossip_servicer.close()  # peers' gossip streams never end by themselves
        servicer.close()  # nor do dispatchers' subscription streams
        await server.stop(grace=2.0)
        await m.stop()
        await store.close()
