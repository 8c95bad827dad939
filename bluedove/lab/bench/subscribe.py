"""`bluedove bench subscribe`: the subscribe path on a local cluster, three ways in turn.

1. `concurrent`: `--clients` clients (over `--procs` processes) each sending single
   POST /v1/subscriptions to a queue of its own, the next as soon as one answers;
2. `sequential`: one client, one subscribe at a time;
3. `batch`: POST /v1/subscriptions:batch of `--batch` subscriptions each (a fresh queue per
   call), `--batch-calls` calls under way.

Subscriptions/s, p50 and p99 of each, and the CPU of redis, the dispatcher and the matchers
(psutil) over each phase. Predicates come from the workload's subscriptions. The clients talk
REST through aiohttp with the SDK's decoding (as the delivery bench's pollers do: a quarter of
httpx's CPU per request, which matters on two cores shared with the cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bluedove.lab.aio_transport import SubscribeTransport
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags, add_workload_flags, workload_or_none
from bluedove.lab.bench.cpu import cpu_seconds
from bluedove.lab.bench.store_nodes import BenchStore, StoreShape
from bluedove.local.cluster import LocalCluster

MODES = ("concurrent", "sequential", "batch")  # the default, in turn
CHURN = "churn"  # opt-in: publishing with and without churn (bluedove/lab/bench/churn.py)


def _predicates(workload: str, seed: int, n: int) -> list[dict]:
    from bluedove.lab.workloads.paper import get as get_workload

    w = get_workload(workload, seed=seed, n_subs=n)
    return [{k: list(v) for k, v in w.predicates(j).items()} for j in range(n)]


async def _run(mode: str, url: str, preds: list[dict], tasks: int, batch: int, ready, go) -> tuple:
    """Calls of one mode: once the process is ready (its queues made, `ready` told), the window
    [start, until] comes from `go`. (subscriptions answered inside it, the latency in seconds
    of each call inside it, the first error)."""
    t = SubscribeTransport(url, max(tasks, 1), timeout_s=60.0)
    done, answered, lat, err = 0, 0, [], None
    queues = [await t.create_queue() for _ in range(tasks)]
    ready.put(os.getpid())
    start, until = await asyncio.to_thread(go.get)
    turn = [0]

    def next_preds(n: int) -> list[dict]:
        i = turn[0]
        turn[0] += n
        return [preds[(i + k) % len(preds)] for k in range(n)]

    async def client(q: dict) -> None:
        nonlocal done, answered, err
        while time.monotonic() < until and err is None:
            t0 = time.monotonic()
            try:
                if mode == "batch":
                    q = await t.create_queue()  # a queue holds at most 10,000 subscriptions
                    items = [{"queue": q["queue"], "predicates": p} for p in next_preds(batch)]
                    n = len(await t.subscribe_batch(items, q["token"]))
                else:
                    await t.subscribe({"queue": q["queue"], "predicates": next_preds(1)[0]}, q["token"])
                    n = 1
            except Exception as exc:  # noqa: BLE001 - reported by the bench
                err = repr(exc)
                return
            t1 = time.monotonic()
            answered += n
            if t0 >= start and t1 <= until:
                done += n
                lat.append(t1 - t0)

    try:
        await asyncio.gather(*(client(q) for q in queues))
    finally:
        await t.close()
    return done, lat, err, answered


def client_main(mode: str, url: str, preds: list[dict], tasks: int, batch: int, ready, go, results) -> None:
    try:
        results.put(asyncio.run(_run(mode, url, preds, tasks, batch, ready, go)))
    except Exception as exc:  # noqa: BLE001 - reported by the bench
        results.put((0, [], repr(exc), 0))


def _measure(mode: str, args, url: str, pids: dict[str, int], preds: list[dict]) -> dict:
    if mode == "concurrent":
        procs_n, tasks = args.procs, [args.clients // args.procs + (i < args.clients % args.procs)
                                      for i in range(args.procs)]
    elif mode == "sequential":
        procs_n, tasks = 1, [1]
    else:
        procs_n, tasks = 1, [args.batch_calls]
    ctx = mp.get_context("spawn")
    results, ready, go = ctx.Queue(), ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=client_main, daemon=True,
                         args=(mode, url, preds, tasks[i], args.batch, ready, go, results))
             for i in range(procs_n)]
    for p in procs:
        p.start()
    for _ in procs:  # every client process started and its queues made (slow on a loaded machine)
        ready.get(timeout=300)
    start = time.monotonic() + args.warmup
    until = start + args.duration
    for _ in procs:
        go.put((start, until))
    time.sleep(max(0.0, start - time.monotonic()))
    before = {n: cpu_seconds(p) for n, p in pids.items()}
    load = os.getloadavg()[0]
    time.sleep(max(0.0, until - time.monotonic()))
    cpu = {n: round(100 * (cpu_seconds(p) - before[n]) / args.duration, 1) for n, p in pids.items()}
    outs = [results.get(timeout=args.duration + 300) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    done = sum(o[0] for o in outs)
    lat = np.array([x for o in outs for x in o[1]]) * 1000
    roles: dict[str, float] = {}
    for n, v in cpu.items():
        role = {"m": "matchers", "d": "dispatcher"}.get(n[0], n)
        roles[role] = round(roles.get(role, 0.0) + v, 1)
    return {"subs_per_s": round(done / args.duration), "subscriptions": done, "calls": len(lat),
            "p50_ms": round(float(np.percentile(lat, 50)), 2) if len(lat) else None,
            "p99_ms": round(float(np.percentile(lat, 99)), 2) if len(lat) else None,
            "cpu_pct": roles, "load_avg_1m": round(load, 2), "errors": [o[2] for o in outs if o[2]][:3],
            "answered": sum(o[3] for o in outs)}


def _catalogued(url: str) -> int:
    """Subscriptions in the catalogue: every one a client was answered 201 for, and no other."""
    from bluedove.store import keys as K
    from bluedove.store.client import sync_client

    r = sync_client(url)
    try:
        return sum(r.hlen(K.catalog_hash(s)) for s in range(K.CATALOG_SHARDS))
    finally:
        r.close()


def _idle_cpu(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Each role's CPU % with no client at all (gossip, load reports, the catalogue tail, stats):
    what a mode's CPU is to be compared with."""
    before = {n: cpu_seconds(p) for n, p in pids.items()}
    time.sleep(seconds)
    roles: dict[str, float] = {}
    for n, p in pids.items():
        role = {"m": "matchers", "d": "dispatcher"}.get(n[0], n)
        roles[role] = round(roles.get(role, 0.0) + 100 * (cpu_seconds(p) - before[n]) / seconds, 1)
    return roles


