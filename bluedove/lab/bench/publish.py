"""`bluedove bench publish`: publish throughput of PublishStream, REST batches and single REST calls,
in turn on one cluster."""

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
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import (
    add_cluster_flags,
    add_output_flags,
    add_phase_flags,
    add_workload_flags,
    workload_or_none,
)
from bluedove.lab.bench.cpu import cpu_seconds, role
from bluedove.lab.bench.stage import stage
from bluedove.lab.load import closed_loop, pool
from bluedove.local.cluster import LocalCluster

MODES = ("grpc_stream", "rest_batch", "rest_single")
STREAM_LEN = 1000  # messages per PublishStream call (a long-lived stream, cut so ids come back)
BATCH_CALLS = 4  # PublishStream or batch calls under way per publisher process (single calls: --connections)


def _bodies(rng: np.random.Generator, n: int, names: list[str]) -> list[dict]:
    return [{"attributes": dict(zip(names, p)), "payload": {"b": 1}}
            for p in rng.uniform(0.0, 1000.0, (n, len(names))).tolist()]


async def _publish(mode: str, url: str, names: list[str], conns: int, batch: int, until: float,
                   rng: np.random.Generator) -> tuple[int, set[str], int]:
    """One mode's calls through the SDK's transports until `until` (bluedove.lab.load.closed_loop)."""
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
    used = {n: cpu_seconds(p) - before[n] for n, p in pids.items()}
    cpu = {n: round(100 * v / dt, 1) for n, v in used.items()}
    for p in procs:
        p.join(timeout=10)
    sent = sum(o[0] for o in outs)
    secs = max(o[2] for o in outs)
    roles: dict[str, float] = {}
    spent: dict[str, float] = {}
    for n, v in cpu.items():
        roles[role(n)] = round(roles.get(role(n), 0.0) + v, 1)
        spent[role(n)] = spent.get(role(n), 0.0) + used[n]
    ids = sum(o[1] for o in outs)
    # Every message accepted (ids), window or not, over all the CPU spent from the first
    # publisher's start to the last answer: the service's cost per message, whatever the pace.
    per_msg = {r: round(1e6 * v / max(ids, 1), 1) for r, v in spent.items()}
    return {"msgs_per_s": round(sent / secs), "messages": sent, "ids": ids, "seconds": round(secs, 2),
            "cpu_pct": roles, "cpu_us_per_msg": per_msg, "errors": [o[3] for o in outs if o[3]][:3]}


def add_parser(sub) -> None:
    p = sub.add_parser("publish", help=BENCHES["publish"])
    add_workload_flags(p)
    add_cluster_flags(p, matchers=2)
    add_phase_flags(p, 32, "concurrent calls per mode")
    p.add_argument("--batch", type=int, default=100,
                   help="messages per REST batch and per PublishStream call (default 100)")
    p.add_argument("--modes", default=",".join(MODES), help=f"the modes measured, in turn (default {','.join(MODES)})")
    p.add_argument("--sample-rate", type=float, default=0.0, metavar="F",
                   help="the dispatchers sample this fraction of messages (dispatcher --sample-rate; default 0, off)")
    p.add_argument("--compare-sample-rates", default=None, metavar="F,F,…",
                   help="the sample's cost: a cluster per rate, the rates alternating, --repeat rounds; "
                        "the median msg/s of each rate and its ratio to the first rate")
    p.add_argument("--repeat", type=int, default=3, help="rounds of --compare-sample-rates (default 3)")
    add_output_flags(p)
    p.set_defaults(func=run_publish_bench)


def _modes_or_none(args: argparse.Namespace) -> list[str] | None:
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        print(f"bench publish: --modes {args.modes}: expected some of {','.join(MODES)}", file=sys.stderr)
        return None
    return modes


def _run_modes(args: argparse.Namespace, w, modes: list[str]) -> dict:
    names = list(w.space.names)
    with stage(args, w) as st:
        pids = {"redis": st.redis.proc.pid, **{c.name: c.pid for c in st.cluster.children}}
        return {m: _measure(m, args, st.cluster, pids, names) for m in modes}


