"""bluedove/runtime/telemetry.py: the checks a MetricsServer answers beside /metrics (a matcher's
/healthz and /readyz, Kubernetes' probes when its gRPC port speaks TLS)."""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry

from bluedove.runtime.telemetry import MetricsServer


async def test_a_check_is_200_while_true_and_503_otherwise():
    state = {"ready": False}
    server = await MetricsServer("127.0.0.1", 0, CollectorRegistry(),
                                 {"/healthz": lambda: True, "/readyz": lambda: state["ready"]}).start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=5) as c:
            assert (await c.get("/healthz")).status_code == 200
            r = await c.get("/readyz")
            assert (r.status_code, r.text) == (503, "not ready\n")
            state["ready"] = True
            assert (await c.get("/readyz")).status_code == 200
            assert (await c.get("/metrics")).status_code == 200
    finally:
        await server.close()


async def test_without_checks_only_metrics_is_served():
    server = await MetricsServer("127.0.0.1", 0, CollectorRegistry()).start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=5) as c:
            assert (await c.get("/readyz")).status_code == 404
    finally:
        await server.close()
