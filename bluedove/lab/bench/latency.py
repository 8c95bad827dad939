"""`bluedove bench latency`: publish → delivered on a real local cluster whose subscribers are
already waiting (a long-poll, or a gRPC `Listen` stream, open on every queue at all times).

A publisher process sends at a steady rate (a fraction of the saturation rate, measured first as
`bench e2e` does with the subscribers running, or `--rate`); each message carries its send time
in its payload. Per load level: publish → delivered percentiles, and where the time goes:
  publish → accepted   the publisher's request reaching the dispatcher (its `published_at`)
  accepted → stored    forwarding, matching and the store write (Redis's entry time, ±0.5 ms)
  stored → answered    the long-poll's wake-up and its answer read by the subscriber
    of which waited    stored while the subscriber had no poll open: its previous one had
                       answered, the next was not sent yet (the client's loop)
  decode               the subscriber's JSON decode (the client)
First a low-load level of single `POST /v1/messages` calls gives the publish call's own time.
Every level checks delivery against the brute-force oracle: each expected (queue, message)
pair received exactly once. With `--listen grpc` the report counts, by status, the Listen
streams that ended while the bench held them (`listen_stream_ends`: none, when all is well).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags, add_workload_flags, report
from bluedove.lab.bench.cpu import cpu_seconds
from bluedove.lab.bench.e2e import batch_bodies, step
from bluedove.lab.bench.latency_clients import Received, Subscribers, message_json, publisher
from bluedove.lab.bench.latency_procs import SubscriberProcs
from bluedove.lab.bench.systems import workload
from bluedove.lab.load import pool
from bluedove.lab.readers import subscribe_workload
from bluedove.lab.workloads import brute_force
from bluedove.local.cluster import LocalCluster

N_POINTS = 5000  # distinct message points, cycled
DRAIN_S = 10.0  # after a level, wait this long at most for its last deliveries
SETTLE_S = 30.0  # after the saturation search, at most this long for the queues to empty
REQUESTS_PER_S = 100  # `--batch` auto: messages a request so that about this many requests go a second


def add_parser(sub) -> None:
    p = sub.add_parser("latency", help=BENCHES["latency"])
    add_workload_flags(p, "paper, sparse or traffic", subs=1000)
    p.add_argument("--matchers", type=int, default=4, help="matcher processes (default 4)")
    p.add_argument("--dispatchers", type=int, default=1,
                   help="dispatcher processes sharing the port (default 1)")
    p.add_argument("--load", default="0.1,0.5", help="load levels as fractions of saturation (default 0.1,0.5)")
    p.add_argument("--rate", type=float, default=None,
                   help="msg/s that counts as saturation (skips measuring it): --load 1 runs at this rate")
    p.add_argument("--single-rate", type=float, default=20.0,
                   help="msg/s of the low-load level of single POST /v1/messages calls (0: none; default 20)")
    p.add_argument("--batch", type=int, default=0,
                   help=f"messages a request at the --load levels (0, default: about {REQUESTS_PER_S} requests/s)")
    p.add_argument("--listen", choices=("poll", "grpc"), default="poll",
                   help="subscribers: REST long-polls (default) or gRPC Listen streams")
    p.add_argument("--subscriber-procs", type=int, default=2,
                   help="processes the subscribers run in, as phones are, each with its share of the queues "
                        "(long-polls as raw HTTP/1.1; default 2); 0: in the bench's own process, on the SDK's "
                        "transports")
    p.add_argument("--duration", type=float, default=10.0, help="seconds measured at each level (default 10)")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds sent before each level's measurement")
    p.add_argument("--start-rate", type=float, default=1000.0, help="saturation search: first rate (msg/s)")
    p.add_argument("--factor", type=float, default=1.3, help="saturation search: each step's rate over the last")
    p.add_argument("--step-s", type=float, default=5.0, help="saturation search: seconds per step")
    p.add_argument("--max-steps", type=int, default=12)
    add_output_flags(p)
    p.set_defaults(func=run_latency)


def _levels(args: argparse.Namespace) -> list[float]:
    try:
        out = [float(x) for x in args.load.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--load: expected fractions like 0.1,0.5, got {args.load!r}") from None
    if not out or any(not 0 < x <= 2 for x in out):
        raise ValueError(f"--load: expected fractions in (0, 2], got {args.load!r}")
    if args.rate is not None and not args.rate > 0:
        raise ValueError("--rate must be positive")
    if args.dispatchers < 1:
        raise ValueError("--dispatchers must be at least 1")
    if args.duration <= 0 or min(args.warmup, args.single_rate, args.batch, args.subscriber_procs) < 0:
        raise ValueError("--duration must be positive; --warmup, --single-rate, --batch and --subscriber-procs "
                         "not negative")
    return out


def pct(xs, ps=(50, 95, 99)) -> dict:
    """{p50_ms, ...} of `xs` in ns, or None each when empty."""
    a = np.asarray(xs, dtype=np.float64)
    return {f"p{p}_ms": (round(float(np.percentile(a, p)) / 1e6, 2) if len(a) else None) for p in ps}


class Bench:
    """The latency bench on a running cluster: its message points, the oracle's queues, the subscribers."""

    def __init__(self, args: argparse.Namespace, w, cluster: LocalCluster) -> None:
        self.args, self.w, self.cluster = args, w, cluster
        self.points = w.sample(N_POINTS, np.random.default_rng([args.seed, 9]))
        self.messages = [message_json(p, w.space.names) for p in self.points.tolist()]
        # queues (workload indices) each point reaches, from the brute-force oracle
        self.reach = [sorted({int(w.queue_of[j]) for j in subs.tolist()})
                      for subs in brute_force(w.lows, w.highs, self.points)]
        self.next_k = 0
        self.subs: Subscribers | None = None

    async def saturation(self) -> tuple[float, list[dict]]:
        """`bench e2e`'s step rule (batches of 200 from 2 publisher processes; up by --factor, down
        while even the first step saturates) with the subscribers draining: the highest rate
        achieved without saturating (the lowest achieved if every step saturated)."""
        a = self.args
        bodies = batch_bodies(self.w, 40, 200, a.seed)
        rate, steps = a.start_rate, []
        for _ in range(a.max_steps):
            s = await asyncio.to_thread(step, self.cluster.url, rate, a.step_s, bodies, 200, 2)
            steps.append(s)
            print(f"latency: offered {s['offered']:,} msg/s -> {s['achieved']:,}"
                  f"{'  SATURATED' if s['saturated'] else ''}", file=sys.stderr, flush=True)
            if s["saturated"] and any(not x["saturated"] for x in steps):
                break  # the edge, from below
            if not s["saturated"] and steps[0]["saturated"]:
                break  # the edge, from above
            rate = rate / a.factor if s["saturated"] else rate * a.factor  # down while even the first saturates
        ok = [s["achieved"] for s in steps if not s["saturated"]]
        return float(max(ok, default=min(s["achieved"] for s in steps))), steps

    async def settle(self, limit_s: float = SETTLE_S) -> None:
        """Until no delivery for a second (the queues are empty), at most `limit_s`."""
        end = time.monotonic() + limit_s
        while time.monotonic() < end:
            await self.subs.sync()
            if time.monotonic() - self.subs.last_delivery >= 1.0:
                break
            await asyncio.sleep(0.2)

    def _cpu(self) -> dict[str, float]:
        pids = {c.name: c.pid for c in self.cluster.children if c.pid}
        if self.cluster.redis:
            pids["redis"] = self.cluster.redis.proc.pid
        pids["bench"] = os.getpid()
        pids.update({f"subscribers{j + 1}": pid for j, pid in enumerate(getattr(self.subs, "pids", []))})
        return {name: cpu_seconds(pid) for name, pid in pids.items()}

    async def level(self, name: str, rate: float, batch: int) -> dict:
        a = self.args
        await self.subs.sync()
        self.subs.got, self.subs.gaps_ns = [], []
        k0 = self.next_k
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        proc = ctx.Process(target=publisher, args=(self.cluster.url, rate, batch, a.warmup, a.duration,
                                                   self.messages, k0, q))
        load0, cpu0, t0 = os.getloadavg()[0], self._cpu(), time.monotonic()
        await asyncio.to_thread(proc.start)  # (spawn writes its arguments while the child starts)
        res = await asyncio.to_thread(q.get)
        await asyncio.to_thread(proc.join)
        took, cpu1 = time.monotonic() - t0, self._cpu()
        self.next_k = res["next_k"]
        expected = Counter()
        for k, n, _, ok, _ in res["sends"]:
            if ok:
                expected.update((qi, kk) for kk in range(k, k + n) for qi in self.reach[kk % N_POINTS])
        end = time.monotonic() + DRAIN_S
        while time.monotonic() < end:
            await self.subs.sync()
            if expected.keys() <= {(g.queue, g.k) for g in self.subs.got}:
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(0.5)  # late duplicates
        await self.subs.sync()
        got = [g for g in self.subs.got if g.k >= k0]
        out = figures(got, res["sends"], expected, grpc=bool(self.subs.grpc_url), gaps=self.subs.gaps_ns)
        cpu = {n: round(100 * (cpu1[n] - cpu0.get(n, 0.0)) / took, 1) for n in cpu1}
        cpu["publisher"] = round(100 * res["cpu_s"] / took, 1)
        return {"level": name, "rate": round(rate, 1), "batch": batch,
                "sent": sum(s[1] for s in res["sends"]), "skipped": res["skipped"],
                "achieved": round(sum(s[1] for s in res["sends"] if s[3]) / res["elapsed_s"], 1),
                **out, "cpu_pct": cpu, "load_avg_start": round(load0, 2), "load_avg_end": round(os.getloadavg()[0], 2)}


