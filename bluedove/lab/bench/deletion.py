"""`bluedove bench deletion`: publish latency while a queue of many subscriptions is deleted.

A local cluster (`--matchers`, default 2) holds `--background` subscriptions on queues that
stay; each round subscribes `--subs` (default 10,000) more to one fresh queue through the SDK,
lets the matchers' catalogue tail settle, then measures two windows back to back while a
publisher process (the SDK, REST, `--retries` 0 so that a 503 counts) sends single
`POST /v1/messages` at `--rate`:

  base      `--window` seconds with nothing else going on;
  deletion  from `DELETE /v1/queues/{queue}` (or, with `--storm`, one `DELETE
            /v1/subscriptions/{id}` per subscription, `--concurrency` under way) for
            `--window` seconds, or until a second after the deletion answered if it took longer.

Per round and pooled over the rounds: each window's publish call p50 / p99 / max, errors (503s
and timeouts), and the ratio of the deletion window's p99 to the base window's; the deletion's
own time, each role's CPU % in each window (psutil), and when the slowest publishes were sent.
The publisher runs in its own process, so the deleting calls do not share its event loop; both
use the system's monotonic clock.
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

from bluedove.client import AsyncClient
from bluedove.client.objects import Queue, Subscription
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags, add_workload_flags, report, workload_or_none
from bluedove.lab.bench.cpu import cpu_seconds, role
from bluedove.lab.load import open_loop
from bluedove.local.cluster import LocalCluster

SETTLE_S = 2.0  # after subscribing: the matchers' catalogue tail catches up


def add_parser(sub) -> None:
    p = sub.add_parser("deletion", help=BENCHES["deletion"])
    add_workload_flags(p, subs=10_000)
    p.add_argument("--matchers", type=int, default=2, help="matcher processes (default 2)")
    p.add_argument("--background", type=int, default=2000,
                   help="subscriptions on other queues, kept all along (default 2000)")
    p.add_argument("--rate", type=float, default=100.0, help="single publishes a second (default 100)")
    p.add_argument("--window", type=float, default=5.0, help="seconds of each measured window (default 5)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each a fresh queue deleted (default 3)")
    p.add_argument("--storm", action="store_true",
                   help="unsubscribe every subscription one call each instead of deleting the queue")
    p.add_argument("--concurrency", type=int, default=32, help="--storm: calls under way (default 32)")
    add_output_flags(p)
    p.set_defaults(func=run_deletion)


# -- the publisher process ----------------------------------------------------------------------
# Calls a publisher keeps under way: one due while this many wait is not sent, and counts as an
# error ("Backlog"). Unbounded, a stalled cluster piles up requests that the HTTP client's pool
# then walks on every event, and the publisher spends its CPU there, never catching up.
MAX_INFLIGHT = 64


async def _publish(url: str, rate: float, points: list[dict[str, float]], stop, out, space: str | None = None) -> None:
    """Open loop: one publish every 1/rate s (never waiting for an answer) until `stop`; each
    call's (sent at, seconds or None, error) goes to `out` at the end."""
    calls: list[tuple[float, float | None, str | None]] = []
    inflight = 0
    async with AsyncClient(url, retries=0, timeout_s=30.0) as c:
        async def one(i: int) -> None:
            nonlocal inflight
            t0 = time.monotonic()
            if inflight >= MAX_INFLIGHT:
                calls.append((t0, None, "Backlog"))
                return
            inflight += 1
            try:
                await c.publish(points[i % len(points)], {"i": i}, space=space)
                calls.append((t0, time.monotonic() - t0, None))
            except Exception as exc:  # noqa: BLE001 - counted by the bench
                calls.append((t0, None, type(exc).__name__))
            finally:
                inflight -= 1

        out.put("ready")
        await open_loop(rate, one, stop)
    out.put(calls)


def publisher_main(url: str, rate: float, points: list[dict[str, float]], stop, out, space: str | None = None) -> None:
    """Single publishes at `rate`/s, open loop, to `space` (None: the default), until `stop`;
    each call's (sent at, seconds or None, error) to `out` at the end (after "ready" at the start)."""
    asyncio.run(_publish(url, rate, points, stop, out, space))


