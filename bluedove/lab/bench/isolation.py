"""`bluedove bench isolation`: a space pushed past its quota beside one publishing steadily.

A local cluster (`--matchers`, default 2) gets two spaces of the workload's schema, `steady`
and `flood` (quota `--quota` messages/s), with `--subs` subscriptions each. One process
publishes single messages to `steady` through the SDK at `--rate` a second, open loop (never
waiting for an answer, `retries` 0 so that a refusal counts), all along. Each of `--rounds`
rounds is three windows of `--window` seconds:

  alone     the steady publisher only;
  at quota  and `--flooders` processes sending REST batches of `--batch` to `flood` at its
            quota, open loop: the work its quota lets in;
  flood     the same at `--flood-rate` messages a second in all: `--flood-rate` / `--quota`
            times its quota (4× by default), each refused batch answered 429 `quota_exceeded`.

The flooders of each window start `--settle` seconds before it opens: a quota's bucket holds a
second's burst, which a flood starting after a pause takes at once (up to 2× its quota in that
second). That second is reported on its own (`flood_burst`), not pooled into the window.

Reported per round and pooled: the steady space's accepted publishes a second and its call
p50 / p99 in each window, and the ratios of `flood` to `alone` (the goal: within 10 %) and to
`at quota` (what refusing the excess costs, beside the work the quota admits); the flooded
space's accepted messages a second against its quota and its 429 answers; each role's CPU %.
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
from typing import NamedTuple

import httpx
import numpy as np

from bluedove.client import AsyncClient
from bluedove.client.errors import BlueDoveError, LimitExceeded
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags, add_workload_flags, report, workload_or_none
from bluedove.lab.bench.deletion import _cpu, _cpu_pct, publisher_main, window
from bluedove.lab.load import open_loop, pool
from bluedove.local.cluster import LocalCluster

STEADY, FLOOD = "steady", "flood"
RATIOS = ("p99_vs_alone", "rate_vs_alone", "p99_vs_at_quota", "rate_vs_at_quota")


def add_parser(sub) -> None:
    p = sub.add_parser("isolation", help=BENCHES["isolation"])
    add_workload_flags(p, subs=2000)
    p.add_argument("--matchers", type=int, default=2, help="matcher processes (default 2)")
    p.add_argument("--rate", type=float, default=200.0,
                   help="the steady space's single publishes a second (default 200)")
    p.add_argument("--quota", type=float, default=2000.0,
                   help="the flooded space's messages_per_s quota (default 2000)")
    p.add_argument("--flood-rate", type=float, default=8000.0,
                   help="messages a second offered to the flooded space, in all (default 8000)")
    p.add_argument("--flooders", type=int, default=2, help="flooding processes (default 2)")
    p.add_argument("--batch", type=int, default=100, help="messages per flooding batch (default 100)")
    p.add_argument("--spans", type=int, default=None,
                   help="matchers each space spans (its `matchers`; default all): with fewer, each space is placed "
                        "on its own")
    p.add_argument("--matcher-cpu", type=float, default=None,
                   help="each matcher's CPU limit in cores, a cgroup quota as a pod's (default none)")
    p.add_argument("--window", type=float, default=6.0, help="seconds of each window (default 6)")
    p.add_argument("--settle", type=float, default=1.0,
                   help="seconds the flooders run before their window opens, the quota's burst taken (default 1)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of alone, then flood (default 3)")
    add_output_flags(p)
    p.set_defaults(func=run_isolation)


# -- the publisher processes ------------------------------------------------------------------
async def _flood(url: str, rate: float, batch: int, points: list[dict[str, float]], stop, out) -> None:
    """Batches at `rate` messages/s: [(answered at, messages accepted, refused 429)] (by the
    answer's time: a batch sent in a window may be answered after it)."""
    calls: list[tuple[float, int, bool]] = []
    transport = pool(url, 32, timeout_s=30.0)
    bodies = [{"attributes": p} for p in points] * 2  # a batch may run past the end: it goes round

    async def one(i: int) -> None:
        at = (i * batch) % len(points)
        try:
            n = len(await transport.publish_batch(bodies[at:at + batch], space=FLOOD))
            calls.append((time.monotonic(), n, False))
        except LimitExceeded:
            calls.append((time.monotonic(), 0, True))
        except BlueDoveError:
            calls.append((time.monotonic(), 0, False))

    try:
        out.put("ready")
        await open_loop(rate / batch, one, stop)
    finally:
        await transport.close()
    out.put(calls)


def flood_main(url: str, rate: float, batch: int, points: list, stop, out) -> None:
    asyncio.run(_flood(url, rate, batch, points, stop, out))


# -- the run ---------------------------------------------------------------------------------------
async def _spaces(url: str, w, quota: float, n: int, spans: int | None) -> list[list[str]]:
    """The two spaces, `n` subscriptions each on 10 queues: the matchers each spans."""
    attrs = [{"name": d.name, "min": d.min, "max": d.max} for d in w.space.dimensions]
    preds = [{k: list(v) for k, v in w.predicates(j).items()} for j in range(n)]
    async with AsyncClient(url, timeout_s=120.0) as c:
        span = {"matchers": spans} if spans else {}
        await c.create_space({"name": STEADY, "attributes": attrs, **span})
        await c.create_space({"name": FLOOD, "attributes": attrs, "quotas": {"messages_per_s": quota}, **span})
        for name in (STEADY, FLOOD):
            per = max(1, n // 10)
            for i in range(0, n, per):
                await c.in_space(name).subscribe_many(preds[i:i + per], await c.create_queue())
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as h:
        views = [(await h.get("/v1/cluster", params={"space": name})).json() for name in (STEADY, FLOOD)]
    return [sorted(m["id"] for m in v["members"] if not m["idle"]) for v in views]


class Window(NamedTuple):
    """One window of a round: its start and end, each role's CPU %, the flooders' calls (none
    alone) and when they started (None alone)."""

    t0: float
    t1: float
    cpu: dict
    flood_calls: list
    started: float | None


def _flood_window(args, url: str, points: list, pids: dict[str, int], rate: float) -> Window:
    """Flooders offering `rate` msg/s started, `--settle` s, a window of them, stopped."""
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=flood_main, daemon=True,
                         args=(url, rate / args.flooders, args.batch, points, stop, out))
             for _ in range(args.flooders)]
    for p in procs:
        p.start()
    for _ in procs:
        out.get(timeout=120)  # "ready"
    s0 = time.monotonic()
    time.sleep(args.settle)
    f0, cpu0 = time.monotonic(), _cpu(pids)
    time.sleep(args.window)
    f1, cpu1 = time.monotonic(), _cpu(pids)
    stop.set()
    calls = [c for _ in procs for c in out.get(timeout=120)]
    for p in procs:
        p.join(timeout=30)
    return Window(f0, f1, _cpu_pct(cpu0, cpu1, f1 - f0), calls, s0)