def figures(got: list[Received], sends: list[tuple], expected: Counter, grpc: bool, gaps: list[int]) -> dict:
    """One level's delivery check and latency figures (the warm-up's messages are checked, not timed)."""
    failed = {kk for k, n, _, ok, _ in sends if not ok for kk in range(k, k + n)}
    warm = {kk for k, n, _, _, w in sends if w for kk in range(k, k + n)}
    seen = Counter((g.queue, g.k) for g in got)
    timed = [g for g in got if g.k not in warm and (g.queue, g.k) in expected]
    stored = np.array([g.stored_ms * 1_000_000 + 500_000 for g in timed], dtype=np.int64)
    col = {f: np.array([getattr(g, f) for g in timed], dtype=np.int64)
           for f in ("sent", "accepted", "issued", "before", "answered", "decoded")}
    publish = [t1 - t0 for k, n, t0, t1, w in sends if t1 and not w]
    return {
        "expected": sum(expected.values()), "received": len(seen),
        "missing": sum(1 for key in expected if key not in seen),
        "duplicates": sum(n - 1 for n in seen.values()),
        "unexpected": sum(1 for key in seen if key not in expected and key[1] not in failed),
        "failed_messages": len(failed), "timed": len(timed),
        "delivered": pct(col["decoded"] - col["sent"]),
        "publish_call": pct(publish, (50, 99)),
        "stages": {
            "publish_to_accepted": pct(col["accepted"] - col["sent"]),
            "accepted_to_stored": pct(stored - col["accepted"]),
            "stored_to_answered": pct(col["answered"] - stored),
            # the client's share: stored while the subscriber had no poll open (after its previous
            # poll answered, before it sent the next), and its decode
            "waited_for_client": (None if grpc
                                  else pct(np.maximum(col["issued"] - np.maximum(stored, col["before"]), 0))),
            "client_decode": None if grpc else pct(col["decoded"] - col["answered"]),
        },
        "poll_gap": None if grpc else pct(gaps, (50, 99)),
    }


