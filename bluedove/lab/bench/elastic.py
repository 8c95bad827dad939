"""`bluedove bench elastic`: the paper's Fig. 9 on real processes.

Start with the minimum of matchers and the autoscaler on; raise the message rate in steps;
the autoscaler adds matchers (each joins by a split) and response time should fall after
each; then stop publishing and it removes them (each leaves by a merge). Every second the
timeline records the offered and achieved rate, the batch response time, the matchers that
own segments, and the cluster's events. Nothing published may be lost: the bench counts the
202s and the matchers' matched totals.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import tempfile
import time

import numpy as np

from bluedove.autoscaler.local import AutoscalerThread
from bluedove.autoscaler.policy import ScalingConfig
from bluedove.client.http import AsyncHttpTransport
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_deliver_flag, add_output_flags
from bluedove.lab.bench.stage import seed_catalogue
from bluedove.lab.load import PacedPublisher, pool
from bluedove.lab.workloads import paper
from bluedove.local.cluster import LocalCluster
from bluedove.local.cpu_quota import add_cpu_flag, cpu_flag_problem
from bluedove.store import Store

BATCH = 200


def _publisher(transport: AsyncHttpTransport, points: np.ndarray, names: list[str]) -> PacedPublisher:
    """Open loop: a batch of BATCH every BATCH/rate seconds, at most 16 awaiting their 202
    (every message of the batch matched, and stored in store mode); the points in turn."""
    turn = itertools.count()

    async def send() -> bool:
        msgs = []
        for _ in range(BATCH):
            p = points[next(turn) % len(points)]
            msgs.append({"attributes": {n: float(v) for n, v in zip(names, p)}})
        await transport.publish_batch(msgs)
        return True

    return PacedPublisher(send, BATCH, inflight=16)


def _wait_settled(cluster: LocalCluster, limit_s: float = 180) -> None:
    """Until the matchers' set sizes stop changing (they have tailed the whole catalogue)."""
    deadline, last = time.monotonic() + limit_s, -1
    while time.monotonic() < deadline:
        total = sum(sum(m["subscriptions"].values()) for m in cluster.cluster_state()["members"])
        if total == last and total > 0:
            return
        last = total
        time.sleep(2.0)


async def _owners(store: Store) -> int:
    """Matchers owning segments in the stored table (the store answers even when the
    dispatcher is saturated)."""
    table = await store.get_table()
    return len(table["members"]) if table else 0


async def run_elastic(args) -> dict:
    w = paper.get("paper", seed=args.seed, n_subs=args.subs)
    config = ScalingConfig(min_matchers=args.min_matchers, max_matchers=args.max_matchers, window_s=5.0,
                           out_cooldown_s=8.0, in_window_s=20.0, in_cooldown_s=10.0)
    with tempfile.TemporaryDirectory(prefix="bluedove-elastic-") as tmp:
        # Off the event loop: start() runs its own (asyncio.run) to write the first table.
        cluster = await asyncio.to_thread(LocalCluster(
            matchers=args.min_matchers, http_port=0, data_dir=tmp, quiet=True, restart=False,
            matcher_env={"BLUEDOVE_HANDOFF_GRACE_S": "5"}, deliver=args.deliver,
            matcher_cpu=args.matcher_cpu).start)
        store = Store(cluster.store_url)
        transport = pool(cluster.url, 64, timeout_s=60)
        scaler = None
        try:
            # Straight into the catalogue (minutes faster than 40,000 REST calls); the matchers
            # take them from the catalogue log they tail, as they do any subscription.
            subscribe_s = await seed_catalogue(cluster.store_url, w)
            await asyncio.to_thread(_wait_settled, cluster)
            scaler = AutoscalerThread(cluster, config).start()
            pub = _publisher(transport, w.messages(50_000, seed=args.seed + 1), w.space.names)
            stop = asyncio.Event()
            task = asyncio.create_task(pub.run(stop.is_set))
            timeline, t0 = [], time.monotonic()
            steps = [float(x) for x in args.rates.split(",")]
            schedule = [(i * args.step_s, r) for i, r in enumerate(steps)] + [(len(steps) * args.step_s, 0.0)]
            end = len(steps) * args.step_s + args.cooldown_s
            last_sent = last_acc = 0
            while (now := time.monotonic() - t0) < end:
                pub.rate = [r for at, r in schedule if at <= now][-1]
                await asyncio.sleep(1.0)
                recent = [s for t, s in pub.latencies if t >= time.monotonic() - 1.0]
                owners = await _owners(store)
                timeline.append({"t": round(time.monotonic() - t0, 1), "offered": pub.rate,
                                 "sent": pub.sent - last_sent, "accepted": pub.accepted - last_acc,
                                 "p50_ms": round(1000 * float(np.median(recent)), 1) if recent else None,
                                 "matchers": owners})
                last_sent, last_acc = pub.sent, pub.accepted
            stop.set()
            await task
            events = cluster.cluster_state()["autoscaler"]["events"]
        finally:
            if scaler is not None:
                scaler.stop()
            await transport.close()
            await store.close()
            cluster.stop()
    wall0 = time.time() - (time.monotonic() - t0)
    for e in events:  # event times on the timeline's clock
        e["t"] = round(_epoch(e["at"]) - wall0, 1)
    return {"bench": "elastic", "workload": "paper", "deliver": args.deliver, "matcher_cpu": args.matcher_cpu,
            "subscriptions": w.n_subs,
            "subscribe_s": round(subscribe_s, 1),
            "rates": steps, "step_s": args.step_s, "sent": pub.sent, "accepted": pub.accepted,
            "refused": pub.refused, "skipped": pub.skipped,
            "timeline": timeline, "events": events, "drops": _drops(timeline, events)}