def _flooded(calls: list, f0: float, f1: float, quota: float) -> dict:
    inside = [c for c in calls if f0 <= c[0] < f1]
    accepted = sum(n for _, n, _ in inside) / (f1 - f0)
    return {"accepted_per_s": round(accepted), "of_quota": round(accepted / quota, 3),
            "refused_429": sum(1 for c in inside if c[2]), "batches": len(inside),
            "other_errors": sum(1 for _, n, r in inside if not n and not r)}


def _rounds(args, cluster: LocalCluster, w) -> list[dict]:
    rng = np.random.default_rng([args.seed, 11])
    points = [dict(zip(w.space.names, p)) for p in np.round(w.sample(2000, rng), 3).tolist()]
    pids = {c.name: c.pid for c in cluster.children if c.pid}
    if cluster.redis is not None:
        pids["redis"] = cluster.redis.proc.pid
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    steady = ctx.Process(target=publisher_main, args=(cluster.url, args.rate, points, stop, out, STEADY),
                         daemon=True)
    steady.start()
    out.get(timeout=120)  # "ready"
    time.sleep(2.0)  # its connection warm
    marks = []
    for r in range(args.rounds):
        a0, cpu0 = time.monotonic(), _cpu(pids)
        time.sleep(args.window)
        a1, cpu1 = time.monotonic(), _cpu(pids)
        at_quota = _flood_window(args, cluster.url, points, pids, args.quota)
        past = _flood_window(args, cluster.url, points, pids, args.flood_rate)
        marks.append((Window(a0, a1, _cpu_pct(cpu0, cpu1, a1 - a0), [], None), at_quota, past))
        print(f"isolation: round {r + 1} done", file=sys.stderr, flush=True)
    stop.set()
    calls = out.get(timeout=120)
    steady.join(timeout=30)
    return [_round(calls, m, args.quota) for m in marks]


def _round(calls: list, marks: tuple[Window, Window, Window], quota: float) -> dict:
    """One round's windows: the steady space's calls in each, the flooded space's answers."""
    out: dict = {}
    for key, (t0, t1, cpu, flood_calls, _) in zip(("alone", "at_quota", "flood"), marks):
        x = window(calls, t0, t1)
        x["accepted_per_s"] = round((x["sent"] - sum(x["errors"].values())) / (t1 - t0), 1)
        out[key] = {**x, "cpu_pct": cpu}
        if flood_calls:
            out[f"{key}_flooded"] = _flooded(flood_calls, t0, t1, quota)
    s0, f0 = marks[2].started, marks[2].t0
    if s0 is not None and f0 > s0:  # the flood's first moments: the quota's burst taken
        x = window(calls, s0, f0)
        x["accepted_per_s"] = round((x["sent"] - sum(x["errors"].values())) / (f0 - s0), 1)
        out["flood_burst"] = {**x, "seconds": round(f0 - s0, 2)}
    for base in ("alone", "at_quota"):
        out[f"p99_vs_{base}"] = _ratio(out["flood"]["p99_ms"], out[base]["p99_ms"])
        out[f"rate_vs_{base}"] = _ratio(out["flood"]["accepted_per_s"], out[base]["accepted_per_s"])
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _pooled(rounds: list[dict], key: str) -> dict:
    lat = np.concatenate([r[key].pop("_lat") for r in rounds])
    pct = {f"p{p}_ms": round(float(np.percentile(lat, p)), 2) if len(lat) else None for p in (50, 99)}
    return {**pct,
            "accepted_per_s": round(float(np.mean([r[key]["accepted_per_s"] for r in rounds])), 1),
            "errors": sum(sum(r[key]["errors"].values()) for r in rounds)}


