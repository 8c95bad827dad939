"""`bluedove bench e2e`: saturation rate of a real local cluster through REST (the paper's §IV-B
method), beside the kernel.

With `--partition mpartition,p2p,full-replication` it runs each system of the paper's §IV-B in turn
on one store: the subscriptions are created once through REST, and each later system's
matchers load the same ones from the catalogue; every system gets the same message bodies.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing as mp
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

from bluedove.client.grpc_messages import message_pb
from bluedove.client.grpc_transport import AsyncGrpcTransport, rpc_error
from bluedove.core.forwarding import POLICIES
from bluedove.core.partition.segments import equal_partition
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_cluster_flags, add_deliver_flag, add_output_flags, add_workload_flags, report
from bluedove.lab.bench.e2e_cpu import CpuProbe, account, net_of_idle, print_cpu, with_kernel
from bluedove.lab.bench.kernel import build_partitioned, match_partitioned
from bluedove.lab.bench.kernel_typed import typed_rate
from bluedove.lab.bench.profile import py_spy
from bluedove.lab.bench.stage import load_workload
from bluedove.lab.bench.systems import best_round, parse_systems, ratios, run_system, workload
from bluedove.lab.load import PacedPublisher, pool, publish_encoded
from bluedove.lab.readers import subscribe_workload
from bluedove.local.cpu_quota import add_cpu_flag, cpu_flag_problem
from bluedove.store.server import RedisServer

GOAL_SERVICE_OVER_KERNEL = 3.0  # the whole service's CPU per message over the kernel's
GOAL_MATCHER_OUTSIDE_WALK_US = 5.0  # a matcher's CPU per message it matched, outside the index walk


def _sender(transport: str, url: str, bodies: list[bytes], inflight: int):
    """(the transport, a PacedPublisher's send): REST batches as prepared, or each prepared
    batch's messages as one PublishStream call of the SDK's gRPC stub (built before the step)."""
    if transport == "rest":
        t = pool(url, inflight)
        return t, publish_encoded(t, bodies)
    t = AsyncGrpcTransport(url, 60.0)
    chunks = [[message_pb(m) for m in json.loads(b)["messages"]] for b in bodies]
    turn = itertools.count()

    async def send() -> bool:
        try:
            await t.stub.PublishStream(iter(chunks[next(turn) % len(chunks)]), timeout=t.timeout_s)
        except grpc.RpcError as exc:
            raise rpc_error(exc) from None
        return True

    return t, send


def _publisher(url: str, rate: float, duration_s: float, bodies: list[bytes], batch: int, inflight: int,
               out: mp.Queue, transport: str = "rest", go=None, ready=None) -> None:
    """Open loop: a batch every batch/rate seconds; a tick that finds `inflight` requests
    outstanding is skipped (the cluster is not keeping up), which the caller sees as a shortfall.
    Says it is connected (`ready`, a barrier), then starts when the caller lets every publisher
    go (`go`, a barrier); counts its own CPU from then."""

    async def main() -> dict:
        t, send = _sender(transport, url, bodies, inflight)
        pub = PacedPublisher(send, batch, inflight, rate=rate)
        if ready is not None:
            ready.wait(120)
        if go is not None:
            go.wait(120)
        c0 = time.process_time()
        start = time.monotonic()
        try:
            await pub.run(lambda: time.monotonic() - start >= duration_s)
        finally:
            await t.close()
        return {"sent": pub.sent, "ok": pub.accepted, "skipped": pub.skipped, "errors": pub.refused // batch,
                "elapsed": time.monotonic() - start, "lat": [s for _, s in pub.latencies],
                "cpu_s": time.process_time() - c0}

    out.put(asyncio.run(main()))


def batch_bodies(w, n_bodies: int, batch: int, seed: int) -> list[bytes]:
    """`n_bodies` publish bodies of `batch` messages (a typed workload's: its attributes as sampled)."""
    pts = w.sample(n_bodies * batch, np.random.default_rng([seed, 5]))
    names = w.space.names
    attrs = pts if w.space.typed else [dict(zip(names, p)) for p in pts.tolist()]
    out = []
    for b in range(n_bodies):
        msgs = [{"attributes": a, "payload": None} for a in attrs[b * batch:(b + 1) * batch]]
        out.append(json.dumps({"messages": msgs}).encode())
    return out


def step(url: str, rate: float, duration_s: float, bodies: list[bytes], batch: int, publishers: int,
         probe: CpuProbe | None = None, transport: str = "rest", target: str | None = None, hook=None) -> dict:
    """One rate step with `publishers` processes; achieved rate and response-time percentiles,
    and with a `probe` each process's CPU per message over the step (bluedove/lab/bench/e2e_cpu.py).
    `transport` grpc publishes through PublishStream at `target`. `hook()`, called as the
    step starts, returns a function called as it ends (its result: `hook_result`)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ready, go = ctx.Barrier(publishers + 1), ctx.Barrier(publishers + 1)
    dest = target if transport == "grpc" else url
    # daemons, and stopped on the way out: an interrupted bench (Ctrl-C, SIGTERM) leaves none behind
    procs = [ctx.Process(target=_publisher, args=(dest, rate / publishers, duration_s, bodies[p::publishers] or bodies,
                                                  batch, 8, q, transport, go, ready), daemon=True)
             for p in range(publishers)]
    try:
        for p in procs:
            p.start()
        ready.wait(180)
        # the service's counters and the profiles start before the first message: none is missed
        before = probe.snap() if probe is not None else None
        finish = hook() if hook is not None else None
        go.wait(180)
        res = [q.get() for _ in procs]
        after = probe.snap() if probe is not None else None
        hooked = finish() if finish is not None else None
        for p in procs:
            p.join()
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
    lat = sorted(x for r in res for x in r["lat"])
    ok = sum(r["ok"] for r in res)
    elapsed = max(r["elapsed"] for r in res)

    def pct(p: float) -> float | None:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3, 1) if lat else None

    # the paper's §IV-B: response time that keeps growing within the step means queues grow
    per = [r["lat"] for r in res]
    first = [x for lst in per for x in lst[: len(lst) // 3]]
    last = [x for lst in per for x in lst[2 * len(lst) // 3:]]
    growing = bool(first and last and statistics.mean(last) > 1.5 * statistics.mean(first))
    achieved = ok / elapsed
    out = {"offered": round(rate), "achieved": round(achieved), "errors": sum(r["errors"] for r in res),
           "p50_ms": pct(0.5), "p95_ms": pct(0.95), "p99_ms": pct(0.99),
           "short": bool(achieved < 0.9 * rate), "growing": growing,
           "saturated": bool(achieved < 0.9 * rate or growing)}
    if probe is not None:
        out["cpu"] = account(before, after, ok, [r["cpu_s"] for r in res])
    if finish is not None:
        out["hook_result"] = hooked
    return out


def kernel_rate(w, matchers: int, seed: int, n: int = 10_000) -> tuple[float, float]:
    """`bench kernel`'s measurement on the same workload and cut: (msg/s on one core, CPU µs
    per message by thread time), each the best of 3; a typed workload's on the matcher's whole
    path (bluedove/lab/bench/kernel_typed.py)."""
    if w.space.typed:
        return typed_rate(w.typed, matchers, seed, n)
    table = equal_partition(w.space, {f"m{j}": "" for j in range(matchers)})
    ids = [str(j) for j in range(w.n_subs)]
    part = build_partitioned(w, table, ids, ids)
    pts = w.sample(n, np.random.default_rng([seed, 1]))
    best = best_cpu = np.inf
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.thread_time()
        match_partitioned(part, pts)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.thread_time() - c0)
    return n / best, best_cpu * 1e6 / n


async def subscribe_all(url: str, w, concurrency: int = 16) -> float:
    """Every subscription through POST /v1/subscriptions (bluedove.lab.readers.subscribe_workload); seconds taken."""
    t0 = time.perf_counter()
    transport = pool(url, concurrency, timeout_s=60.0)
    try:
        await subscribe_workload(transport, w, concurrency)
    finally:
        await transport.close()
    return time.perf_counter() - t0


def add_parser(sub) -> None:
    p = sub.add_parser("e2e", help=BENCHES["e2e"])
    add_workload_flags(p, "paper, sparse or traffic", variants=True)
    add_cluster_flags(p, matchers=4, policy=True)
    add_deliver_flag(p)
    add_cpu_flag(p)
    p.add_argument("--batch", type=int, default=200, help="messages per POST /v1/messages:batch (default 200)")
    p.add_argument("--step-s", type=float, default=6.0, help="seconds per rate step (default 6)")
    p.add_argument("--start-rate", type=float, default=1000.0, help="first step's rate (msg/s)")
    p.add_argument("--factor", type=float, default=1.3, help="each step's rate over the previous one's")
    p.add_argument("--max-steps", type=int, default=15)
    p.add_argument("--partition", action="append", default=None, metavar="SYSTEM[,SYSTEM...]",
                   help="systems to run in turn on the same subscriptions and messages: mpartition (BlueDove, "
                        "default), p2p, full-replication (the paper's §IV-B); repeatable or a comma list")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the --partition systems this many times (each round starts one system later); "
                        "each system's best round is reported")
    p.add_argument("--baseline-policy", choices=POLICIES, default=None,
                   help="forwarding policy of the p2p and full-replication runs (default: --policy)")
    p.add_argument("--subscribe", choices=("rest", "catalogue"), default="rest",
                   help="how the subscriptions get in: rest, POST /v1/subscriptions to the first system "
                        "(default); catalogue, written to the store before it starts (much faster on a busy "
                        "machine; every matcher loads them as at any start)")
    p.add_argument("--transport", choices=("rest", "grpc"), default="rest",
                   help="how the publishers publish: rest, POST /v1/messages:batch of --batch messages (default); "
                        "grpc, a PublishStream call of --batch messages")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="after each system's first search, one more step at the lowest saturating rate with py-spy on "
                        "a dispatcher and a matcher: raw profiles into DIR, CPU per message by category in the "
                        "report (the `lab` extra installs py-spy)")
    add_output_flags(p)
    p.set_defaults(func=run_e2e)


def run_e2e(args: argparse.Namespace) -> int:
    """`bench e2e`: every --partition system for --rounds on one store, then the report (2: bad flags)."""
    try:
        systems = parse_systems(args.partition)
        w = workload(args)
        if args.rounds < 1:
            raise ValueError(f"--rounds: expected >= 1, got {args.rounds}")
        if problem := cpu_flag_problem(args):
            raise ValueError(problem)
    except ValueError as exc:
        print(f"bench e2e: {exc}", file=sys.stderr)
        return 2
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    profile_dir = Path(args.profile).resolve() if args.profile else None
    if profile_dir is not None and py_spy() is None:
        print("bench e2e: --profile needs py-spy (pip install 'bluedove[lab]')", file=sys.stderr)
        return 2
    rounds, loaded_s = _run_rounds(args, w, systems, profile_dir)
    report(_result(args, w, systems, rounds, loaded_s, date), args.json, _print)
    return 0


def _say(*a: object) -> None:
    """A progress line on stderr."""
    print(*a, file=sys.stderr, flush=True)


def _run_rounds(args: argparse.Namespace, w, systems: list[str],
                profile_dir: Path | None) -> tuple[dict[str, list[dict]], float | None]:
    """Each system's figures of every round, on one private store; seconds the catalogue load took (or None)."""
    rounds: dict[str, list[dict]] = {name: [] for name in systems}
    with tempfile.TemporaryDirectory(prefix="bluedove-e2e-") as tmp:
        space_file = Path(tmp) / "space.json"  # the workload's space (traffic's, or k dims of paper's)
        space_file.write_text(json.dumps(w.space.to_json()))
        srv = RedisServer(Path(tmp) / "redis").start()  # one store: the systems share the catalogue
        try:
            bodies = batch_bodies(w, 40, args.batch, args.seed)
            loaded_s = None
            if args.subscribe == "catalogue":
                t0 = time.monotonic()
                asyncio.run(load_workload(srv.url, w))
                loaded_s = round(time.monotonic() - t0, 1)
            via_rest = subscribe_all if args.subscribe == "rest" else None
            for r in range(args.rounds):
                # Each round starts one system later, so a slow spell of a shared machine is spread.
                for system in systems[r % len(systems):] + systems[:r % len(systems)]:
                    rounds[system].append(run_system(system, args, w, srv.url, Path(tmp) / f"{system}-{r}",
                                                     str(space_file), bodies, subscribe=via_rest if r == 0
                                                     and system == systems[0] else None, step=step, say=_say,
                                                     store_pid=srv.proc.pid, profile_dir=profile_dir if r == 0
                                                     else None))
        finally:
            srv.stop()
    return rounds, loaded_s


def _result(args: argparse.Namespace, w, systems: list[str], rounds: dict[str, list[dict]], loaded_s: float | None,
            date: str) -> dict:
    """The bench's result: the first system's figures, every system's best round, the kernel beside them."""
    runs = {name: best_round(rs) for name, rs in rounds.items()}
    first = runs[systems[0]]
    sub_s = rounds[systems[0]][0]["subscribe_s"] or loaded_s
    kernel, kernel_us = kernel_rate(w, args.matchers, args.seed)
    for run in runs.values():
        run["cpu"] = net_of_idle(with_kernel(run["cpu"], kernel_us), run["idle_cpu_pct"])
        run["cpu_saturated"] = net_of_idle(with_kernel(run["cpu_saturated"], kernel_us), run["idle_cpu_pct"])
    cpu = first["cpu"] or {}
    return {"workload": w.name, "kind": "e2e", "matchers": args.matchers, "dispatchers": args.dispatchers,
            "policy": args.policy, "deliver": args.deliver, "subscriptions": w.n_subs, "queues": w.n_queues,
            "batch": args.batch, "publishers": args.publishers, "matcher_cpu": args.matcher_cpu,
            # the first system's figures, as before --partition existed
            "partition": systems[0], "msgs_per_s": first["msgs_per_s"],
            "p50_ms": first["p50_ms"], "p95_ms": first["p95_ms"], "p99_ms": first["p99_ms"],
            "kernel_msgs_per_s": round(kernel), "e2e_over_kernel": round(first["msgs_per_s"] / kernel, 3),
            "subscribe_s": sub_s, "steps": first["steps"], "transport": args.transport, "subscribe": args.subscribe,
            # CPU per published message: the kernel's (thread time, one core) and the first
            # system's service (dispatchers + matchers + Redis) at its reported step
            # (4 significant digits: a small run's kernel is a fraction of a µs, and 2 decimals
            # left its ratio to the service 2 % off)
            "kernel_cpu_us_per_msg": float(f"{kernel_us:.4g}"), "service_cpu_us_per_msg": cpu.get("service_us_per_msg"),
            "service_over_kernel": cpu.get("service_over_kernel"),
            "matcher_outside_walk_us_per_matched": cpu.get("matcher_outside_walk_us_per_matched"),
            "goals": {"service_over_kernel": GOAL_SERVICE_OVER_KERNEL,
                      "matcher_outside_walk_us_per_matched": GOAL_MATCHER_OUTSIDE_WALK_US},
            # every system (its best round), and BlueDove's rate over each baseline's
            "partitions": systems, "rounds": args.rounds, "systems": runs, "ratios": ratios(runs),
            "date": date, "seed": args.seed, "python": platform.python_version(), "cores": mp.cpu_count()}


def _print(r: dict) -> None:
    print(f"{r['workload']}: {r['subscriptions']:,} subscriptions in {r['queues']:,} queues, {r['matchers']} matchers,"
          f" deliver={r['deliver']}, subscribed through {r.get('subscribe', 'rest')} in {r['subscribe_s']} s"
          f" (under {r['partition']})")
    head = ("system", "policy", "saturation msg/s", "each round", "p50 / p95 / p99 ms", "sets hold", "load avg")
    rows = [(name, s["policy"], f"{s['msgs_per_s']:,}", " ".join(f"{x:,}" for x in s["rounds_msgs_per_s"]),
             f"{s['p50_ms']} / {s['p95_ms']} / {s['p99_ms']}",
             f"{s['stored']:,} ({s['stored_per_sub']}x)", f"{s['load_avg_start']} -> {s['load_avg_end']}")
            for name, s in r["systems"].items()]
    width = [max(len(str(x[c])) for x in (head, *rows)) for c in range(len(head))]
    for row in (head, *rows):
        print("  ".join(str(x).ljust(wd) for x, wd in zip(row, width)).rstrip())
    for key, v in r["ratios"].items():
        print(f"{key}: {v if v is None else f'{v}x'}")
    print(f"kernel (one core, same workload and cut) {r['kernel_msgs_per_s']:,} msg/s,"
          f" {r['kernel_cpu_us_per_msg']} µs CPU/msg; {r['partition']} e2e / kernel = {r['e2e_over_kernel']}")
    print_cpu(r)