async def _measure(args: argparse.Namespace, w, cluster: LocalCluster, loads: list[float]) -> dict:
    b = Bench(args, w, cluster)
    t0 = time.monotonic()
    setup = pool(cluster.url, 16, timeout_s=60.0)
    try:
        _, queues = await subscribe_workload(setup, w, 16)
    finally:
        await setup.close()
    subscribe_s = round(time.monotonic() - t0, 1)
    grpc_url = f"grpc://{cluster.grpc_address}" if args.listen == "grpc" else None
    ordered = [queues[q] for q in sorted(queues)]
    b.subs = (SubscriberProcs(cluster.url, ordered, grpc_url, args.subscriber_procs) if args.subscriber_procs
              else Subscribers(cluster.url, ordered, grpc_url))
    listening = asyncio.create_task(b.subs.run())
    try:
        if isinstance(b.subs, SubscriberProcs):
            await b.subs.started.wait()
        await asyncio.sleep(1.0)  # every subscriber's first long-poll (or stream) open
        steps: list[dict] = []
        if args.rate is not None:
            saturation = args.rate
        else:
            saturation, steps = await b.saturation()
            await b.settle()
        b.subs.recording = True
        levels = []
        if args.single_rate:
            levels.append(await b.level("single", args.single_rate, 1))
        for f in loads:
            rate = f * saturation
            batch = args.batch or max(1, math.ceil(rate / REQUESTS_PER_S))
            levels.append(await b.level(f"{f:g}", rate, batch))
            await b.settle(5.0)
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
    return {"saturation_msgs_per_s": round(saturation), "saturation_measured": args.rate is None,
            "saturation_steps": steps, "subscribe_s": subscribe_s, "levels": levels,
            "subscriber_errors": dict(b.subs.errors), "subscriber_error_samples": dict(b.subs.error_samples),
            "listen_stream_ends": dict(b.subs.stream_ends) if grpc_url else None,
            "subscriber_procs": args.subscriber_procs}


