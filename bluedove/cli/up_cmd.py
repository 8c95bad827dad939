"""`bluedove up`: a local cluster as real processes (bluedove/local/cluster.py) until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from bluedove.cli.keys_cmd import add_auth_flag, print_auth
from bluedove.core.partition.modes import MPARTITION
from bluedove.local.cpu_quota import add_cpu_flag, cpu_flag_problem
from bluedove.local.flags import (
    add_bounds_flags,
    add_cluster_flags,
    add_up_tls_flags,
    bounds_env,
    store_flags_problem,
    up_tls,
)
from bluedove.runtime import tls

if TYPE_CHECKING:
    from bluedove.autoscaler.local import AutoscalerThread
    from bluedove.local.cluster import LocalCluster

SEED_HELP = ("a partition seed (JSON, docs/operations.md \"Seeds\"): the first table's boundaries and which "
             "matcher owns which segment of each dimension (default: equal widths); ignored when the store "
             "already holds a table")


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `up` sub-command's parser."""
    up = sub.add_parser("up", help="run a local cluster as real processes until Ctrl-C")
    add_cluster_flags(up, 8080, 50051)
    add_bounds_flags(up)
    up.add_argument("--data-dir", default=".bluedove", help="embedded Redis data and process logs")
    up.add_argument("--autoscale", action="store_true",
                    help="add matchers when saturated and remove them when idle (local processes)")
    up.add_argument("--min-matchers", type=int, default=None, help="with --autoscale (default 1)")
    up.add_argument("--max-matchers", type=int, default=None, help="with --autoscale (default 8)")
    up.add_argument("--sample-rate", type=float, default=0.0, metavar="F",
                    help="the dispatchers sample this fraction of published messages into DATA_DIR/samples "
                         "(0 = off, the default)")
    up.add_argument("--seed", default=None, metavar="FILE", help=SEED_HELP)
    up.add_argument("--spaces", default=None, metavar="FILE",
                    help="spaces besides default for the dispatchers to make (YAML or JSON: a list of POST "
                         "/v1/spaces bodies; docs/api.md, \"Spaces\")")
    add_cpu_flag(up, "matcher")
    add_cpu_flag(up, "dispatcher")
    add_auth_flag(up)
    add_up_tls_flags(up)
    up.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check the flags, start the cluster, supervise it until SIGINT or SIGTERM, then stop it."""
    cluster = _new_cluster(args)  # an exit code if a flag, the space or the seed is refused
    if isinstance(cluster, int):
        return cluster
    partition = cluster.partition  # the flag, else BLUEDOVE_PARTITION, else mpartition
    if problem := _flags_problem(args, partition):
        return _usage(problem)
    stopping = False

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"starting BlueDove: {args.matchers} matchers, {args.dispatchers} dispatcher(s), data in {args.data_dir}"
          f"{_mode(args, partition)}", flush=True)
    if (code := _start(cluster)) is not None:
        return code
    scaler = _start_autoscaler(args, cluster) if args.autoscale else None
    _print_endpoints(cluster)
    try:
        while not stopping:
            for event in cluster.check():
                print(time.strftime("%H:%M:%S"), event, flush=True)
            time.sleep(0.5)
    finally:
        print("stopping…", flush=True)
        if scaler is not None:
            scaler.stop()
        cluster.stop()
        print("stopped", flush=True)
    return 0


def _new_cluster(args: argparse.Namespace) -> LocalCluster | int:
    """The LocalCluster of the flags, not started; else exit code 2 (store flags, space, TLS or seed refused)."""
    from bluedove.core.partition.bootstrap import BootError, initial_table, load_seed, numbered_members
    from bluedove.core.space import SpaceError
    from bluedove.core.spaces import load_spaces_file
    from bluedove.local.cluster import LocalCluster

    if problem := (store_flags_problem(args) or cpu_flag_problem(args, "matcher")
                   or cpu_flag_problem(args, "dispatcher")):
        return _usage(problem)
    try:  # the spaces, the space and the seed are checked before anything starts
        if args.spaces:
            load_spaces_file(args.spaces)
    except ValueError as exc:
        return _usage(f"--spaces {exc}")
    try:
        seed = load_seed(args.seed) if args.seed else None
        cluster = LocalCluster(matchers=args.matchers, dispatchers=args.dispatchers, http_port=args.http_port,
                               grpc_port=args.grpc_port, data_dir=args.data_dir, store=args.store,
                               space_file=args.space, policy=args.policy, partition=args.partition,
                               sample_rate=args.sample_rate, seed=seed, store_cluster=args.store_cluster,
                               auth=args.auth, tls_files=up_tls(args), child_env=_child_env(args),
                               matcher_cpu=args.matcher_cpu, dispatcher_cpu=args.dispatcher_cpu)
        if seed is not None:
            initial_table(cluster.space, numbered_members(args.matchers), seed)
    except SpaceError as exc:
        where = "" if str(exc).startswith(str(args.space)) else f"{args.space}: "
        print(f"bluedove up: --space {where}{exc}", file=sys.stderr)
        return 2
    except tls.TlsError as exc:
        return _usage(str(exc))
    except BootError as exc:
        print(f"bluedove up: --seed {args.seed}: {exc}" if not str(exc).startswith("--seed") else f"bluedove up: {exc}",
              file=sys.stderr)
        return 2
    return cluster


def _child_env(args: argparse.Namespace) -> dict[str, str]:
    """Every matcher's and dispatcher's environment: the bounds flags', and the spaces file (the
    dispatchers make its spaces at their start; the matchers read no such setting)."""
    env = bounds_env(args)
    if args.spaces:
        env["BLUEDOVE_SPACES_FILE"] = str(Path(args.spaces).resolve())
    return env


def _flags_problem(args: argparse.Namespace, partition: str) -> str | None:
    """What is wrong with --sample-rate or --autoscale under this partition mode, if anything."""
    if not 0 <= args.sample_rate <= 1:
        return f"--sample-rate {args.sample_rate}: expected a fraction from 0 to 1"
    if args.autoscale and partition != MPARTITION:
        return (f"--autoscale needs --partition mpartition (the autoscaler splits and merges "
                f"mPartition's segments; {partition} is a fixed-size baseline)")
    return None


def _mode(args: argparse.Namespace, partition: str) -> str:
    """The start line's note on a baseline partition mode and a Redis Cluster store."""
    mode = "" if partition == MPARTITION else f" (partition {partition}, a baseline)"
    for role in ("matcher", "dispatcher"):
        if (cores := getattr(args, f"{role}_cpu")) is not None:
            mode += f", each {role} capped at {cores:g} CPU (a cgroup of its own)"
    if args.store_cluster is not None:
        mode += f", a Redis Cluster of {args.store_cluster} primaries with a replica each"
        if args.store_cluster < 3:
            mode += " (fewer than 3 primaries: a killed primary is not failed over)"
    return mode


