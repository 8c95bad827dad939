"""`bluedove bench publish`: publish throughput of PublishStream, REST batches and single REST calls, in turn on one cluster."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time

import numpy as np

from bluedove.client.grpc_transport import AsyncGrpcTransport
from bluedove.local.cluster import LocalCluster
from lab.bench import BENCHES
from lab.bench.base import add_cluster_flags, add_output_flags, add_phase_flags, add_workload_flags, workload_or_none
from lab.bench.cpu import cpu_seconds
from lab.bench.stage import stage
from lab.load import closed_loop, pool

MODES = ("grpc_stream", "rest_batch", "rest_single")
STREAM_LEN = 1000  # messages per PublishStream call (a long-lived stream, cut so ids come back)
BATCH_CALLS = 4  # PublishStream or batch calls under way per publisher process (single calls: --connections)


def _bodies(rng: np.random.Generator, n: int, names: list[str]) -> list[dict]:
    return [{"attributes": dict(zip(names, p)), "payload": {"b": 1}} for p in rng.uniform(0.0, 1000.0, (n, len(names))).tolist()]


async def _publish(mode: str, url: str, names: list[str], conns: int, batch: int, until: float,
                   rng: np.random.Generator) -> tuple[int, set[str], int]:
    """One mode's calls through the SDK's transports until `until` (lab.load.closed_loop)."""
    if mode == "grpc_stream":
        transport, calls = AsyncGrpcTransport(url, 60.0), BATCH_CALLS
        send = lambda: transport.publish_stream(_bodies(rng, STREAM_LEN, names))  # noqa: E731
    elif mode == "rest_batch":
        transport, calls = pool(url, BATCH_CALLS, timeout_s=60.0), BATCH_CALLS
        send = lambda: transport.publish_batch(_bodies(rng, batch, names))  # noqa: E731
    else:
        transport, calls = pool(url, conns, timeout_s=60.0), conns

        async def send() -> list[str]:
            return [await transport.publish(_bodies(rng, 1, names)[0])]
    try:
        return await closed_loop(send, calls, until)
    finally:
        await transport.close()


def publish_mode_main(mode: str, url: str, target: str, names: list[str], conns: int, batch: int, seconds: float,
                      seed: int, results) -> None:
    """One publisher process of one mode: (messages accepted inside the window, distinct ids of
    every call, the window's seconds, error)."""
    rng = np.random.default_rng([seed, 200, os.getpid()])
    until = time.monotonic() + seconds
    try:
        sent, ids, returned = asyncio.run(_publish(mode, target if mode == "grpc_stream" else url, names, conns,
                                                   batch, until, rng))
        results.put((sent, len(ids), seconds, None if len(ids) == returned else "duplicate ids"))
    except Exception as exc:  # noqa: BLE001 - reported by the bench
        results.put((0, 0, seconds, repr(exc)))


def _measure(mode: str, args, cluster: LocalCluster, pids: dict[str, int], names: list[str]) -> dict:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=publish_mode_main, daemon=True,
                         args=(mode, cluster.url, cluster.grpc_address, names, args.connections, args.batch,
                               args.duration, args.seed, results)) for _ in range(args.publishers)]
    before = {n: cpu_seconds(p) for n, p in pids.items()}
    t0 = time.monotonic()
    for p in procs:
        p.start()
    outs = [results.get(timeout=args.duration + 120) for _ in procs]
    dt = time.monotonic() - t0
    cpu = {n: round(100 * (cpu_seconds(p) - before[n]) / dt, 1) for n, p in pids.items()}
    for p in procs:
        p.join(timeout=10)
    sent = sum(o[0] for o in outs)
    secs = max(o[2] for o in outs)
    roles: dict[str, float] = {}
    for n, v in cpu.items():
        role = {"m": "matchers", "d": "dispatchers"}.get(n[0], n)
        roles[role] = round(roles.get(role, 0.0) + v, 1)
    return {"msgs_per_s": round(sent / secs), "messages": sent, "ids": sum(o[1] for o in outs),
            "seconds": round(secs, 2), "cpu_pct": roles, "errors": [o[3] for o in outs if o[3]][:3]}


def add_parser(sub) -> None:
    p = sub.add_parser("publish", help=BENCHES["publish"])
    add_workload_flags(p)
    add_cluster_flags(p, matchers=2)
    add_phase_flags(p, 32, "concurrent calls per mode")
    p.add_argument("--batch", type=int, default=100,
                   help="messages per REST batch and per PublishStream call (default 100)")
    add_output_flags(p)
    p.set_defaults(func=run_publish_bench)


def run_publish_bench(args: argparse.Namespace) -> int:
    w = workload_or_none(args)
    if w is None:
        return 2
    names = list(w.space.names)
    with stage(args, w) as st:
        pids = {"redis": st.redis.proc.pid, **{c.name: c.pid for c in st.cluster.children}}
        load_start = list(os.getloadavg())
        modes = {m: _measure(m, args, st.cluster, pids, names) for m in MODES}
    single = max(modes["rest_single"]["msgs_per_s"], 1)
    result = {
        "kind": "publish", "workload": w.name, "subscriptions": w.n_subs, "matchers": args.matchers,
        "dispatchers": args.dispatchers, "publishers": args.publishers, "connections": args.connections,
        "batch": args.batch, "stream_len": STREAM_LEN, "batch_calls": BATCH_CALLS, "seed": args.seed, "cpus": os.cpu_count(),
        "load_avg_start": load_start, "load_avg_end": list(os.getloadavg()), "modes": modes,
        "ratio_vs_single": {m: round(v["msgs_per_s"] / single, 2) for m, v in modes.items()},
    }
    # Every id distinct ("duplicate ids" error otherwise); calls answered after the window
    # have ids but are not counted.
    ok = all(v["messages"] > 0 and v["ids"] >= v["messages"] and not v["errors"] for v in modes.values())
    result["ok"] = ok
    if args.json:
        print(json.dumps(result))
    else:
        for m, v in modes.items():
            cpu = ", ".join(f"{k} {x:.0f}%" for k, x in v["cpu_pct"].items())
            print(f"{m:<12} {v['msgs_per_s']:>8,} msg/s  ({result['ratio_vs_single'][m]}x single)  cpu: {cpu}")
    if not ok:
        print(f"bench publish: a mode failed or lost ids: {modes}", file=sys.stderr)
        return 1
    return 0