def run_latency(args: argparse.Namespace) -> int:
    try:
        loads = _levels(args)
        w = workload(args)
    except ValueError as exc:
        print(f"bench latency: {exc}", file=sys.stderr)
        return 2
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="bluedove-latency-") as tmp:
        space = Path(tmp) / "space.json"  # the workload's space (traffic's, or k dims of paper's)
        space.write_text(json.dumps(w.space.to_json()))
        cluster = LocalCluster(matchers=args.matchers, dispatchers=args.dispatchers, http_port=0,
                               data_dir=Path(tmp) / "cluster", space_file=str(space), quiet=True, restart=False,
                               deliver="store")
        cluster.start(timeout_s=120)
        try:
            measured = asyncio.run(_measure(args, w, cluster, loads))
        finally:
            cluster.stop()
    result = {"kind": "latency", "workload": w.name, "subscriptions": w.n_subs, "queues": w.n_queues,
              "matchers": args.matchers, "dispatchers": args.dispatchers, "listen": args.listen,
              "duration_s": args.duration, **measured,
              "date": date, "seed": args.seed, "python": platform.python_version(), "cores": os.cpu_count()}
    report(result, args.json, _print)
    exact = all(lv["missing"] == lv["duplicates"] == lv["unexpected"] == 0 for lv in measured["levels"])
    return 0 if exact else 1


def _ms(d: dict | None, keys=("p50_ms", "p95_ms", "p99_ms")) -> str:
    return "-" if d is None else " / ".join(str(d[k]) for k in keys if k in d)


def _print(r: dict) -> None:
    print(f"{r['workload']}: {r['subscriptions']:,} subscriptions, {r['queues']:,} queues each with a subscriber "
          f"({'gRPC Listen' if r['listen'] == 'grpc' else 'REST long-poll'}), {r['matchers']} matchers; "
          f"saturation {r['saturation_msgs_per_s']:,} msg/s ({'measured' if r['saturation_measured'] else '--rate'})")
    for lv in r["levels"]:
        st = lv["stages"]
        print(f"\nlevel {lv['level']}: {lv['achieved']:,} msg/s ({lv['batch']} a request), "
              f"{lv['received']:,} of {lv['expected']:,} deliveries, missing {lv['missing']}, "
              f"duplicates {lv['duplicates']}, unexpected {lv['unexpected']}; load {lv['load_avg_start']}")
        rows = [("publish -> delivered", lv["delivered"]), ("publish call (202)", lv["publish_call"]),
                ("  publish -> accepted", st["publish_to_accepted"]),
                ("  accepted -> stored", st["accepted_to_stored"]),
                ("  stored -> answered", st["stored_to_answered"]),
                ("    waited for client", st["waited_for_client"]), ("  client decode", st["client_decode"]),
                ("client poll gap", lv["poll_gap"])]
        print("  " + f"{'ms: p50 / p95 / p99':<26}")
        for label, d in rows:
            print(f"  {label:<26}{_ms(d)}")
        print("  CPU %: " + ", ".join(f"{k} {v}" for k, v in sorted(lv["cpu_pct"].items())))
    if r["listen_stream_ends"] is not None:  # the whole run's, the bench's own cancel at the end aside
        ends = ", ".join(f"{k} {v:,}" for k, v in sorted(r["listen_stream_ends"].items()))
        print(f"\nListen streams ended (and opened again): {ends or 'none'}")
    if r["subscriber_errors"]:
        print("subscriber errors: " + ", ".join(f"{k} {v:,}" for k, v in sorted(r["subscriber_errors"].items())))