# -- the figures ---------------------------------------------------------------------------------
def window(calls: list, t0: float, t1: float) -> dict:
    """The publishes sent in [t0, t1): count, p50 / p99 / max ms of those answered, errors, and
    the five slowest as [ms after t0 it was sent, ms it took]."""
    lat = np.array([s for t, s, _ in calls if t0 <= t < t1 and s is not None]) * 1000
    errors: dict[str, int] = {}
    for t, _, e in calls:
        if t0 <= t < t1 and e is not None:
            errors[e] = errors.get(e, 0) + 1
    ms = {f"p{p}_ms": round(float(np.percentile(lat, p)), 2) if len(lat) else None for p in (50, 99)}
    slow = sorted(((s, t) for t, s, _ in calls if t0 <= t < t1 and s is not None), reverse=True)[:5]
    return {"sent": len(lat) + sum(errors.values()), **ms,
            "max_ms": round(float(lat.max()), 2) if len(lat) else None, "errors": errors, "_lat": lat,
            "slowest": [[round(1000 * (t - t0)), round(1000 * s, 1)] for s, t in slow]}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


# -- a round -------------------------------------------------------------------------------------
async def _fill(c: AsyncClient, preds: list[dict], per_queue: int) -> list[tuple[Queue, list[Subscription]]]:
    """Queues of up to `per_queue` subscriptions holding `preds`, subscribed in :batch calls."""
    out = []
    for i in range(0, len(preds), per_queue):
        q = await c.create_queue()
        out.append((q, await c.subscribe_many(preds[i:i + per_queue], q)))
    return out


async def _delete(c: AsyncClient, q: Queue, subs: list[Subscription], storm: bool, concurrency: int) -> None:
    if not storm:
        await c.delete_queue(q)
        return
    todo = iter(subs)

    async def lane() -> None:
        for s in todo:
            await c.unsubscribe(s)

    await asyncio.gather(*(lane() for _ in range(concurrency)))


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    return {n: cpu_seconds(p) for n, p in pids.items()}


def _cpu_pct(a: dict[str, float], b: dict[str, float], seconds: float) -> dict[str, float]:
    """Each role's CPU % between two `_cpu` samples `seconds` apart."""
    out: dict[str, float] = {}
    for n in a:
        out[role(n)] = round(out.get(role(n), 0.0) + 100 * (b[n] - a[n]) / seconds, 1)
    return out


async def _round(args, url: str, pids: dict[str, int], preds: list[dict], points: list[dict[str, float]]) -> dict:
    async with AsyncClient(url, timeout_s=120.0) as c:
        t = time.monotonic()
        [(q, subs)] = await _fill(c, preds, len(preds))
        subscribe_s = time.monotonic() - t
        await asyncio.sleep(SETTLE_S)
        ctx = mp.get_context("spawn")
        stop, out = ctx.Event(), ctx.Queue()
        proc = ctx.Process(target=publisher_main, args=(url, args.rate, points, stop, out), daemon=True)
        proc.start()
        await asyncio.to_thread(out.get, True, 120)  # "ready"
        await asyncio.sleep(1.0)  # the publisher's connection warm
        b0, cpu0 = time.monotonic(), _cpu(pids)
        await asyncio.sleep(args.window)
        d0, cpu1 = time.monotonic(), _cpu(pids)
        await _delete(c, q, subs, args.storm, args.concurrency)
        delete_s = time.monotonic() - d0
        await asyncio.sleep(max(d0 + max(args.window, delete_s + 1.0) - time.monotonic(), 0.0))
        d1, cpu2 = time.monotonic(), _cpu(pids)
        stop.set()
        calls = await asyncio.to_thread(out.get, True, 120)
        await asyncio.to_thread(proc.join, 30)
    base = {**window(calls, b0, d0), "cpu_pct": _cpu_pct(cpu0, cpu1, d0 - b0)}
    during = {**window(calls, d0, d1), "cpu_pct": _cpu_pct(cpu1, cpu2, d1 - d0)}
    return {"subscribe_s": round(subscribe_s, 2), "delete_s": round(delete_s, 3), "base": base, "deletion": during,
            "p99_ratio": _ratio(during["p99_ms"], base["p99_ms"])}


