"""`bluedove bench e2e`: saturation rate of a real local cluster through REST (seed 001 §IV-B's method), beside the kernel."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import platform
import statistics
import sys
import tempfile
import time

import httpx
import numpy as np

from bluedove.cli.bench import build_partitioned, match_partitioned
from bluedove.cli.cluster import LocalCluster
from bluedove.segments import equal_partition
from bluedove.workloads.paper import get as get_workload


def _publisher(url: str, rate: float, duration_s: float, bodies: list[bytes], batch: int, inflight: int,
               out: mp.Queue) -> None:
    """Open loop: a batch every batch/rate seconds; a tick that finds `inflight` requests
    outstanding is skipped (the cluster is not keeping up), which the caller sees as a shortfall."""

    async def main() -> dict:
        lat, sent, skipped, errors = [], 0, 0, 0
        sem = asyncio.Semaphore(inflight)
        tasks = []
        async with httpx.AsyncClient(base_url=url, timeout=30.0,
                                     limits=httpx.Limits(max_connections=inflight)) as client:
            async def one(body: bytes) -> None:
                nonlocal errors
                t0 = time.perf_counter()
                try:
                    r = await client.post("/v1/messages:batch", content=body,
                                          headers={"content-type": "application/json"})
                    if r.status_code == 202:
                        lat.append(time.perf_counter() - t0)
                    else:
                        errors += 1
                finally:
                    sem.release()

            period = batch / rate
            start = time.perf_counter()
            j = 0
            while (now := time.perf_counter()) - start < duration_s:
                due = start + j * period
                if due > now:
                    await asyncio.sleep(due - now)
                j += 1
                if sem.locked():
                    skipped += 1
                    continue
                await sem.acquire()
                tasks.append(asyncio.create_task(one(bodies[j % len(bodies)])))
                sent += 1
            await asyncio.gather(*tasks)
            elapsed = time.perf_counter() - start
        return {"sent": sent * batch, "ok": len(lat) * batch, "skipped": skipped * batch, "errors": errors,
                "elapsed": elapsed, "lat": lat}

    out.put(asyncio.run(main()))


def _bodies(w, n_bodies: int, batch: int, seed: int) -> list[bytes]:
    pts = w.sample(n_bodies * batch, np.random.default_rng([seed, 5]))
    names = w.space.names
    out = []
    for b in range(n_bodies):
        msgs = [{"attributes": dict(zip(names, p)), "payload": None} for p in pts[b * batch:(b + 1) * batch].tolist()]
        out.append(json.dumps({"messages": msgs}).encode())
    return out


def step(url: str, rate: float, duration_s: float, bodies: list[bytes], batch: int, publishers: int) -> dict:
    """One rate step with `publishers` processes; achieved rate and response-time percentiles."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_publisher, args=(url, rate / publishers, duration_s, bodies[p::publishers] or bodies,
                                                  batch, 8, q)) for p in range(publishers)]
    for p in procs:
        p.start()
    res = [q.get() for _ in procs]
    for p in procs:
        p.join()
    lat = sorted(x for r in res for x in r["lat"])
    ok = sum(r["ok"] for r in res)
    elapsed = max(r["elapsed"] for r in res)

    def pct(p: float) -> float | None:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3, 1) if lat else None

    # seed 001 §IV-B: response time that keeps growing within the step means queues grow
    per = [r["lat"] for r in res]
    first = [x for lst in per for x in lst[: len(lst) // 3]]
    last = [x for lst in per for x in lst[2 * len(lst) // 3:]]
    growing = bool(first and last and statistics.mean(last) > 1.5 * statistics.mean(first))
    achieved = ok / elapsed
    return {"offered": round(rate), "achieved": round(achieved), "errors": sum(r["errors"] for r in res),
            "p50_ms": pct(0.5), "p95_ms": pct(0.95), "p99_ms": pct(0.99),
            "saturated": bool(achieved < 0.9 * rate or growing)}


def kernel_rate(w, matchers: int, seed: int, n: int = 10_000) -> float:
    """`bench kernel`'s measurement on the same workload and cut: msg/s on one core, best of 3."""
    table = equal_partition(w.space, {f"m{j}": "" for j in range(matchers)})
    ids = [str(j) for j in range(w.n_subs)]
    part = build_partitioned(w, table, ids, ids)
    pts = w.sample(n, np.random.default_rng([seed, 1]))
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        match_partitioned(part, pts)
        best = min(best, time.perf_counter() - t0)
    return n / best


async def _subscribe(url: str, w, concurrency: int = 16) -> float:
    t0 = time.perf_counter()
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        async def one(j: int) -> None:
            async with sem:
                r = await client.post("/v1/subscriptions", json={"predicates": w.predicates(j)})
                r.raise_for_status()
        await asyncio.gather(*(one(j) for j in range(w.n_subs)))
    return time.perf_counter() - t0


def run_e2e(args: argparse.Namespace) -> int:
    params = {key: getattr(args, key, None) for key in ("sigma", "adverse", "dims")}
    w = get_workload(args.workload, seed=args.seed, n_subs=args.n_subs or 4000, **params)
    say = (lambda *a: print(*a, file=sys.stderr, flush=True))
    with tempfile.TemporaryDirectory(prefix="bluedove-e2e-") as tmp:
        cluster = LocalCluster(matchers=args.matchers, dispatchers=args.dispatchers, http_port=0, data_dir=tmp,
                               policy=args.policy, quiet=True, restart=False, deliver=args.deliver)
        cluster.start()
        try:
            say(f"e2e: cluster of {args.matchers} matchers up; creating {w.n_subs} subscriptions through REST")
            sub_s = asyncio.run(_subscribe(cluster.url, w))
            time.sleep(1.5)  # let matchers' catalogue tails and the load reports settle
            bodies = _bodies(w, 40, args.batch, args.seed)
            steps, rate = [], args.start_rate
            for _ in range(args.max_steps):
                s = step(cluster.url, rate, args.step_s, bodies, args.batch, args.publishers)
                steps.append(s)
                say(f"e2e: offered {s['offered']:,} msg/s -> {s['achieved']:,} msg/s, p50 {s['p50_ms']} ms,"
                    f" p99 {s['p99_ms']} ms{'  SATURATED' if s['saturated'] else ''}")
                if s["saturated"]:
                    break
                rate *= args.factor
        finally:
            cluster.stop()
    ok = [s for s in steps if not s["saturated"]]
    sat = max((s["achieved"] for s in ok), default=0)
    below = ok[-1] if ok else {}
    kernel = kernel_rate(w, args.matchers, args.seed)
    result = {"workload": w.name, "kind": "e2e", "matchers": args.matchers, "dispatchers": args.dispatchers,
              "policy": args.policy, "deliver": args.deliver, "subscriptions": w.n_subs, "batch": args.batch,
              "publishers": args.publishers, "msgs_per_s": sat,
              "p50_ms": below.get("p50_ms"), "p95_ms": below.get("p95_ms"), "p99_ms": below.get("p99_ms"),
              "kernel_msgs_per_s": round(kernel), "e2e_over_kernel": round(sat / kernel, 3),
              "subscribe_s": round(sub_s, 1), "steps": steps, "seed": args.seed,
              "python": platform.python_version(), "cores": mp.cpu_count()}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"saturation {sat:,} msg/s ({args.matchers} matchers, {args.policy}, deliver={args.deliver});"
              f" below it p50 {result['p50_ms']} ms, p95 {result['p95_ms']} ms, p99 {result['p99_ms']} ms")
        print(f"kernel (one core, same workload and cut) {result['kernel_msgs_per_s']:,} msg/s;"
              f" e2e / kernel = {result['e2e_over_kernel']}")
    return 0
