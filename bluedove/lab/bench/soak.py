"""`bluedove bench soak`: a long steady run with churn on a local cluster, judged for leaks and
lost deliveries (docs/benchmarks.md, "Soak").

A paced publisher (a modest fraction of capacity), subscriptions swapped and queues retired and
created all along, one matcher restarted (SIGKILL and SIGTERM in turn, then started again with
the same id and port) every `--restart-every` seconds, pollers that ack all they get. Each
process's RSS and open file descriptors are sampled over time. The run FAILS (exit 1, the
reasons printed) when a process grows over 10 % after warm-up, or any expected delivery is
lost, duplicated or wrong (bluedove/lab/bench/soak_judge.py says how each is judged).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time

from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags, report
from bluedove.lab.bench.soak_judge import LIMIT, WARMUP, Verdict, failures, judge_series
from bluedove.lab.bench.soak_run import Plan, Soak
from bluedove.local.cluster import LocalCluster

# Open fds may rise this much above the first window's median without failing: redis-server's
# are its clients' connections, and pools grow with the load of the moment (26 -> 30 in a
# 45-second run on a loaded machine, 2026-11-28); a leak keeps growing past any constant.
FD_SLACK = 8


def add_parser(sub) -> None:
    p = sub.add_parser("soak", help=BENCHES["soak"], description=__doc__)
    p.add_argument("--minutes", type=float, default=30.0, help="length of the run (default 30)")
    p.add_argument("--rate", type=float, default=100.0,
                   help="messages/s published, a modest fraction of capacity (default 100)")
    p.add_argument("--matchers", type=int, default=2, help="matcher processes (default 2)")
    p.add_argument("--queues", type=int, default=8, help="queues alive at any time (default 8)")
    p.add_argument("--subs-per-queue", type=int, default=10, help="subscriptions per queue (default 10)")
    p.add_argument("--churn-every", type=float, default=1.0,
                   help="seconds between subscription swaps (one removed, one added) (default 1)")
    p.add_argument("--queue-every", type=float, default=None,
                   help="seconds between queue swaps (one created, one drained and deleted) "
                        "(default: 30, or a tenth of the run if shorter)")
    p.add_argument("--restart-every", type=float, default=None,
                   help="seconds between matcher restarts, 0 for none (default: 300, or a third of "
                        "the run if that is shorter)")
    p.add_argument("--sample-every", type=float, default=None,
                   help="seconds between RSS/fd samples (default: 10, or a sixtieth of the run if shorter)")
    p.add_argument("--warmup", type=float, default=WARMUP,
                   help=f"fraction of the run not judged for growth, from each process's start (default {WARMUP})")
    p.add_argument("--ids", action="store_true",
                   help="give every message an idempotency id, so publishes are retried through a restart "
                        "(the store keeps each id for its 10-minute dedup window: Redis grows for that long, "
                        "so use a warm-up past 10 minutes)")
    p.add_argument("--expire", type=float, default=None,
                   help="seconds the store keeps dedup marks and unsubscribe tombstones in this run; they "
                        "grow the store until the first ones expire, which must happen within warm-up "
                        "(default: half the warm-up, at most 120)")
    p.add_argument("--drain", type=float, default=30.0,
                   help="seconds the pollers may take to empty the queues after the load (default 30)")
    p.add_argument("--data-dir", default=None, help="the cluster's data dir (default: a temporary one)")
    add_output_flags(p)
    p.set_defaults(func=run)


def plan_of(args: argparse.Namespace) -> Plan:
    seconds = args.minutes * 60
    return Plan(
        seconds=seconds, rate=args.rate, queues=args.queues, subs_per_queue=args.subs_per_queue,
        churn_every=args.churn_every,
        queue_every=args.queue_every if args.queue_every is not None else min(30.0, seconds / 10),
        restart_every=args.restart_every if args.restart_every is not None else min(300.0, seconds / 3),
        sample_every=args.sample_every if args.sample_every is not None else min(10.0, seconds / 60),
        drain_s=args.drain, ids=args.ids, seed=args.seed)


def judge(series: dict[str, list[tuple[float, int, int]]], seconds: float, warmup: float = WARMUP) -> list[Verdict]:
    """Each process's RSS and fds (see soak_judge): 10 % after warm-up, fds with FD_SLACK."""
    out = []
    for key, pts in sorted(series.items()):
        out.append(judge_series(key, "rss", [(t, r) for t, r, _ in pts], 0.0, seconds, warmup=warmup))
        out.append(judge_series(key, "fds", [(t, f) for t, _, f in pts], 0.0, seconds, warmup=warmup,
                                slack=FD_SLACK))
    return out


