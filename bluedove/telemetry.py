"""What every process's Prometheus exposition shares: `bluedove_build_info`, the process
collector, a registry's text, and a small /metrics HTTP server on the process's event loop
(matchers and the autoscaler; dispatchers answer /metrics in their own app). docs/metrics.md
lists every metric."""

from __future__ import annotations

import asyncio
import platform
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

# prometheus_client's own variable: set, every metric of the process is written to files in
# that directory and a scrape sums them over processes (the dispatchers under `bluedove up`).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# The metrics port of a matcher (`--metrics-port`) and of the autoscaler; 0 = no /metrics.
METRICS_PORT_ENV = "BLUEDOVE_METRICS_PORT"


def bluedove_version() -> str:
    try:
        return version("bluedove")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class BuildInfo(Collector):
    """`bluedove_build_info{version, python, role} 1`."""

    def __init__(self, role: str) -> None:
        self.labels = [bluedove_version(), platform.python_version(), role]

    def collect(self):
        g = GaugeMetricFamily("bluedove_build_info", "The running BlueDove: its version, Python and role",
                              labels=["version", "python", "role"])
        g.add_metric(self.labels, 1)
        yield g


def process_registry(role: str) -> CollectorRegistry:
    """A registry holding build info and this process's CPU, memory and file descriptors."""
    r = CollectorRegistry()
    r.register(BuildInfo(role))
    ProcessCollector(registry=r)
    return r


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


async def serve_metrics(host: str, port: int, registry: CollectorRegistry) -> asyncio.Server:
    """`GET /metrics` on host:port (0: a free port; see `server.sockets`), answered on this event
    loop, so collectors read the process's state on the thread that changes it. Anything else
    gets 404; a request that is not HTTP is dropped."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, path, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if method == "GET" and path.split("?", 1)[0] == "/metrics":
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, exposition(registry)
            else:
                status, ctype, body = "404 Not Found", "text/plain; charset=utf-8", b"only GET /metrics here\n"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                         "Connection: close\r\n\r\n".encode("latin-1") + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ValueError,
                ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port, reuse_address=True)


def bound_port(server: asyncio.Server) -> int:
    return server.sockets[0].getsockname()[1]
