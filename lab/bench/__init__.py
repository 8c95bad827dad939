"""`bluedove bench`: the measurements of docs/benchmarks.md."""

from __future__ import annotations

import argparse

from bluedove.forwarding import POLICIES
from lab.bench.flags import add_cluster_bench_flags


def run(args: argparse.Namespace) -> int:
    if args.kind == "handoff":
        from lab.bench.handoff import run_handoff_bench

        args.subs = args.n_subs or 40_000
        return run_handoff_bench(args)
    if args.kind == "elastic":
        from lab.bench.elastic import run_elastic_bench

        args.subs = args.n_subs or 40_000
        args.step_s = args.step_s or 30.0
        return run_elastic_bench(args)
    if args.kind in ("delivery", "publish"):
        from lab.bench.delivery import run_delivery_bench
        from lab.bench.publish import run_publish_bench

        return (run_delivery_bench if args.kind == "delivery" else run_publish_bench)(args)
    if args.kind == "e2e":
        from lab.bench.e2e import run_e2e

        for flag, default in (("matchers", 4), ("dispatchers", 1), ("publishers", 2), ("batch", 200), ("step_s", 6.0)):
            if getattr(args, flag) is None:
                setattr(args, flag, default)
        return run_e2e(args)
    if args.kind == "gossip":
        from lab.bench.gossip import run_gossip_bench

        return run_gossip_bench(args)
    from lab.bench.kernel import run_bench

    return run_bench(args)


def add_parser(sub) -> None:
    b = sub.add_parser("bench", help="measurements (see docs/benchmarks.md)")
    b.add_argument("kind", choices=("kernel", "e2e", "gossip", "elastic", "handoff", "delivery", "publish"),
                   help="kernel: in-process matching rate of one set; e2e: saturation rate of a local cluster "
                        "through REST; gossip: spread, detection, traffic; "
                        "elastic: seed 001's Fig. 9 with the autoscaler on real processes; "
                        "handoff: split, merge and takeover times for a segment of many subscriptions; "
                        "delivery: deliveries/s written and drained on a local cluster; publish: gRPC vs REST")
    b.add_argument("--workload", default="paper",
                   help="paper or sparse; e2e also traffic (see docs/workloads.md)")
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
    # Flags several benches share take their default per bench (None here, resolved in run
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
    add_cluster_bench_flags(b)  # delivery, publish (flags defined above are shared, not redefined)
    b.set_defaults(func=run)


