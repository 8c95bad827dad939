"""`bluedove autoscaler`: the autoscaler as a process of its own, scaling the matcher StatefulSet."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import TYPE_CHECKING

from bluedove.runtime import tls
from bluedove.runtime.extras import require

if TYPE_CHECKING:
    from bluedove.autoscaler.kubernetes import KubernetesBackend
    from bluedove.autoscaler.policy import ScalingConfig

DRAIN_TIMEOUT_ENV = "BLUEDOVE_DRAIN_TIMEOUT_S"
METRICS_PORT_ENV = "BLUEDOVE_METRICS_PORT"


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    a = sub.add_parser("autoscaler", help="add and remove matchers by load, on Kubernetes (until SIGTERM)")
    a.add_argument("--backend", choices=("kubernetes",), default="kubernetes",
                   help="what starts and stops matchers (local processes: `bluedove up --autoscale`)")
    a.add_argument("--statefulset", required=True, metavar="NAME", help="the matcher StatefulSet")
    a.add_argument("--namespace", default=None, metavar="NS",
                   help="its namespace (default: the autoscaler pod's own, else 'default')")
    a.add_argument("--store", required=True,
                   help="the cluster's store: redis://host:port/db or redis+cluster://host:port,...")
    a.add_argument("--min-matchers", type=int, default=None, help="default BLUEDOVE_MIN_MATCHERS, else 1")
    a.add_argument("--max-matchers", type=int, default=None, help="default BLUEDOVE_MAX_MATCHERS, else 8")
    a.add_argument("--drain-timeout", type=float, default=None, metavar="SECONDS",
                   help="scale-in drains first: the matcher whose pod goes next leaves (hands its segments off) "
                        f"and the replicas go down only once the stored table no longer lists it; at most this "
                        f"long (default {DRAIN_TIMEOUT_ENV}, else 120), else the replicas stay")
    a.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve Prometheus /metrics on this port (docs/metrics.md; default BLUEDOVE_METRICS_PORT, "
                        "else 0 = none)")
    a.add_argument("--metrics-host", default="0.0.0.0", metavar="HOST", help="the address /metrics listens on")
    tls.add_flags(a, "nothing (a client of the matchers: with --tls-ca its certificate is presented to them)")
    a.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check the flags and the StatefulSet, then scale it until SIGTERM or SIGINT."""
    require("kubernetes", "bluedove autoscaler")  # the client is an extra: the services run without it
    from bluedove.autoscaler.kubernetes import (
        KubernetesBackend,
        KubernetesBackendError,
        KubernetesConfigError,
        pod_namespace,
    )
    from bluedove.autoscaler.policy import ScalingConfig
    from bluedove.core.partition.modes import MPARTITION
    from bluedove.runtime.settings import DispatcherSettings, TlsSettings, from_env
    from bluedove.runtime.telemetry import MetricsBindError

    partition = from_env(DispatcherSettings).partition
    if partition != MPARTITION:
        return _usage(f"BLUEDOVE_PARTITION={partition} is a fixed-size baseline; the autoscaler "
                      "splits and merges mPartition's segments only")
    config = from_env(ScalingConfig, min_matchers=args.min_matchers, max_matchers=args.max_matchers)
    if not 0 <= config.min_matchers <= config.max_matchers:
        return _usage(f"need 0 <= min ({config.min_matchers}) <= max ({config.max_matchers}) matchers")
    drain_timeout_s, flag = _drain_timeout(args)
    if not drain_timeout_s > 0:
        return _usage(f"{flag}: expected a number of seconds above 0")
    metrics_port, flag = _metrics_port(args)
    if not 0 <= metrics_port < 65536:
        return _usage(f"{flag}: expected a port from 0 to 65535")
    try:
        tls_files = from_env(TlsSettings, **tls.overrides(args))
        tls.check(tls_files)
    except ValueError as exc:  # TlsError: a missing file, half a pair
        return _usage(str(exc))
    namespace = args.namespace or pod_namespace() or "default"
    try:
        backend = KubernetesBackend(args.statefulset, namespace, drain_timeout_s=drain_timeout_s)
        replicas = backend.current()  # fail at start, not at the first decision, if RBAC or names are wrong
    except (KubernetesConfigError, KubernetesBackendError) as e:
        return _usage(str(e))
    print(f"autoscaler  {backend.target}: {replicas} replicas; keeping {config.min_matchers} to "
          f"{config.max_matchers} matchers", flush=True)
    try:
        asyncio.run(_serve(backend, args.store, config, args.metrics_host, metrics_port, tls_files))
    except MetricsBindError as exc:
        return _usage(f"--metrics-port {metrics_port}: {exc}")
    print("autoscaler stopped", flush=True)
    return 0


def _drain_timeout(args: argparse.Namespace) -> tuple[float, str]:
    """The drain timeout in seconds (nan if BLUEDOVE_DRAIN_TIMEOUT_S is no number) and where it came from."""
    if args.drain_timeout is not None:
        return args.drain_timeout, "--drain-timeout"
    raw = os.environ.get(DRAIN_TIMEOUT_ENV, "120")
    try:
        return float(raw), DRAIN_TIMEOUT_ENV
    except ValueError:
        return float("nan"), DRAIN_TIMEOUT_ENV


def _metrics_port(args: argparse.Namespace) -> tuple[int, str]:
    """The /metrics port (-1 if BLUEDOVE_METRICS_PORT is no port number) and where it came from."""
    if args.metrics_port is not None:
        return args.metrics_port, "--metrics-port"
    raw = os.environ.get(METRICS_PORT_ENV, "0")
    return (int(raw) if raw.isdigit() else -1), METRICS_PORT_ENV


def _usage(message: str) -> int:
    """A usage error of `bluedove autoscaler` on stderr; exit code 2."""
    print(f"bluedove autoscaler: {message}", file=sys.stderr)
    return 2


async def _serve(backend: KubernetesBackend, store_url: str, config: ScalingConfig, metrics_host: str,
                 metrics_port: int, tls_files: tls.TlsFiles | None = None) -> None:
    from bluedove.autoscaler.drain import MatcherDrainer
    from bluedove.autoscaler.metrics import autoscaler_registry
    from bluedove.autoscaler.runner import Autoscaler
    from bluedove.runtime.telemetry import serve_metrics
    from bluedove.store.store import AutoscalerStore

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    store = AutoscalerStore(store_url)
    # the backend runs in worker threads, the store on this loop
    backend.drainer = MatcherDrainer(store, loop, tls_files=tls_files)
    scaler = Autoscaler(backend, store, config, tls_files=tls_files)
    server = None
    if metrics_port:
        server = await serve_metrics(metrics_host, metrics_port, autoscaler_registry(scaler))
        print(f"metrics     http://{metrics_host}:{server.port}/metrics", flush=True)
    try:
        await scaler.run(stop)
    finally:
        if server is not None:
            await server.close()
        await store.close()