def _per_sub(v: dict, idle: dict[str, float], duration: float) -> dict[str, float | None]:
    """CPU ms per subscription of each role above its idle CPU: the cost a loaded machine does
    not change much, where subscriptions/s on a shared machine follow the CPU we are given."""
    n = v["subscriptions"]
    return {r: round(10 * (pct - idle.get(r, 0.0)) * duration / n, 3) if n else None for r, pct in v["cpu_pct"].items()}


def add_parser(sub) -> None:
    p = sub.add_parser("subscribe", help=BENCHES["subscribe"])
    add_workload_flags(p, subs=20_000)
    p.add_argument("--matchers", type=int, default=4, help="matcher processes (default 4)")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients of `concurrent` (default 16)")
    p.add_argument("--procs", type=int, default=2, help="client processes they are spread over (default 2)")
    p.add_argument("--batch", type=int, default=1000, help="subscriptions per :batch call (default 1000)")
    p.add_argument("--batch-calls", type=int, default=2, help=":batch calls under way (default 2)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds each mode is measured (default 10)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds before each measurement starts (default 2)")
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"the modes measured, in turn (default {','.join(MODES)}; also {CHURN}: the publish rate "
                        "with and without subscribes and unsubscribes beside it)")
    p.add_argument("--churn", type=float, default=500.0, help=f"{CHURN}: subscribes (and unsubscribes) per second "
                                                              "(default 500)")
    p.add_argument("--publish-share", type=float, default=0.5,
                   help=f"{CHURN}: the publish rate as a share of the saturation measured first (default 0.5)")
    add_output_flags(p)
    p.set_defaults(func=run_subscribe_bench)