def compare_sample_rates(args: argparse.Namespace, w, modes: list[str]) -> int:
    """Each round runs a cluster per rate, in turn; medians over the rounds, ratios to the first rate."""
    try:
        rates = [float(r) for r in args.compare_sample_rates.split(",")]
        if not rates or not all(0 <= r <= 1 for r in rates) or args.repeat < 1:
            raise ValueError
    except ValueError:
        print(f"bench publish: --compare-sample-rates {args.compare_sample_rates} (--repeat {args.repeat}): "
              "expected fractions from 0 to 1, and 1 round or more", file=sys.stderr)
        return 2
    runs: dict[float, list[dict]] = {r: [] for r in rates}
    load_start = list(os.getloadavg())
    for _ in range(args.repeat):
        for r in rates:
            args.sample_rate = r
            runs[r].append(_run_modes(args, w, modes))
    medians = {r: {m: float(np.median([run[m]["msgs_per_s"] for run in rs])) for m in modes} for r, rs in runs.items()}
    base = medians[rates[0]]
    result = {"kind": "publish", "compare": "sample_rate", "workload": w.name, "subscriptions": w.n_subs,
              "matchers": args.matchers, "publishers": args.publishers, "duration": args.duration,
              "repeat": args.repeat, "cpus": os.cpu_count(), "load_avg_start": load_start,
              "load_avg_end": list(os.getloadavg()),
              "runs": {str(r): [{m: v[m]["msgs_per_s"] for m in modes} for v in rs] for r, rs in runs.items()},
              "median_msgs_per_s": {str(r): v for r, v in medians.items()},
              "ratio": {str(r): {m: round(v[m] / max(base[m], 1), 3) for m in modes} for r, v in medians.items()}}
    ok = all(v["messages"] > 0 and not v["errors"] for rs in runs.values() for run in rs for v in run.values())
    result["ok"] = ok
    if args.json:
        print(json.dumps(result))
    else:
        for r in rates:
            print(f"sample rate {r:<6g} " + "  ".join(
                f"{m} {medians[r][m]:>8,.0f} msg/s ({result['ratio'][str(r)][m]:.3f}x)" for m in modes))
    return 0 if ok else 1


def run_publish_bench(args: argparse.Namespace) -> int:
    w = workload_or_none(args)
    modes_list = _modes_or_none(args)
    if w is None or modes_list is None:
        return 2
    if args.compare_sample_rates:
        return compare_sample_rates(args, w, modes_list)
    if not 0 <= args.sample_rate <= 1:
        print(f"bench publish: --sample-rate {args.sample_rate}: expected a fraction from 0 to 1", file=sys.stderr)
        return 2
    load_start = list(os.getloadavg())
    modes = _run_modes(args, w, modes_list)
    single = max(modes["rest_single"]["msgs_per_s"], 1) if "rest_single" in modes else None
    result = {
        "kind": "publish", "workload": w.name, "subscriptions": w.n_subs, "matchers": args.matchers,
        "dispatchers": args.dispatchers, "publishers": args.publishers, "connections": args.connections,
        "batch": args.batch, "sample_rate": args.sample_rate, "stream_len": STREAM_LEN, "batch_calls": BATCH_CALLS,
        "seed": args.seed, "cpus": os.cpu_count(),
        "load_avg_start": load_start, "load_avg_end": list(os.getloadavg()), "modes": modes,
        "ratio_vs_single": {m: round(v["msgs_per_s"] / single, 2) for m, v in modes.items()} if single else None,
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
            vs = f"  ({result['ratio_vs_single'][m]}x single)" if single else ""
            per = ", ".join(f"{k} {x:.1f}" for k, x in v["cpu_us_per_msg"].items())
            print(f"{m:<12} {v['msgs_per_s']:>8,} msg/s{vs}  cpu: {cpu}  µs per message: {per}")
    if not ok:
        print(f"bench publish: a mode failed or lost ids: {modes}", file=sys.stderr)
        return 1
    return 0