async def _measure(args, url: str, pids: dict[str, int], w) -> list[dict]:
    n, bg = args.n_subs, args.background
    preds = [{k: list(v) for k, v in w.predicates(j).items()} for j in range(n + bg)]
    rng = np.random.default_rng([args.seed, 7])
    points = [dict(zip(w.space.names, p)) for p in np.round(w.sample(2000, rng), 3).tolist()]
    async with AsyncClient(url, timeout_s=120.0) as c:
        await _fill(c, preds[n:], 1000)
    rounds = []
    for r in range(args.rounds):
        rounds.append(await _round(args, url, pids, preds[:n], points))
        x = rounds[-1]
        print(f"deletion: round {r + 1}: deleted in {x['delete_s']} s; publish p99 {x['base']['p99_ms']} ms "
              f"-> {x['deletion']['p99_ms']} ms; errors {x['deletion']['errors']}", file=sys.stderr, flush=True)
    return rounds


def _pooled(rounds: list[dict], key: str) -> dict:
    lat = np.concatenate([r[key].pop("_lat") for r in rounds])
    errors: dict[str, int] = {}
    for r in rounds:
        for e, k in r[key]["errors"].items():
            errors[e] = errors.get(e, 0) + k
    return {"sent": sum(r[key]["sent"] for r in rounds), "errors": errors,
            **{f"p{p}_ms": round(float(np.percentile(lat, p)), 2) if len(lat) else None for p in (50, 99)}}


def run_deletion(args: argparse.Namespace) -> int:
    deleted = args.n_subs
    args.n_subs = deleted + max(args.background, 0)  # one workload: the subscriptions deleted, then those kept
    w = workload_or_none(args)
    args.n_subs = deleted
    if w is None:
        return 2
    if min(args.n_subs, args.rounds, args.concurrency) < 1 or args.rate <= 0 or args.window <= 0 or args.background < 0:
        print("bench deletion: --subs, --rate, --window, --rounds and --concurrency must be positive, --background "
              "not negative", file=sys.stderr)
        return 2
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bluedove-deletion-") as tmp:
        space = Path(tmp) / "space.json"
        space.write_text(json.dumps(w.space.to_json()))
        cluster = LocalCluster(matchers=args.matchers, http_port=0, data_dir=Path(tmp) / "cluster",
                               space_file=str(space), quiet=True, restart=False, deliver="store")
        cluster.start(timeout_s=120)
        try:
            pids = {c.name: c.pid for c in cluster.children if c.pid}
            if cluster.redis:
                pids["redis"] = cluster.redis.proc.pid
            rounds = asyncio.run(_measure(args, cluster.url, pids, w))
        finally:
            cluster.stop()
    base, during = _pooled(rounds, "base"), _pooled(rounds, "deletion")
    result = {"kind": "deletion", "workload": w.name, "subs": args.n_subs, "background": args.background,
              "matchers": args.matchers, "mode": "storm" if args.storm else "queue", "rate": args.rate,
              "window_s": args.window, "rounds": rounds, "base": base, "deletion": during,
              "p99_ratio": _ratio(during["p99_ms"], base["p99_ms"]),
              "p99_ratio_median": float(np.median([r["p99_ratio"] for r in rounds if r["p99_ratio"] is not None]
                                                  or [float("nan")])),
              "cores": os.cpu_count(), "load_avg_start": round(load_start, 2),
              "load_avg_end": round(os.getloadavg()[0], 2), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    report(result, args.json, _print)
    return 0 if not during["errors"] and not base["errors"] else 1


def _print(r: dict) -> None:
    what = "unsubscribe storm" if r["mode"] == "storm" else "DELETE /v1/queues"
    print(f"{r['subs']:,} subscriptions removed by {what}, {r['background']:,} kept; {r['matchers']} matchers; "
          f"single publishes at {r['rate']:g}/s; load {r['load_avg_start']} -> {r['load_avg_end']}")
    for i, x in enumerate(r["rounds"], 1):
        print(f"  round {i}: deletion {x['delete_s']} s; publish p50/p99/max ms {x['base']['p50_ms']}/"
              f"{x['base']['p99_ms']}/{x['base']['max_ms']} without, {x['deletion']['p50_ms']}/"
              f"{x['deletion']['p99_ms']}/{x['deletion']['max_ms']} during (x{x['p99_ratio']}); "
              f"errors {x['deletion']['errors'] or 0}; CPU % without / during: {x['base']['cpu_pct']} / "
              f"{x['deletion']['cpu_pct']}")
    b, d = r["base"], r["deletion"]
    print(f"pooled: p50 {b['p50_ms']} -> {d['p50_ms']} ms, p99 {b['p99_ms']} -> {d['p99_ms']} ms "
          f"(x{r['p99_ratio']}; median of rounds x{r['p99_ratio_median']}); errors {d['errors'] or 0}")
