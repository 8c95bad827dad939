"""`bluedove bench KIND …`: the measurements of docs/benchmarks.md, one module per kind.

Each bench module declares its own flags with `add_parser(subparsers)`. `bluedove` loads only
the bench it runs: `bench` takes the kind and the rest of the line, then builds that bench's
parser (so `bluedove --help` does not import every bench).
"""

from __future__ import annotations

import argparse
import importlib
import signal

from bluedove.runtime.extras import EXTRAS, MissingExtra

BENCHES = {
    "kernel": "in-process matching rate of one set",
    "e2e": "saturation rate of a local cluster through REST (mPartition and the baselines)",
    "gossip": "spread, detection and traffic of gossip, simulated and on real processes",
    "elastic": "the paper's Fig. 9 with the autoscaler on real processes",
    "handoff": "split, merge and takeover times for a segment of many subscriptions",
    "delivery": "deliveries/s written and drained on a local cluster",
    "publish": "publish throughput: gRPC stream vs REST batches vs single REST calls",
    "spread": "takeover → every dispatcher using the new table, on real processes",
    "latency": "publish -> delivered to waiting subscribers, per load level, and where the time goes",
    "seed": "the Spark job's seed against equal widths: balance, simulated and real saturation, risk",
    "subscribe": "subscriptions/s and latency: concurrent and sequential single calls, and :batch",
    "faults": "faults on real processes under steady publishing: messages lost, duplicated, refused seconds",
    "backpressure": "publishers pushing far beyond capacity: 503 + Retry-After, bounded memory, exact delivery",
    "soak": "a long run with churn and matcher restarts: RSS/fd growth and lost deliveries judged",
    "store-wait": "what ?wait=1 costs on a Redis Cluster: delivery batches and publishes, with and without",
    "fleet": "many parked long polls: the dispatchers' Redis connections, fds and RSS; wake-up latency",
    "deletion": "publish latency while a queue of 10,000 subscriptions is deleted (or they are unsubscribed)",
    "spaces": "1,000 spaces on one cluster: memory, create time, idle cost, and a busy space's rate beside them",
    "isolation": "a space pushed past its quota beside one publishing steadily: the steady one's p99 and rate",
    "replay": "what a space's message log costs the publish path, and how fast a replay reads the log",
}


def add_parser(sub) -> None:
    kinds = "; ".join(f"{k}: {v}" for k, v in BENCHES.items())
    b = sub.add_parser("bench", help="measurements (see docs/benchmarks.md)",
                       description=f"{kinds}. `bluedove bench KIND --help` lists a bench's flags.")
    b.add_argument("kind", choices=tuple(BENCHES), help="the bench to run")
    b.add_argument("flags", nargs=argparse.REMAINDER, help="the bench's own flags")
    b.set_defaults(func=run)


def parser(kind: str) -> argparse.ArgumentParser:
    """`bluedove bench` with the sub-command of one bench (its module imported only now)."""
    p = argparse.ArgumentParser(prog="bluedove bench")
    kinds = p.add_subparsers(dest="kind", required=True)
    try:
        module = importlib.import_module(f"bluedove.lab.bench.{kind.replace('-', '_')}")
    except ModuleNotFoundError as exc:  # most benches measure processes with the lab extra's psutil
        if exc.name not in EXTRAS["lab"]:
            raise
        raise MissingExtra(f"bluedove bench {kind}", "lab", [exc.name]) from None
    module.add_parser(kinds)
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """`bluedove bench` arguments (the kind first) as the bench sees them."""
    return parser(argv[0]).parse_args(argv)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    """Run one bench. SIGTERM (kill, a job's timeout) stops it as Ctrl-C does, so the clusters it
    started are stopped on the way out and their matchers' cgroups removed, none left running."""
    bench = parse([args.kind, *args.flags])
    signal.signal(signal.SIGTERM, _interrupt)
    return bench.func(bench)
