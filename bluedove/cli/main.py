"""The `bluedove` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time

from bluedove.forwarding import POLICIES
from bluedove.partitioning import MODES, MPARTITION

PARTITION_HELP = ("mpartition (BlueDove, the default) or a baseline of seed 001 §IV-B: p2p, full-replication; "
                  "the same on every matcher and dispatcher (default BLUEDOVE_PARTITION, else mpartition)")


def _cmd_up(args: argparse.Namespace) -> int:
    from bluedove.cli.cluster import LocalCluster
    from bluedove.space import SpaceError

    try:  # the space is checked before anything starts
        cluster = LocalCluster(matchers=args.matchers, dispatchers=args.dispatchers, http_port=args.http_port,
                               grpc_port=args.grpc_port, data_dir=args.data_dir, store=args.store,
                               space_file=args.space, policy=args.policy, partition=args.partition)
    except SpaceError as exc:
        where = "" if str(exc).startswith(str(args.space)) else f"{args.space}: "
        print(f"bluedove up: --space {where}{exc}", file=sys.stderr)
        return 2
    partition = cluster.partition  # the flag, else BLUEDOVE_PARTITION, else mpartition
    if args.autoscale and partition != MPARTITION:
        print(f"bluedove up: --autoscale needs --partition mpartition (the autoscaler splits and merges "
              f"mPartition's segments; {partition} is a fixed-size baseline)", file=sys.stderr)
        return 2
    stopping = False

    def on_signal(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    mode = "" if partition == MPARTITION else f" (partition {partition}, a baseline)"
    print(f"starting BlueDove: {args.matchers} matchers, {args.dispatchers} dispatcher(s), data in {args.data_dir}"
          f"{mode}", flush=True)
    try:
        cluster.start()  # stops what it started if it fails
    except RuntimeError as exc:  # a port in use, a child that exits at once, not ready in time
        print(f"bluedove up: {exc}", file=sys.stderr)
        return 1
    scaler = None
    if args.autoscale:
        from autoscaler.policy import ScalingConfig
        from bluedove.cli.autoscale import AutoscalerThread
        from bluedove.settings import from_env

        config = from_env(ScalingConfig, min_matchers=args.min_matchers, max_matchers=args.max_matchers)
        scaler = AutoscalerThread(cluster, config).start()
        print(f"autoscaler  local processes, {config.min_matchers} to {config.max_matchers} matchers", flush=True)
    print(f"REST API    {cluster.url}  (docs {cluster.url}/docs)", flush=True)
    print(f"gRPC API    {cluster.grpc_address}", flush=True)
    print(f"dashboard   {cluster.url}/dashboard", flush=True)
    print(f"cluster     {cluster.url}/v1/cluster", flush=True)
    print(f"metrics     {cluster.url}/metrics", flush=True)
    print(f"store       {cluster.store_url}", flush=True)
    for c in cluster.children:
        print(f"  {c.role:<10} {c.name:<4} pid {c.pid}  log {c.log_path}", flush=True)
    print("ready; Ctrl-C stops every process", flush=True)
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


def _cmd_matcher(args: argparse.Namespace) -> int:
    from bluedove.settings import MatcherSettings, from_env
    from matcher.server import serve

    settings = from_env(MatcherSettings, id=args.id, host=args.host, port=args.port, store_url=args.store,
                        leave_on_sigterm=True if args.leave_on_sigterm else None, partition=args.partition)
    if args.join and settings.partition != MPARTITION:
        print(f"bluedove matcher: --join needs --partition mpartition (a joining matcher is given a split of "
              f"mPartition's segments; {settings.partition} is a fixed-size baseline)", file=sys.stderr)
        return 2
    asyncio.run(serve(settings, deliver=args.deliver, seeds=tuple(args.join or ())))
    return 0


def _cmd_dispatcher(args: argparse.Namespace) -> int:
    from bluedove.settings import DispatcherSettings, from_env
    from bluedove.space import load_space
    from dispatcher.server import serve

    space = load_space(args.space)
    settings = from_env(DispatcherSettings, id=args.id, host=args.host, http_port=args.http_port,
                        grpc_port=args.grpc_port, store_url=args.store, policy=args.policy,
                        partition=args.partition)
    serve(settings, space)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from bluedove.cli.demo import run_demo

    return run_demo(args)


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.kind == "handoff":
        from bluedove.cli.bench_handoff import run_handoff_bench

        args.subs = args.n_subs or 40_000
        return run_handoff_bench(args)
    if args.kind == "elastic":
        from bluedove.cli.bench_elastic import run_elastic_bench

        args.subs = args.n_subs or 40_000
        args.step_s = args.step_s or 30.0
        return run_elastic_bench(args)
    if args.kind in ("delivery", "publish"):
        from bluedove.cli.bench_delivery import run_delivery_bench
        from bluedove.cli.bench_publish import run_publish_bench

        return (run_delivery_bench if args.kind == "delivery" else run_publish_bench)(args)
    if args.kind == "e2e":
        from bluedove.cli.bench_e2e import run_e2e

        for flag, default in (("matchers", 4), ("dispatchers", 1), ("publishers", 2), ("batch", 200), ("step_s", 6.0)):
            if getattr(args, flag) is None:
                setattr(args, flag, default)
        return run_e2e(args)
    if args.kind == "gossip":
        from bluedove.cli.bench_gossip import run_gossip_bench

        return run_gossip_bench(args)
    from bluedove.cli.bench import run_bench

    return run_bench(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bluedove", description="An elastic attribute-based publish/subscribe service.")
    sub = p.add_subparsers(dest="command", required=True)

    def cluster_flags(sp: argparse.ArgumentParser, http_port: int, grpc_port: int = 0) -> None:
        sp.add_argument("--matchers", type=int, default=4, help="matcher processes (default 4)")
        sp.add_argument("--dispatchers", type=int, default=1, help="dispatcher processes sharing the port")
        sp.add_argument("--http-port", type=int, default=http_port, help="REST port (0 = any free port)")
        sp.add_argument("--grpc-port", type=int, default=grpc_port, help="gRPC API port (0 = any free port)")
        sp.add_argument("--store", default=None, help="redis://host:port/db; default: a private redis-server")
        sp.add_argument("--space", default=None, help="YAML space file (default: x0..x3 in [0, 1000))")
        sp.add_argument("--policy", choices=POLICIES, default="adaptive", help="forwarding policy")
        sp.add_argument("--partition", choices=MODES, default=None, help=PARTITION_HELP)

    up = sub.add_parser("up", help="run a local cluster as real processes until Ctrl-C")
    cluster_flags(up, 8080, 50051)
    up.add_argument("--data-dir", default=".bluedove", help="embedded Redis data and process logs")
    up.add_argument("--autoscale", action="store_true",
                    help="add matchers when saturated and remove them when idle (local processes)")
    up.add_argument("--min-matchers", type=int, default=None, help="with --autoscale (default 1)")
    up.add_argument("--max-matchers", type=int, default=None, help="with --autoscale (default 8)")
    up.set_defaults(func=_cmd_up)

    demo = sub.add_parser("demo", help="`up` plus the traffic workload, a live progress line and a summary")
    cluster_flags(demo, 0)
    demo.add_argument("--data-dir", default=None, help="default: a fresh temporary folder")
    demo.add_argument("--duration", type=float, default=30.0, help="seconds of publishing")
    demo.add_argument("--rate", type=float, default=300.0, help="sensor messages per second")
    demo.add_argument("--drivers", type=int, default=300, help="subscribers, each with its own queue")
    demo.add_argument("--seed", type=int, default=7)
    demo.set_defaults(func=_cmd_demo)

    m = sub.add_parser("matcher", help="run one matcher (started by `up`)")
    m.add_argument("--id", required=True)
    m.add_argument("--host", default="127.0.0.1")
    m.add_argument("--port", type=int, required=True)
    m.add_argument("--store", required=True)
    m.add_argument("--deliver", choices=("store", "count"), default="store",
                   help="count: match without writing deliveries (benchmarks)")
    m.add_argument("--join", action="append", metavar="HOST:PORT",
                   help="a member to gossip with first (repeatable); the table's members are always tried")
    m.add_argument("--leave-on-sigterm", action="store_true",
                   help="on SIGTERM hand the segments to neighbours before exiting (Kubernetes scale-in)")
    m.add_argument("--partition", choices=MODES, default=None, help=PARTITION_HELP)
    m.set_defaults(func=_cmd_matcher)

    d = sub.add_parser("dispatcher", help="run one dispatcher (started by `up`)")
    d.add_argument("--id", required=True)
    d.add_argument("--host", default="127.0.0.1")
    d.add_argument("--http-port", type=int, required=True)
    d.add_argument("--grpc-port", type=int, default=None, help="gRPC API port (default 50051; 0 = any free port)")
    d.add_argument("--store", required=True)
    d.add_argument("--space", default=None)
    d.add_argument("--policy", choices=POLICIES, default="adaptive")
    d.add_argument("--partition", choices=MODES, default=None, help=PARTITION_HELP)
    d.set_defaults(func=_cmd_dispatcher)

    b = sub.add_parser("bench", help="measurements (see docs/benchmarks.md)")
    b.add_argument("kind", choices=("kernel", "e2e", "gossip", "elastic", "handoff", "delivery", "publish"),
                   help="kernel: in-process matching rate of one set; e2e: saturation rate of a local cluster "
                        "through REST; gossip: spread, detection, traffic; "
                        "elastic: seed 001's Fig. 9 with the autoscaler on real processes; "
                        "handoff: split, merge and takeover times for a segment of many subscriptions; "
                        "delivery: deliveries/s written and drained on a local cluster; publish: gRPC vs REST")
    b.add_argument("--workload", default="paper",
                   help="paper or sparse; e2e also traffic (see shared WORKLOADS.md)")
    b.add_argument("--partitions", type=int, default=20, help="matchers the space is cut for")
    b.add_argument("--messages", type=int, default=20000)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.add_argument("--sigma", type=float, default=None, help="variant: subscription skew (default 250)")
    b.add_argument("--adverse", type=int, default=None, help="variant: messages skewed on the first j dims")
    b.add_argument("--dims", type=int, default=None, help="variant: only the first k dimensions (default 4)")
    b.add_argument("--subs", dest="n_subs", type=int, default=None, help="variant: number of subscriptions")
    b.add_argument("--repeat", type=int, default=5, help="timed runs; the best is reported with the spread")
    b.add_argument("--verify", type=int, default=200, help="messages checked against brute force")
    # Flags several benches share take their default per bench (None here, resolved in _cmd_bench
    # or by the bench itself).
    b.add_argument("--step-s", type=float, default=None, help="seconds per rate step (e2e 6, elastic 30)")
    b.add_argument("--deliver", choices=("count", "store"), default="count",
                   help="count: matchers count matches (what seed 001 measured); store: write deliveries")
    e = b.add_argument_group("e2e")
    e.add_argument("--matchers", type=int, default=None, help="matcher processes (e2e 4, delivery/publish 2)")
    e.add_argument("--dispatchers", type=int, default=None, help="dispatcher processes sharing the port (1)")
    e.add_argument("--policy", choices=POLICIES, default="adaptive", help="forwarding policy")
    e.add_argument("--batch", type=int, default=None, help="messages per POST /v1/messages:batch (e2e 200)")
    e.add_argument("--publishers", type=int, default=None, help="publisher processes (2)")
    e.add_argument("--start-rate", type=float, default=1000.0, help="first step's rate (msg/s)")
    e.add_argument("--factor", type=float, default=1.3, help="each step's rate over the previous one's")
    e.add_argument("--max-steps", type=int, default=15)
    e.add_argument("--partition", action="append", default=None, metavar="SYSTEM[,SYSTEM...]",
                   help="systems to run in turn on the same subscriptions and messages: mpartition (BlueDove, "
                        "default), p2p, full-replication (seed 001 §IV-B); repeatable or a comma list")
    e.add_argument("--rounds", type=int, default=1,
                   help="run the --partition systems this many times (each round starts one system later); "
                        "each system's best round is reported")
    e.add_argument("--baseline-policy", choices=POLICIES, default=None,
                   help="forwarding policy of the p2p and full-replication runs (default: --policy)")
    el = b.add_argument_group("elastic")
    el.add_argument("--rates", default="1000,2000,3000,4000", help="msg/s of each step")
    el.add_argument("--cooldown-s", type=float, default=90.0, help="seconds observed after publishing stops")
    el.add_argument("--min-matchers", type=int, default=2)
    el.add_argument("--max-matchers", type=int, default=8)
    el.add_argument("--plot", default=None, help="write the timeline as a PNG here")
    from bluedove.cli.bench_flags import add_cluster_bench_flags

    add_cluster_bench_flags(b)  # delivery, publish (flags defined above are shared, not redefined)
    b.set_defaults(func=_cmd_bench)

    from bluedove.cli.autoscaler_cmd import add_command as add_autoscaler
    from bluedove.cli.pubsub import add_commands
    from bluedove.cli.sim import add_parser as add_sim_parser

    add_sim_parser(sub)
    add_autoscaler(sub)  # autoscaler (Kubernetes)
    add_commands(sub)  # subscribe, publish, poll
    return p


def main(argv: list[str] | None = None) -> None:
    # BLUEDOVE_LOG_LEVEL=INFO shows table changes and hand-off timings as they happen.
    level = os.environ.get("BLUEDOVE_LOG_LEVEL", "WARNING").upper()
    logging.basicConfig(level=getattr(logging, level, logging.WARNING),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    parser = build_parser()
    from bluedove.cli.pubsub import COMMANDS, attach_values

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in COMMANDS:
        argv = attach_values(argv)
    # Dimension flags (--x0 …) depend on the cluster's space: commands that take them get the rest.
    args, args.extra = parser.parse_known_args(argv)
    if args.extra and not getattr(args, "dimension_flags", False):
        parser.error(f"unrecognized arguments: {' '.join(args.extra)}")
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
