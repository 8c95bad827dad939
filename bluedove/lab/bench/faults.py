"""`bluedove bench faults`: faults done to real processes under steady publishing.

Each fault runs on a fresh local cluster (4 matchers; 2 dispatchers for `dispatcher-kill`)
while a client publishes at a steady rate, every message with its own id, retried with that
id until accepted. Afterwards every queue is drained and each delivery checked against the
brute-force oracle. Per fault: accepted messages lost, duplicates after dedup, deliveries with
the wrong subscriptions, seconds of refused publishes, seconds until the cluster is whole.
The command exits 1 when any fault lost, duplicated or misdelivered a message. The faults
and what each promises are in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags, report
from bluedove.lab.faults.inject import FAULTS

COLUMNS = ("fault", "accepted", "expected", "lost", "duplicates", "wrong", "refusals", "refused_s", "whole_s")


def _faults(value: str) -> list[str]:
    names = list(FAULTS) if value == "all" else [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in FAULTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown fault {', '.join(unknown) or value!r}; "
                                         f"one or more of {', '.join(FAULTS)}, or all")
    return names


def add_parser(sub) -> None:
    p = sub.add_parser("faults", help=BENCHES["faults"], description=__doc__.split("\n\n")[1])
    p.add_argument("--fault", type=_faults, default=list(FAULTS), metavar="NAME[,NAME…]|all",
                   help=f"the faults to run, each on a fresh cluster: {', '.join(FAULTS)} (default all)")
    p.add_argument("--rate", type=float, default=40.0, help="messages published per second (default 40)")
    p.add_argument("--subs", type=int, default=300, help="random subscriptions (default 300)")
    p.add_argument("--queues", type=int, default=8, help="queues they go to (default 8)")
    p.add_argument("--before", type=float, default=2.0, help="seconds of publishing before the fault (default 2)")
    p.add_argument("--after", type=float, default=2.0,
                   help="seconds of publishing after the cluster is whole again (default 2)")
    p.add_argument("--stop-seconds", type=float, default=10.0,
                   help="matcher-stop: how long the matcher stays SIGSTOPped (default 10)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each fault, with seeds seed..seed+N-1 (default 1)")
    p.add_argument("--data-dir", default=None,
                   help="where the clusters' data and logs go (default: a temporary folder)")
    add_output_flags(p)
    p.set_defaults(func=run_faults_bench)


def run_faults_bench(args: argparse.Namespace) -> int:
    from bluedove.lab.faults.run import run_fault

    results = []
    with tempfile.TemporaryDirectory(prefix="bluedove-faults-") as tmp:
        root = Path(args.data_dir or tmp)
        for name in args.fault:
            for k in range(args.repeat):
                seed = args.seed + k
                if not args.json:
                    print(f"{name} (seed {seed}) …", file=sys.stderr, flush=True)
                r = run_fault(name, root / f"{name}-{seed}", rate=args.rate, before_s=args.before,
                              after_s=args.after, queues=args.queues, subs=args.subs, seed=seed,
                              stop_s=args.stop_seconds)
                results.append(r.as_json() | {"seed": seed, "ok": r.ok()})
    out = {"rate": args.rate, "subs": args.subs, "queues": args.queues, "results": results}
    report(out, args.json, _print)
    return 0 if all(r["ok"] for r in results) else 1


def _print(out: dict) -> None:
    print(f"{out['rate']:g} messages/s, {out['subs']} subscriptions over {out['queues']} queues")
    print("  ".join(f"{c:>12}" for c in COLUMNS) + "  notes")
    for r in out["results"]:
        cells = [f"{r[c]:>12}" for c in COLUMNS]
        notes = ", ".join(f"{k} {v}" for k, v in r["notes"].items())
        print("  ".join(cells) + f"  {notes}" + ("" if r["ok"] else "  NOT OK"))
