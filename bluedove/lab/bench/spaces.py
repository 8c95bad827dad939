"""`bluedove bench spaces`: what a thousand spaces cost a cluster, and whether idle spaces slow a busy one.

A local cluster (`--matchers`, default 4) gets one busy space of the workload's schema with
`--subs` subscriptions (the SDK's `in_space`). Then, on the same cluster:

  alone        publisher processes send REST batches to the busy space, closed loop, for
               `--duration` seconds;
  create       `--spaces` − 1 idle spaces are made one after another (each POST /v1/spaces
               timed), and every matcher serves them all;
  beside       the same publishing, beside the idle spaces;
  delete       the idle spaces are deleted (and purged);

`--rounds` times (the machine's own spread between two phases alike is ~10 %). Reported: the
accepted msg/s and CPU per message of each phase, each round's ratio of `beside` to `alone`
and their median (the goal: within 10 %); the time to create a space (p50, p99); per idle space,
the store's memory (`INFO memory`) and each matcher's resident memory; the matchers' CPU while
nothing is published, and the gossip bytes each matcher sends a second, without the idle
spaces and with them (the first round).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
import psutil

from bluedove.client import AsyncClient
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags, add_workload_flags, report, workload_or_none
from bluedove.lab.bench.cpu import cpu_seconds, role
from bluedove.lab.load import closed_loop, pool
from bluedove.local.cluster import LocalCluster
from bluedove.runtime import tls
from bluedove.store.store import Store
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

BUSY = "busy"
CALLS = 4  # batch calls under way per publisher process
IDLE_S = 5.0  # the window the idle matchers' CPU and gossip bytes are read over


def add_parser(sub) -> None:
    p = sub.add_parser("spaces", help=BENCHES["spaces"])
    add_workload_flags(p, subs=2000)
    p.add_argument("--matchers", type=int, default=4, help="matcher processes (default 4)")
    p.add_argument("--spaces", type=int, default=1000, help="spaces in all, the busy one with them (default 1000)")
    p.add_argument("--publishers", type=int, default=2, help="publisher processes (default 2)")
    p.add_argument("--batch", type=int, default=100, help="messages per REST batch (default 100)")
    p.add_argument("--duration", type=float, default=6.0, help="seconds of each publishing phase (default 6)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of alone / idle spaces made / beside them / deleted (default 3)")
    add_output_flags(p)
    p.set_defaults(func=run_spaces)


# -- the publisher processes ---------------------------------------------------------------------
async def _publish(url: str, names: list[str], batch: int, until: float, rng: np.random.Generator) -> int:
    transport = pool(url, CALLS, timeout_s=60.0)

    def bodies() -> list[dict]:
        return [{"attributes": dict(zip(names, p))} for p in rng.uniform(0.0, 1000.0, (batch, len(names))).tolist()]

    try:
        sent, _, _ = await closed_loop(lambda: transport.publish_batch(bodies(), space=BUSY), CALLS, until)
        return sent
    finally:
        await transport.close()


def publisher_main(url: str, names: list[str], batch: int, seconds: float, seed: int, out) -> None:
    rng = np.random.default_rng([seed, 31, os.getpid()])
    try:
        out.put((asyncio.run(_publish(url, names, batch, time.monotonic() + seconds, rng)), None))
    except Exception as exc:  # noqa: BLE001 - reported by the bench
        out.put((0, repr(exc)))


def _phase(args: argparse.Namespace, cluster: LocalCluster, names: list[str]) -> dict:
    """One publishing phase: accepted msg/s of all the publisher processes together, and the CPU
    each role of the cluster spent per message (µs)."""
    url = cluster.url
    pids = {c.name: c.pid for c in cluster.children if c.pid}
    if cluster.redis is not None:
        pids["redis"] = cluster.redis.proc.pid
    cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=publisher_main, daemon=True,
                         args=(url, names, args.batch, args.duration, args.seed, out)) for _ in range(args.publishers)]
    for p in procs:
        p.start()
    got = [out.get(timeout=args.duration + 120) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    sent = sum(n for n, _ in got)
    us: dict[str, float] = {}
    for n, p in pids.items():
        us[role(n)] = us.get(role(n), 0.0) + (cpu_seconds(p) - cpu0[n]) * 1e6 / max(sent, 1)
    return {"msgs_per_s": round(sent / args.duration), "cpu_us_per_msg": {r: round(v, 1) for r, v in us.items()},
            "errors": [e for _, e in got if e][:3]}


# -- what the cluster holds ---------------------------------------------------------------------
async def _report(addr: str, space: str = "") -> pb.ReportReply:
    async with tls.aio_channel(addr, None) as ch:
        return await pb_grpc.MatcherStub(ch).Report(pb.ReportRequest(space=space), timeout=30)


async def _footprint(cluster: LocalCluster) -> dict:
    """The store's memory, each matcher's RSS, and, over IDLE_S, the matchers' CPU and gossip bytes."""
    store = Store(cluster.store_url)
    try:
        used = int((await store.r.info("memory"))["used_memory"])
    finally:
        await store.close()
    matchers = {c.name: c.pid for c in cluster.matchers() if c.pid}
    rss = {n: psutil.Process(p).memory_info().rss for n, p in matchers.items()}
    cpu0 = {n: cpu_seconds(p) for n, p in matchers.items()}
    sent0 = {n: (await _report(cluster.addresses[n])).gossip_bytes_sent for n in matchers}
    t0 = time.monotonic()
    await asyncio.sleep(IDLE_S)
    dt = time.monotonic() - t0
    cpu = {n: 100 * (cpu_seconds(p) - cpu0[n]) / dt for n, p in matchers.items()}
    sent = {n: ((await _report(cluster.addresses[n])).gossip_bytes_sent - sent0[n]) / dt for n in matchers}
    return {"store_bytes": used, "rss": rss, "matcher_cpu_pct": round(sum(cpu.values()) / len(cpu), 2),
            "gossip_bytes_per_s": round(sum(sent.values()) / len(sent))}


