"""The matcher's gRPC health (grpc_health.v1), on its one port.

- service "": SERVING once the catalogue is loaded (the startup and liveness probes);
- service "bluedove.ready": SERVING while the matcher owns segments and its table is the
  newest it has seen (the readiness probe; the rule is `bluedove.matcher.decisions.serving_ready`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from grpc_health.v1 import health_pb2

READY_SERVICE = "bluedove.ready"  # gRPC health service of the readiness probe


class HealthService(Protocol):
    """What the matcher uses of grpc_health's asyncio `health.aio.HealthServicer` (the library's
    stubs describe only the threaded one)."""

    async def set(self, service: str, status: int) -> None: ...

    async def enter_graceful_shutdown(self) -> None: ...


async def publish_health(ready: Callable[[], bool], health_servicer: HealthService, every_s: float = 0.2) -> None:
    """Keep "bluedove.ready" SERVING exactly while `ready()` (checked every `every_s`)."""
    last = None
    while True:
        now = ready()
        if now != last:
            await health_servicer.set(READY_SERVICE, health_pb2.HealthCheckResponse.SERVING if now
                                      else health_pb2.HealthCheckResponse.NOT_SERVING)
            last = now
        await asyncio.sleep(every_s)