def _epoch(at: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(at).timestamp()


def _drops(timeline: list[dict], events: list[dict]) -> list[dict]:
    """For each split (a matcher joining): response time in the 3 s before, and how long after
    it the per-second p50 first fell below 80 % of that."""
    out = []
    for e in events:
        if e["action"] != "split":
            continue
        before = [p["p50_ms"] for p in timeline if e["t"] - 3 <= p["t"] < e["t"] and p["p50_ms"]]
        if not before:
            continue
        ref = float(np.mean(before))
        after = [p for p in timeline if p["t"] > e["t"] and p["p50_ms"] is not None and p["p50_ms"] < 0.8 * ref]
        out.append({"split_t": e["t"], "p50_before_ms": round(ref, 1),
                    "drop_after_s": round(after[0]["t"] - e["t"], 1) if after else None})
    return out


def add_parser(sub) -> None:
    p = sub.add_parser("elastic", help=BENCHES["elastic"])
    p.add_argument("--subs", type=int, default=40_000, help="subscriptions (default 40,000)")
    p.add_argument("--rates", default="1000,2000,3000,4000", help="msg/s of each step")
    p.add_argument("--step-s", type=float, default=30.0, help="seconds per rate step (default 30)")
    p.add_argument("--cooldown-s", type=float, default=90.0, help="seconds observed after publishing stops")
    p.add_argument("--min-matchers", type=int, default=2)
    p.add_argument("--max-matchers", type=int, default=8)
    p.add_argument("--plot", default=None, help="write the timeline as a PNG here")
    add_deliver_flag(p)
    add_cpu_flag(p)
    add_output_flags(p)
    p.set_defaults(func=run_elastic_bench)


def run_elastic_bench(args) -> int:
    from bluedove.lab.plots import PlotsUnavailable, plot_elastic, pyplot

    if problem := cpu_flag_problem(args):
        print(f"bench elastic: {problem}", file=sys.stderr)
        return 2
    if args.plot:
        try:
            pyplot()  # before minutes of measuring, not after
        except PlotsUnavailable as exc:
            print(f"bench elastic: --plot: {exc}", file=sys.stderr)
            return 2
    result = asyncio.run(run_elastic(args))
    if args.plot:
        plot_elastic(result, args.plot)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['subscriptions']} subscriptions ({result['subscribe_s']} s to create), "
          f"deliver={result['deliver']}; "
          f"{result['sent']} sent, {result['accepted']} accepted, {result['refused']} refused, "
          f"{result['skipped']} not sent (the open-loop client held back)")
    print("   t  offered  accepted  p50 ms  matchers")
    for p in result["timeline"]:
        print(f"{p['t']:>5} {p['offered']:>8.0f} {p['accepted']:>9} {p['p50_ms']!s:>7} {p['matchers']:>9}")
    for e in result["events"]:
        print(f"{e['t']:>6} {e['action']:<10} {e['reason']}")
    for d in result["drops"]:
        print(f"split at {d['split_t']} s: p50 before {d['p50_before_ms']} ms, fell below 80 % after "
              f"{d['drop_after_s']} s")
    return 0