def run_isolation(args: argparse.Namespace) -> int:
    w = workload_or_none(args)
    if w is None:
        return 2
    counts = (args.matchers, args.flooders, args.batch, args.rounds, args.spans or 1)
    if min(counts) < 1 or min(args.rate, args.quota, args.flood_rate, args.window) <= 0 or args.settle < 0:
        print("bench isolation: every count, rate and --window must be positive, --settle not negative",
              file=sys.stderr)
        return 2
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bluedove-isolation-") as tmp:
        cluster = LocalCluster(matchers=args.matchers, http_port=0, data_dir=Path(tmp), quiet=True, restart=False,
                               deliver="store", matcher_cpu=args.matcher_cpu)
        cluster.start(timeout_s=120)
        try:
            spans = asyncio.run(_spaces(cluster.url, w, args.quota, args.n_subs, args.spans))
            time.sleep(2.0)  # the catalogue tails settle
            rounds = _rounds(args, cluster, w)
        finally:
            cluster.stop()
    alone, at_quota, flood = _pooled(rounds, "alone"), _pooled(rounds, "at_quota"), _pooled(rounds, "flood")
    burst = _pooled(rounds, "flood_burst") if args.settle > 0 else None
    med = lambda k: float(np.median([r[k] for r in rounds if r[k] is not None] or [float("nan")]))  # noqa: E731
    result = {"kind": "isolation", "workload": w.name, "subs": args.n_subs, "matchers": args.matchers,
              "spans": dict(zip((STEADY, FLOOD), spans)), "matcher_cpu": args.matcher_cpu,
              "rate": args.rate, "quota": args.quota, "flood_rate": args.flood_rate, "flooders": args.flooders,
              "batch": args.batch, "window_s": args.window, "rounds": rounds, "alone": alone, "at_quota": at_quota,
              "flood": flood, "flood_burst": burst, "settle_s": args.settle,
              **{f"{k}_median": med(k) for k in RATIOS},
              "cores": os.cpu_count(), "load_avg_start": round(load_start, 2),
              "load_avg_end": round(os.getloadavg()[0], 2), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    report(result, args.json, _print)
    return 1 if alone["errors"] or at_quota["errors"] or flood["errors"] or (burst or {}).get("errors") else 0


def _print(r: dict) -> None:
    print(f"steady space: {r['rate']:g} single publishes/s; flooded space: offered its quota ({r['quota']:g}/s), "
          f"then {r['flood_rate']:g} msg/s; {r['matchers']} matchers (the spaces on {r['spans']}, CPU limit "
          f"{r['matcher_cpu'] or 'none'}); load {r['load_avg_start']} -> "
          f"{r['load_avg_end']}")
    for i, x in enumerate(r["rounds"], 1):
        a, q, f, fl = x["alone"], x["at_quota"], x["flood"], x["flood_flooded"]
        print(f"  round {i}: steady p50/p99 ms {a['p50_ms']}/{a['p99_ms']} alone, {q['p50_ms']}/{q['p99_ms']} beside "
              f"the other at its quota, {f['p50_ms']}/{f['p99_ms']} beside it past its quota; accepted/s "
              f"{a['accepted_per_s']}, {q['accepted_per_s']}, {f['accepted_per_s']}; the flooded space "
              f"{x['at_quota_flooded']['accepted_per_s']}/s, then {fl['accepted_per_s']}/s ({fl['of_quota']} of its "
              f"quota, {fl['refused_429']} batches answered 429); CPU % {a['cpu_pct']} / {q['cpu_pct']} / "
              f"{f['cpu_pct']}")
    a, q, f = r["alone"], r["at_quota"], r["flood"]
    print(f"pooled steady p99: {a['p99_ms']} alone, {q['p99_ms']} at quota, {f['p99_ms']} ms past it; medians of "
          f"rounds, past the quota over alone: p99 x{r['p99_vs_alone_median']:.2f}, accepted "
          f"x{r['rate_vs_alone_median']:.3f}; over at quota: p99 x{r['p99_vs_at_quota_median']:.2f}, accepted "
          f"x{r['rate_vs_at_quota_median']:.3f}; errors {a['errors']} / {q['errors']} / {f['errors']}")
    if r["flood_burst"]:
        b = r["flood_burst"]
        print(f"the flood's first {r['settle_s']:g} s (its quota's burst taken, not in the window): steady p50/p99 ms "
              f"{b['p50_ms']}/{b['p99_ms']}, accepted/s {b['accepted_per_s']}, errors {b['errors']}")