def _processes(series: dict, verdicts: list[Verdict]) -> dict:
    out = {}
    for key, pts in sorted(series.items()):
        v = {x.metric: x.to_json() for x in verdicts if x.series == key}
        out[key] = {"samples": len(pts), "rss_start": pts[0][1], "rss_end": pts[-1][1],
                    "fds_start": pts[0][2], "fds_end": pts[-1][2], "rss": v.get("rss"), "fds": v.get("fds"),
                    "series": [list(p) for p in pts]}
    return out


def _interrupt(_signum, _frame) -> None:
    raise KeyboardInterrupt  # SIGTERM (nohup, kill): stop the cluster on the way out as Ctrl-C does


def run(args: argparse.Namespace) -> int:
    plan = plan_of(args)
    signal.signal(signal.SIGTERM, _interrupt)
    with tempfile.TemporaryDirectory(prefix="bluedove-soak-") as tmp:
        expire = args.expire if args.expire is not None else min(120.0, args.warmup * plan.seconds / 2)
        for name in ("DEDUP_WINDOW_S", "RETRY_DEDUP_S", "TOMBSTONE_TTL_S"):  # the children inherit them
            os.environ[f"BLUEDOVE_{name}"] = str(max(1, round(expire)))
        cluster = LocalCluster(matchers=args.matchers, dispatchers=1, http_port=0, data_dir=args.data_dir or tmp,
                               quiet=True, restart=False)
        cluster.start()
        try:
            dims = [d.to_json() for d in cluster.space.dimensions]
            soak = Soak(cluster, plan, dims)
            began = time.time()
            asyncio.run(soak.run())
        finally:
            cluster.stop()
    deliveries = soak.ledger.summary()
    verdicts = judge(soak.stats.series, plan.seconds, args.warmup)
    why = failures(verdicts, deliveries)
    s = soak.stats
    result = {
        "kind": "soak", "ok": not why, "failures": why, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                   time.gmtime(began)),
        "minutes": args.minutes, "rate": plan.rate, "matchers": args.matchers, "queues": plan.queues,
        "subs_per_queue": plan.subs_per_queue, "warmup_fraction": args.warmup, "ids": args.ids,
        "expire_s": max(1, round(expire)), "growth_limit": LIMIT,
        "fd_slack": FD_SLACK, "restart_every_s": plan.restart_every, "sample_every_s": plan.sample_every,
        "deliveries": deliveries, "restarts": s.restarts,
        "churn": {"subscribed": s.subscribed, "unsubscribed": s.unsubscribed, "queues_created": s.queues_created,
                  "queues_deleted": s.queues_deleted},
        "errors": s.errors, "processes": _processes(s.series, verdicts),
    }
    report(result, args.json, _print)
    if why:
        print("soak FAILED: " + "; ".join(why), file=sys.stderr)
    return 0 if not why else 1


def _mb(b: int) -> str:
    return f"{b / 2**20:.1f}"


def _print(r: dict) -> None:
    d = r["deliveries"]
    print(f"soak: {r['minutes']} min at {r['rate']:.0f} msg/s, {r['matchers']} matchers, {r['queues']} queues x "
          f"{r['subs_per_queue']} subscriptions, started {r['started']}")
    print(f"  published {d['published']} (failed {d['failed_messages']}), expected deliveries {d['expected']}, "
          f"deliveries {d['deliveries']}, lost {d['lost']}, duplicates {d['duplicates']}, wrong {d['wrong']}")
    c = r["churn"]
    print(f"  churn: {c['subscribed']} subscribed, {c['unsubscribed']} unsubscribed, {c['queues_created']} queues "
          f"created, {c['queues_deleted']} deleted")
    for x in r["restarts"]:
        print(f"  restart: {x['matcher']} by {x['signal']} at {x['at_s']} s, alive again in {x['alive_again_s']} s")
    if r["errors"]:
        print(f"  errors (retried or counted as failed): {r['errors']}")
    print(f"  {'process':<10} {'RSS MB start->end':>20} {'growth':>8} {'fds start->end':>16} {'growth':>8}")
    for key, p in r["processes"].items():
        g = [("n/a" if (v := p[m]) is None or v["growth"] is None else f"{v['growth']:+.1%}") for m in ("rss", "fds")]
        print(f"  {key:<10} {_mb(p['rss_start']) + ' -> ' + _mb(p['rss_end']):>20} {g[0]:>8} "
              f"{str(p['fds_start']) + ' -> ' + str(p['fds_end']):>16} {g[1]:>8}")
    print("  PASS" if r["ok"] else "  FAIL: " + "; ".join(r["failures"]))