def _start(cluster: LocalCluster) -> int | None:
    """Start the cluster: None once it is ready, else the exit code (it stops what it started)."""
    from bluedove.core.partition.bootstrap import SpaceMismatch

    try:
        cluster.start()  # stops what it started if it fails
    except SpaceMismatch as exc:  # the store (--store, or the data dir's) holds a table over another space
        print(f"bluedove up: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a port in use, a child that exits at once, not ready in time
        print(f"bluedove up: {exc}", file=sys.stderr)
        return 1
    return None


def _start_autoscaler(args: argparse.Namespace, cluster: LocalCluster) -> AutoscalerThread:
    """--autoscale: the autoscaler's thread on the cluster's processes, its /metrics among the targets."""
    from bluedove.autoscaler.local import AutoscalerThread
    from bluedove.autoscaler.policy import ScalingConfig
    from bluedove.runtime.settings import from_env

    config = from_env(ScalingConfig, min_matchers=args.min_matchers, max_matchers=args.max_matchers)
    scaler = AutoscalerThread(cluster, config, metrics_port=0).start()
    print(f"autoscaler  local processes, {config.min_matchers} to {config.max_matchers} matchers; metrics "
          f"http://{cluster.host}:{scaler.metrics_port}/metrics", flush=True)
    cluster.extra_targets["autoscaler"] = f"{cluster.host}:{scaler.metrics_port}"
    cluster.write_targets()
    return scaler


def _print_endpoints(cluster: LocalCluster) -> None:
    """Where the running cluster's APIs, dashboard, store, samples and processes are."""
    print(f"REST API    {cluster.url}  (docs {cluster.url}/docs)", flush=True)
    print(f"gRPC API    {cluster.grpc_url if cluster.tls else cluster.grpc_address}", flush=True)
    print(f"dashboard   {cluster.url}/dashboard", flush=True)
    print(f"cluster     {cluster.url}/v1/cluster", flush=True)
    print(f"metrics     {cluster.url}/metrics (dispatchers); every /metrics for Prometheus' file_sd: "
          f"{cluster.data_dir / 'metrics' / 'targets.json'}", flush=True)
    print(f"store       {cluster.store_url}", flush=True)
    if cluster.redis_cluster is not None:
        rc = cluster.redis_cluster
        print(f"  Redis Cluster: {rc.n_primaries} primaries {rc.primaries()}, their replicas {rc.replicas()}, "
              f"node timeout {rc.node_timeout_ms} ms, data {rc.data_dir}", flush=True)
    if cluster.sample_rate > 0:
        print(f"samples     {cluster.sample_dir}  (rate {cluster.sample_rate:g})", flush=True)
    for c in cluster.children:
        print(f"  {c.role:<10} {c.name:<4} pid {c.pid}  log {c.log_path}  metrics {cluster.metrics_url(c)}", flush=True)
    print_auth(cluster)  # "auth: off|keys", and a first admin key on a store with none
    print("ready; Ctrl-C stops every process", flush=True)


def _usage(message: str) -> int:
    """A usage error of `bluedove up` on stderr; exit code 2."""
    print(f"bluedove up: {message}", file=sys.stderr)
    return 2