def run_subscribe_bench(args: argparse.Namespace) -> int:
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in (*MODES, CHURN) for m in modes) or args.procs < 1 or args.clients < args.procs \
            or not 0 < args.publish_share <= 1 or args.churn <= 0:
        print(f"bench subscribe: --modes {args.modes} (some of {','.join(MODES)},{CHURN}), --clients >= --procs >= 1,"
              " 0 < --publish-share <= 1, --churn > 0", file=sys.stderr)
        return 2
    if workload_or_none(args) is None:
        return 2
    preds = _predicates(args.workload, args.seed, args.n_subs)
    load_start = list(os.getloadavg())
    out: dict[str, dict] = {}
    churn: dict | None = None
    catalogued = 0
    idle: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bluedove-bench-") as tmp:
        store = BenchStore(Path(tmp), StoreShape()).start()
        try:
            cluster = LocalCluster(matchers=args.matchers, dispatchers=1, http_port=0, data_dir=tmp,
                                   store=store.url, quiet=True, restart=False)
            cluster.start(timeout_s=300)
            try:
                pids = {"redis": store.server.proc.pid, **{c.name: c.pid for c in cluster.children}}
                idle = _idle_cpu(pids, 1 + 1.5 * args.warmup)
                for m in (m for m in modes if m != CHURN):
                    out[m] = _measure(m, args, cluster.url, pids, preds)
                    out[m]["cpu_ms_per_sub"] = _per_sub(out[m], idle, args.duration)
                catalogued = _catalogued(store.url)
                if CHURN in modes:
                    churn = _churn(args, cluster.url, preds, catalogued)
            finally:
                cluster.stop()
        finally:
            store.stop()
    result = {"kind": "subscribe", "workload": args.workload, "matchers": args.matchers, "clients": args.clients,
              "procs": args.procs, "batch": args.batch, "batch_calls": args.batch_calls, "duration": args.duration,
              "cpus": os.cpu_count(), "load_avg_start": load_start, "load_avg_end": list(os.getloadavg()),
              "idle_cpu_pct": idle, "modes": out, "catalogued": catalogued,
              "answered": sum(v["answered"] for v in out.values()), CHURN: churn}
    ok = all(v["subscriptions"] > 0 and not v["errors"] for v in out.values()) and catalogued == result["answered"]
    ok = ok and (churn is None or (not churn["churn"]["errors"] and churn["alone"]["accepted_per_s"] > 0))
    result["ok"] = ok
    if args.json:
        print(json.dumps(result))
    else:
        for m, v in out.items():
            cpu = ", ".join(f"{k} {x:.0f}%" for k, x in v["cpu_pct"].items())
            per = ", ".join(f"{k} {x}" for k, x in v["cpu_ms_per_sub"].items())
            print(f"{m:<11} {v['subs_per_s']:>8,} subs/s  p50 {v['p50_ms']} ms  p99 {v['p99_ms']} ms  "
                  f"(load {v['load_avg_1m']})  cpu: {cpu}  cpu ms/sub over idle: {per}")
        if churn is not None:
            _print_churn(churn)
    if not ok:
        print(f"bench subscribe: a mode failed: {[v['errors'] for v in out.values()]}", file=sys.stderr)
        return 1
    return 0


def _churn(args: argparse.Namespace, url: str, preds: list[dict], catalogued: int) -> dict:
    """The churn mode on a cluster topped up to the workload's subscriptions."""
    from bluedove.lab.bench.churn import measure_churn
    from bluedove.lab.workloads.paper import get as get_workload

    w = get_workload(args.workload, seed=args.seed, n_subs=args.n_subs)
    missing = max(0, args.n_subs - catalogued)
    asyncio.run(_top_up(url, preds[:missing]))
    points = w.messages(20_000, seed=args.seed + 1)
    return measure_churn(url, points, w.space.names, preds, args.churn, args.publish_share, args.duration)


async def _top_up(url: str, preds: list[dict]) -> None:
    t = SubscribeTransport(url, 2, timeout_s=120.0)
    try:
        for i in range(0, len(preds), 1000):
            q = await t.create_queue()
            await t.subscribe_batch([{"queue": q["queue"], "predicates": p} for p in preds[i:i + 1000]], q["token"])
    finally:
        await t.close()


def _print_churn(r: dict) -> None:
    a, b, c = r["alone"], r["with_churn"], r["churn"]
    print(f"{CHURN:<11} publishing at {r['rate_per_s']:,}/s (of {r['saturation_per_s']:,} saturated): alone "
          f"{a['accepted_per_s']:,}/s p99 {a['p99_ms']} ms; with {c['subscribed_per_s']:,} subscribes/s and "
          f"{c['unsubscribed_per_s']:,} unsubscribes/s {b['accepted_per_s']:,}/s p99 {b['p99_ms']} ms: drop "
          f"{100 * r['drop']:.1f} %; subscribe p50 {c['subscribe_p50_ms']} ms p99 {c['subscribe_p99_ms']} ms")