async def _serve_all(cluster: LocalCluster, name: str, within_s: float = 300) -> float:
    """Until every matcher serves space `name` (the last made: all before it are served then)."""
    t0 = time.monotonic()
    for m in [c.name for c in cluster.matchers()]:
        while True:
            try:
                await _report(cluster.addresses[m], name)
                break
            except grpc.aio.AioRpcError:  # UNAVAILABLE until served
                if time.monotonic() - t0 > within_s:
                    raise
                await asyncio.sleep(0.2)
    return time.monotonic() - t0


def _spec(name: str, w) -> dict:
    return {"name": name, "attributes": [{"name": d.name, "min": d.min, "max": d.max} for d in w.space.dimensions]}


async def _busy(url: str, w, n: int) -> None:
    """The busy space and its subscriptions, on 20 queues."""
    async with AsyncClient(url, timeout_s=120.0) as c:
        await c.create_space(_spec(BUSY, w))
        preds = [{k: list(v) for k, v in w.predicates(j).items()} for j in range(n)]
        per = max(1, n // 20)
        for i in range(0, n, per):
            await c.in_space(BUSY).subscribe_many(preds[i:i + per], await c.create_queue())


async def _create(url: str, w, count: int) -> list[float]:
    """Make `count` idle spaces one after another: each create's seconds."""
    took = []
    async with AsyncClient(url, timeout_s=120.0) as c:
        for i in range(count):
            t0 = time.monotonic()
            await c.create_space(_spec(f"idle-{i}", w))
            took.append(time.monotonic() - t0)
    return took


async def _delete(url: str, count: int) -> None:
    async with AsyncClient(url, timeout_s=120.0) as c:
        for i in range(count):
            await c.delete_space(f"idle-{i}")
        while len(await c.spaces()) > 2:  # the purges done: default and busy left
            await asyncio.sleep(0.5)


# -- the run ---------------------------------------------------------------------------------------
def _round(args: argparse.Namespace, cluster: LocalCluster, w, first: bool) -> dict:
    """Publishing alone; the idle spaces made (timed; the footprint read, in the first round);
    publishing beside them; the idle spaces deleted."""
    names, idle = list(w.space.names), args.spaces - 1
    alone = _phase(args, cluster, names)
    before = asyncio.run(_footprint(cluster)) if first else None
    took = asyncio.run(_create(cluster.url, w, idle))
    serve_s = asyncio.run(_serve_all(cluster, f"idle-{idle - 1}")) if idle else 0.0
    after = asyncio.run(_footprint(cluster)) if first else None
    beside = _phase(args, cluster, names)
    asyncio.run(_delete(cluster.url, idle))
    ratio = round(beside["msgs_per_s"] / alone["msgs_per_s"], 3) if alone["msgs_per_s"] else None
    print(f"spaces: alone {alone['msgs_per_s']:,} msg/s, beside {idle} idle spaces {beside['msgs_per_s']:,} "
          f"(x{ratio})", file=sys.stderr, flush=True)
    return {"alone": alone, "with_idle": beside, "ratio": ratio, "took": took, "served_all_s": round(serve_s, 2),
            "before": before, "after": after}


def _measure(args: argparse.Namespace, cluster: LocalCluster, w) -> dict:
    idle = max(args.spaces - 1, 1)
    asyncio.run(_busy(cluster.url, w, args.n_subs))
    time.sleep(2.0)  # the catalogue tails settle
    rounds = [_round(args, cluster, w, r == 0) for r in range(args.rounds)]
    before, after = rounds[0].pop("before"), rounds[0].pop("after")
    ms = np.array([t for r in rounds for t in r.pop("took")] or [0.0]) * 1000
    return {
        "rounds": rounds,
        "ratio_median": float(np.median([r["ratio"] for r in rounds if r["ratio"] is not None] or [float("nan")])),
        "create_ms": {"p50": round(float(np.percentile(ms, 50)), 2), "p99": round(float(np.percentile(ms, 99)), 2)},
        "served_all_s": max(r["served_all_s"] for r in rounds),
        "store_bytes_per_space": round((after["store_bytes"] - before["store_bytes"]) / idle),
        "matcher_rss_bytes_per_space": {n: round((after["rss"][n] - before["rss"].get(n, 0)) / idle)
                                        for n in after["rss"]},
        "idle": {"without": {k: before[k] for k in ("matcher_cpu_pct", "gossip_bytes_per_s")},
                 "with": {k: after[k] for k in ("matcher_cpu_pct", "gossip_bytes_per_s")}},
    }


def run_spaces(args: argparse.Namespace) -> int:
    w = workload_or_none(args)
    if w is None:
        return 2
    if min(args.spaces - 1, args.matchers, args.publishers, args.batch, args.rounds) < 1 or args.duration <= 0:
        print("bench spaces: --spaces must be over 1; --matchers, --publishers, --batch, --rounds and --duration "
              "positive", file=sys.stderr)
        return 2
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bluedove-spaces-") as tmp:
        cluster = LocalCluster(matchers=args.matchers, http_port=0, data_dir=Path(tmp), quiet=True, restart=False,
                               deliver="count")
        cluster.start(timeout_s=120)
        try:
            result = _measure(args, cluster, w)
        finally:
            cluster.stop()
    result = {"kind": "spaces", "workload": w.name, "subs": args.n_subs, "spaces": args.spaces,
              "matchers": args.matchers, "publishers": args.publishers, "batch": args.batch, "rounds_n": args.rounds,
              "duration_s": args.duration, **result, "cores": os.cpu_count(), "load_avg_start": round(load_start, 2),
              "load_avg_end": round(os.getloadavg()[0], 2), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    report(result, args.json, _print)
    errors = [e for r in result["rounds"] for k in ("alone", "with_idle") for e in r[k]["errors"]]
    return 1 if errors else 0


def _print(r: dict) -> None:
    print(f"{r['spaces']:,} spaces ({r['spaces'] - 1:,} idle) on {r['matchers']} matchers; the busy space has "
          f"{r['subs']:,} subscriptions; {r['publishers']} publishers of REST batches of {r['batch']}; "
          f"load {r['load_avg_start']} -> {r['load_avg_end']}")
    for i, x in enumerate(r["rounds"], 1):
        print(f"  round {i}: publish alone {x['alone']['msgs_per_s']:,} msg/s, beside the idle spaces "
              f"{x['with_idle']['msgs_per_s']:,} (x{x['ratio']}); CPU µs per message "
              f"{x['alone']['cpu_us_per_msg']} -> {x['with_idle']['cpu_us_per_msg']}")
    print(f"  median ratio x{r['ratio_median']:.3f}")
    print(f"  create a space: p50 {r['create_ms']['p50']} ms, p99 {r['create_ms']['p99']} ms; every matcher "
          f"served them all {r['served_all_s']} s after the last")
    rss = ", ".join(f"{n} {v / 1024:.1f} KiB" for n, v in r["matcher_rss_bytes_per_space"].items())
    print(f"  per idle space: store {r['store_bytes_per_space'] / 1024:.1f} KiB; matcher RSS {rss}")
    i = r["idle"]
    print(f"  nothing published: matcher CPU {i['without']['matcher_cpu_pct']} % -> {i['with']['matcher_cpu_pct']} % "
          f"each; gossip {i['without']['gossip_bytes_per_s']:,} -> {i['with']['gossip_bytes_per_s']:,} B/s each")
