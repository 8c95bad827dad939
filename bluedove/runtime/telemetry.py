"""What every process's Prometheus exposition shares: `bluedove_build_info`, the process
collector, a registry's text, and a /metrics HTTP server on the process's event loop
(matchers and the autoscaler; dispatchers answer /metrics in their own app). docs/metrics.md
lists every metric."""

from __future__ import annotations

import asyncio
import contextlib
import platform
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import uvicorn
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

    def collect(self) -> Iterator[GaugeMetricFamily]:
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


class MetricsBindError(Exception):
    """The metrics port cannot be had (taken, or not ours to bind): one line saying which."""


class MetricsServer:
    """`GET /metrics` on host:port (0: a free port, see `port`), served by uvicorn on this event
    loop, so collectors read the process's state on the thread that changes it. The socket is
    bound in the constructor: a port already taken raises MetricsBindError there, before anything
    else starts.
    The process keeps its own signal handlers (uvicorn's are not installed)."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry,
                 checks: dict[str, Callable[[], bool]] | None = None) -> None:
        """`checks`: more paths, each 200 while its function says True, else 503 (a matcher's
        /healthz and /readyz: Kubernetes' probes when its gRPC port speaks TLS)."""
        try:
            self.sock = socket.create_server((host, port))  # SO_REUSEADDR on POSIX, never SO_REUSEPORT
        except OSError as exc:
            raise MetricsBindError(f"cannot serve /metrics on {host}:{port}: {exc.strerror or exc}") from None
        self.port: int = self.sock.getsockname()[1]
        app = _PlainApp({"/metrics": lambda: (200, CONTENT_TYPE_LATEST, exposition(registry)),
                         **{path: _check(ok) for path, ok in (checks or {}).items()}})
        self._server = _LoopServer(uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False))
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> "MetricsServer":
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[self.sock]))
        while not self._server.started:
            if self._task.done():  # failed before serving: its error
                self._task.result()
            await asyncio.sleep(0.01)
        return self

    async def close(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
        self.sock.close()


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Answer = tuple[int, str, bytes]


def _check(ok: Callable[[], bool]) -> Callable[[], Answer]:
    def check() -> Answer:
        good = ok()
        return (200, "text/plain", b"ok\n") if good else (503, "text/plain", b"not ready\n")

    return check


class _PlainApp:
    """An ASGI app of a few GET paths, each a function run on the loop that answers (status,
    content type, body); 404 elsewhere, 405 for another method. (A web framework here would
    cost every matcher its import time and memory for three fixed answers.)"""

    def __init__(self, routes: dict[str, Callable[[], Answer]]) -> None:
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        route = self.routes.get(scope["path"])
        if route is None:
            status, kind, body = 404, "text/plain", b"not found\n"
        elif scope["method"] not in ("GET", "HEAD"):
            status, kind, body = 405, "text/plain", b"method not allowed\n"
        else:
            status, kind, body = route()
        headers = [(b"content-type", kind.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})


class _LoopServer(uvicorn.Server):
    """uvicorn's server inside a running loop, leaving the process's signal handlers alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the process's own handlers stay in place
        yield


async def serve_metrics(host: str, port: int, registry: CollectorRegistry) -> MetricsServer:
    """A started MetricsServer; MetricsBindError when the port cannot be had."""
    return await MetricsServer(host, port, registry).start()


class CpuMeter:
    """CPU time over wall time since the last reading: the fraction of one core used (a matcher's
    stats entry, a dispatcher's heartbeat; the autoscaler reads both)."""

    def __init__(self) -> None:
        self._at = (time.monotonic(), time.process_time())

    def read(self) -> float | None:
        wall, cpu = time.monotonic(), time.process_time()
        (w0, c0), self._at = self._at, (wall, cpu)
        return round((cpu - c0) / (wall - w0), 4) if wall > w0 else None
