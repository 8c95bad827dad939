"""`bluedove bench fleet`: a phone fleet, tens of thousands of parked long polls
(`GET /v1/queues/{queue}/messages?wait=20&max=10`), on a real local cluster.

Set-up: N queues, each subscribed to a box only its own point lies in (fleet_probe.py), made
with the SDK's `:batch` calls. Then, each phase timed:
  parking    C client processes (fleet_client.py) open a keep-alive connection per queue and
             send its poll; the kernel spreads the connections over the dispatchers (they
             share the port). Until every poll is sent and the dispatchers' CPU has settled.
  parked     for --seconds, single publishes through the SDK at a steady --rate from this
             process, each to the point of a random queue of a --fraction of them; each
             answered poll is followed at once by the next (its receipts acked first).
  after      the clients close every connection; a few seconds later, the last sample.
Per dispatcher, sampled idle (before the polls), parked, at the end of the publishes and
after: Redis connections (its sockets to Redis), HTTP connections, open files and RSS; for
Redis, connected_clients. Wake-up latency: a poll's answer read by the client minus its
publish's 202 (it can be negative: the answer may arrive before the 202 does), and minus the
publish's send; every published message must reach its queue's poll exactly once. Each
phase's CPU per process, and its time runnable but waiting for a core (the machine is shared:
a starved dispatcher is slow for want of a core, not of work).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import platform
import resource
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bluedove.client import AsyncClient
from bluedove.client.errors import BlueDoveError
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import report
from bluedove.lab.bench.cpu import cpu_seconds
from bluedove.lab.bench.fleet_client import OPEN_FILES_CAP
from bluedove.lab.bench.fleet_probe import MAX_QUEUES, queue_box, queue_point, runqueue_wait_s, sample
from bluedove.lab.bench.fleet_procs import Clients
from bluedove.lab.load import Pacer
from bluedove.local.cluster import LocalCluster

POLLS_PER_CLIENT = 10_000  # --clients' default: one client process per this many polls
POLLS_PER_DISPATCHER = 19_000  # a dispatcher process holds at most about this many (its open-file limit)
PUBLISH_INFLIGHT = 64  # publishes awaiting their 202 at once; one due beyond is skipped
SUBSCRIBE_CALLS = 4  # `:batch` calls of 1,000 under way at once
DRAIN_S = 2.0  # after the publishes, at most --wait + this for every delivery (a missed wake-up: late, not lost)
SETTLE_S = 5.0  # after parking, at most this long for the dispatchers' CPU to settle
SETTLED_CPU = 0.1  # CPU-seconds a second of all dispatchers that counts as settled


def add_parser(sub: Any) -> None:
    p = sub.add_parser("fleet", help=BENCHES["fleet"], description=(
        "Parks --polls long polls on a local cluster and measures what they cost the dispatchers "
        "(Redis connections, open files, RSS) and how fast a publish wakes its poll. Machine limit: "
        f"a process may hold at most `ulimit -Hn` open files ({resource.getrlimit(resource.RLIMIT_NOFILE)[1]:,} "
        "here; a hard limit, not raised by the bench), so a client "
        f"process holds at most {OPEN_FILES_CAP:,} connections and a dispatcher about "
        f"{POLLS_PER_DISPATCHER:,} parked polls. On loopback each client process connects from an address "
        "of its own (127.0.1.C), whose ~28,000 ephemeral ports towards the dispatchers' port are its own."))
    p.add_argument("--polls", type=int, default=2000, help="parked long polls, one queue each (default 2000)")
    p.add_argument("--dispatchers", type=int, default=1, help="dispatcher processes sharing the port (default 1; "
                   f"each parks at most ~{POLLS_PER_DISPATCHER:,})")
    p.add_argument("--matchers", type=int, default=2, help="matcher processes (default 2)")
    p.add_argument("--wait", type=int, default=20, help="each poll's wait, s (1..20; default 20)")
    p.add_argument("--max", dest="max_n", type=int, default=10, help="each poll's max (default 10)")
    p.add_argument("--rate", type=float, default=50.0, help="single publishes/s while parked (0: none; default 50)")
    p.add_argument("--fraction", type=float, default=0.1,
                   help="the fraction of the queues the publishes go to, each to a random one (default 0.1)")
    p.add_argument("--clients", type=int, default=None,
                   help=f"client processes holding the polls (default ceil(polls / {POLLS_PER_CLIENT:,}); "
                        f"each at most {OPEN_FILES_CAP:,})")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds of the parked phase (default 10)")
    p.add_argument("--after", type=float, default=3.0,
                   help="seconds after the clients closed their connections, before the last sample (default 3)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_fleet)


def invalid(a: argparse.Namespace) -> str | None:
    """What is wrong with the flags, naming the flag; None when nothing is."""
    if a.clients is None:
        a.clients = max(1, math.ceil(a.polls / POLLS_PER_CLIENT))
    checks = [
        (1 <= a.polls <= MAX_QUEUES, f"--polls must be in 1..{MAX_QUEUES:,}"),
        (a.dispatchers >= 1 and a.matchers >= 1 and a.clients >= 1,
         "--dispatchers, --matchers and --clients must be at least 1"),
        (1 <= a.wait <= 20, "--wait must be in 1..20 (the API's long-poll wait)"),
        (1 <= a.max_n <= 1000, "--max must be in 1..1000"),
        (a.rate >= 0 and a.seconds > 0 and a.after >= 0, "--rate and --after must not be negative, "
                                                           "--seconds must be positive"),
        (0 < a.fraction <= 1, "--fraction must be in (0, 1]"),
        (a.clients <= a.polls and math.ceil(a.polls / a.clients) <= OPEN_FILES_CAP,
         f"--clients {a.clients}: each client process holds at most {OPEN_FILES_CAP:,} connections "
         f"(and at least one): --polls {a.polls} needs {math.ceil(a.polls / OPEN_FILES_CAP)} to {a.polls}"),
        (math.ceil(a.polls / a.dispatchers) <= POLLS_PER_DISPATCHER,
         f"--dispatchers {a.dispatchers}: a dispatcher process parks at most ~{POLLS_PER_DISPATCHER:,} polls "
         f"(its open files): --polls {a.polls} needs {math.ceil(a.polls / POLLS_PER_DISPATCHER)}"),
    ]
    return next((why for ok, why in checks if not ok), None)


def pct(ns: list[int]) -> dict[str, float | None]:
    """{p50_ms, p99_ms, max_ms} of `ns` (nanoseconds), None each when empty."""
    a = np.asarray(ns, dtype=np.float64)
    return {f"{k}_ms": (round(float(np.percentile(a, p)) / 1e6, 2) if len(a) else None)
            for k, p in (("p50", 50), ("p99", 99), ("max", 100))}


async def create_queues(url: str, space: Any, n: int) -> list[tuple[str, str]]:
    """n queues, queue i subscribed to queue_box(i), by `POST /v1/subscriptions:batch` of 1,000
    (each item makes its own queue), a few calls at once. [(queue id, token)] in order."""
    out: list[tuple[str, str]] = [("", "")] * n
    gate = asyncio.Semaphore(SUBSCRIBE_CALLS)
    async with AsyncClient(url, timeout_s=120.0) as client:
        async def chunk(start: int) -> None:
            async with gate:
                subs = await client.subscribe_many(queue_box(space, i) for i in range(start, min(n, start + 1000)))
            for j, s in enumerate(subs):
                out[start + j] = (s.queue.id, s.queue.token)

        await asyncio.gather(*(chunk(s) for s in range(0, n, 1000)))
    return out


async def publish(url: str, space: Any, targets: np.ndarray, rate: float, seconds: float,
                  rng: np.random.Generator) -> tuple[list[tuple[str, int, int, int, str]], int]:
    """Single publishes at `rate` for `seconds`, each to a random target's point with id
    fleet-K. ([(id, queue index, sent ns, 202 ns or 0, error kind or "")], skipped)."""
    sends: list[tuple[str, int, int, int, str]] = []
    tasks: set[asyncio.Task[None]] = set()
    skipped, k, pacer = 0, 0, Pacer()

    async def one(client: AsyncClient, mid: str, qi: int) -> None:
        t0 = time.time_ns()
        try:
            await client.publish(queue_point(space, qi), None, id=mid)
            sends.append((mid, qi, t0, time.time_ns(), ""))
        except BlueDoveError as exc:
            sends.append((mid, qi, t0, 0, type(exc).__name__))

    async with AsyncClient(url, timeout_s=30.0) as client:
        end = time.monotonic() + seconds
        while rate > 0 and time.monotonic() < end:
            if len(tasks) >= PUBLISH_INFLIGHT:
                skipped += 1
            else:
                task = asyncio.create_task(one(client, f"fleet-{k}", int(rng.choice(targets))))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            k += 1
            await asyncio.sleep(pacer.wait_s(rate, 1, time.monotonic()))
        await asyncio.gather(*tasks)
    return sends, skipped


def deliveries(sends: list[tuple[str, int, int, int, str]], received: list[tuple[str, int, int]]) -> dict[str, Any]:
    """Every accepted publish against what the polls brought: lost, duplicated, misrouted, and
    the wake-up latency of each first arrival at its queue."""
    target = {mid: (qi, t0, t1) for mid, qi, t0, t1, err in sends if not err}
    seen: Counter[str] = Counter()
    first: dict[str, int] = {}
    misrouted = 0
    for mid, qi, at in received:
        if mid not in target or target[mid][0] != qi:
            misrouted += 1
            continue
        seen[mid] += 1
        first[mid] = min(first.get(mid, at), at)
    return {"expected": len(target), "received": len(first), "lost": len(target) - len(first),
            "duplicates": sum(n - 1 for n in seen.values()), "misrouted": misrouted,
            "wake_from_202": pct([at - target[mid][2] for mid, at in first.items()]),
            "wake_from_send": pct([at - target[mid][1] for mid, at in first.items()])}


def publish_figures(sends: list[tuple[str, int, int, int, str]], skipped: int, seconds: float) -> dict[str, Any]:
    ok = [t1 - t0 for _, _, t0, t1, err in sends if not err]
    return {"sent": len(sends), "accepted": len(ok), "skipped": skipped,
            "achieved_per_s": round(len(ok) / seconds, 1), "errors": dict(Counter(e for *_, e in sends if e)),
            "latency": pct(ok)}


def poll_figures(results: list[dict[str, Any]]) -> dict[str, Any]:
    errors: Counter[str] = Counter()
    samples: dict[str, str] = {}
    for r in results:
        errors.update(r["errors"])
        for kind, text in r["error_samples"].items():
            samples.setdefault(kind, text)
    return {"answers": sum(r["answers"] for r in results), "empty": sum(r["empty"] for r in results),
            "overdue": sum(r["overdue"] for r in results),
            "longest_s": max((r["longest_s"] for r in results), default=0.0),
            "open_at_close": sum(r["open_at_close"] for r in results), "errors": dict(errors),
            "error_samples": samples}


class Bench:
    """One fleet run on a started cluster: its samples and phase times as they are taken."""

    def __init__(self, args: argparse.Namespace, cluster: LocalCluster) -> None:
        self.args, self.cluster = args, cluster
        self.dispatchers = {c.name: c.pid for c in cluster.children if c.role == "dispatcher" and c.pid}
        self.samples: dict[str, Any] = {}
        self.phases: dict[str, float] = {}
        # each phase's CPU per process (% of one core): the cluster's, Redis, the clients (c1…), this one
        self.pids = {c.name: c.pid for c in cluster.children if c.pid}
        self.pids |= {"redis": cluster.redis.proc.pid} if cluster.redis and cluster.redis.proc else {}
        self.pids["bench"] = os.getpid()
        self.cpu_pct: dict[str, dict[str, float]] = {}
        self.runqueue_pct: dict[str, dict[str, float]] = {}  # of each phase, runnable but waiting for a core
        self._mark = self._cpu()

    async def sample(self, name: str) -> None:
        c = self.cluster
        assert c.store_url is not None
        redis_pid = c.redis.proc.pid if c.redis and c.redis.proc else None
        self.samples[name] = await asyncio.to_thread(sample, self.dispatchers, c.http_port, c.store_url, redis_pid)

    def _cpu(self) -> dict[str, tuple[float, float]]:
        """{process: (CPU seconds, seconds waited for a core)} so far."""
        out = {}
        for name, pid in self.pids.items():
            with contextlib.suppress(psutil.Error):  # a client process that has exited
                out[name] = (cpu_seconds(pid), runqueue_wait_s(pid))
        return out

    def start(self) -> float:
        """A phase starts now (its CPU counted from here)."""
        self._mark = self._cpu()
        return time.monotonic()

    def timed(self, name: str, since: float) -> float:
        """Phase `name` (started at `since`) ends now: its seconds and CPU; the next one starts."""
        took = time.monotonic() - since
        self.phases[name] = round(took, 2)
        cpu, was = self._cpu(), self._mark
        for j, out in enumerate((self.cpu_pct, self.runqueue_pct)):
            out[name] = {n: round(100 * (cpu[n][j] - was[n][j]) / max(took, 1e-3), 1) for n in cpu if n in was}
        self._mark = cpu
        return time.monotonic()

    async def settle(self) -> None:
        """Until the dispatchers spend under SETTLED_CPU a second (done parking), at most SETTLE_S."""
        end = time.monotonic() + SETTLE_S
        pids = list(self.dispatchers.values())
        before = sum(cpu_seconds(p) for p in pids)
        while time.monotonic() < end:
            await asyncio.sleep(1.0)
            now = sum(cpu_seconds(p) for p in pids)
            if now - before < SETTLED_CPU:
                return
            before = now

    async def measure(self) -> dict[str, Any]:
        a, c = self.args, self.cluster
        t = self.start()
        queues = await create_queues(c.url, c.space, a.polls)
        t = self.timed("create_queues", t)
        await self.sample("idle")
        clients = Clients(c.host, c.http_port, queues, a.clients, a.wait, a.max_n)
        try:
            await clients.start()
            self.pids |= {f"c{j + 1}": p.pid for j, p in enumerate(clients.procs) if p.pid}
            t = self.start()
            parked = await clients.park(timeout_s=60.0 + a.polls / 100)
            t = self.timed("parking", t)
            await self.settle()
            t = self.timed("settling", t)
            await self.sample("parked")
            rng = np.random.default_rng(a.seed)
            targets = rng.choice(a.polls, size=max(1, round(a.fraction * a.polls)), replace=False)
            sends, skipped = await publish(c.url, c.space, targets, a.rate, a.seconds, rng)
            t = self.timed("parked", t)
            await clients.drain(sum(1 for s in sends if not s[4]), a.wait + DRAIN_S)
            t = self.timed("drain", t)
            await self.sample("published")
            results = await clients.stop()
            t = self.timed("closing", t)
        finally:
            clients.kill()
        await asyncio.sleep(a.after)
        await self.sample("after")
        self.timed("after", t)
        received = [r for res in results for r in res["received"]]
        return {"parked": parked, "phases_s": self.phases,
                "parking_polls_per_s": round(parked / max(self.phases["parking"], 1e-3), 1),
                "publish": publish_figures(sends, skipped, a.seconds), "delivery": deliveries(sends, received),
                "polls_seen": poll_figures(results), "samples": self.samples, "cpu_pct": self.cpu_pct,
                "runqueue_wait_pct": self.runqueue_pct}


def run_fleet(args: argparse.Namespace) -> int:
    why = invalid(args)
    if why:
        print(f"bench fleet: {why}", file=sys.stderr)
        return 2
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="bluedove-fleet-") as tmp:
        cluster = LocalCluster(matchers=args.matchers, dispatchers=args.dispatchers, http_port=0,
                               data_dir=Path(tmp) / "cluster", quiet=True, restart=False, deliver="store")
        t = time.monotonic()
        cluster.start(timeout_s=120)
        try:
            start_s = round(time.monotonic() - t, 2)
            measured = asyncio.run(Bench(args, cluster).measure())
        finally:
            cluster.stop()
    measured["phases_s"] = {"start": start_s, **measured["phases_s"]}
    result = {"kind": "fleet", "polls": args.polls, "dispatchers": args.dispatchers, "matchers": args.matchers,
              "clients": args.clients, "wait_s": args.wait, "max": args.max_n, "rate": args.rate,
              "fraction": args.fraction, "seconds": args.seconds, **measured, "date": date, "seed": args.seed,
              "python": platform.python_version(), "cores": os.cpu_count()}
    report(result, args.json, print_fleet)
    d = measured["delivery"]
    return 0 if measured["parked"] == args.polls and d["lost"] == d["duplicates"] == d["misrouted"] == 0 else 1


def _cell(s: dict[str, Any], key: str) -> str:
    return "-" if key not in s else (f"{s[key]:,}" if isinstance(s[key], int) else str(s[key]))


def print_fleet(r: dict[str, Any]) -> None:
    print(f"fleet: {r['polls']:,} long polls (wait {r['wait_s']} s, max {r['max']}) from {r['clients']} client "
          f"processes on {r['dispatchers']} dispatcher(s), {r['matchers']} matchers; {r['parked']:,} parked")
    print("phases (s): " + ", ".join(f"{k} {v}" for k, v in r["phases_s"].items())
          + f"; parking {r['parking_polls_per_s']:,} polls/s")
    p, d, q = r["publish"], r["delivery"], r["polls_seen"]
    print(f"publishes: {p['accepted']:,} of {p['sent']:,} accepted at {p['achieved_per_s']}/s to "
          f"{r['fraction']:g} of the queues (skipped {p['skipped']}, errors {p['errors'] or 0}); "
          f"send -> 202 p50 {p['latency']['p50_ms']} / p99 {p['latency']['p99_ms']} ms")
    print("wake-up (p50 / p99 / max ms): 202 -> answer " + " / ".join(str(v) for v in d["wake_from_202"].values())
          + "; send -> answer " + " / ".join(str(v) for v in d["wake_from_send"].values()))
    print(f"delivery: {d['received']:,} of {d['expected']:,}; lost {d['lost']}, duplicates {d['duplicates']}, "
          f"misrouted {d['misrouted']}")
    print(f"polls: {q['answers']:,} answered ({q['empty']:,} empty), over wait + 1 s: {q['overdue']} "
          f"(longest {q['longest_s']} s), open at close {q['open_at_close']:,}; errors {q['errors'] or 0}")
    names = list(r["samples"])
    rows: dict[str, list[str]] = defaultdict(list)
    for name in names:
        for proc, s in r["samples"][name].items():
            keys = ("connected_clients", "fds", "rss_mb") if proc == "redis" else (
                "redis_connections", "http_connections", "fds", "rss_mb")
            for key in keys:
                rows[f"{proc} {key}"].append(_cell(s, key))
    print(f"\n  {'':<24}" + "".join(f"{n:>11}" for n in names))
    for label, cells in rows.items():
        print(f"  {label:<24}" + "".join(f"{c:>11}" for c in cells))
    print("\nCPU % of one core (and % of the time runnable but waiting for a core), by phase:")
    for phase in ("parking", "parked", "after"):
        cpu, wait = r["cpu_pct"].get(phase, {}), r["runqueue_wait_pct"].get(phase, {})
        print(f"  {phase:<9}" + ", ".join(f"{n} {v} ({wait.get(n, '-')})" for n, v in sorted(cpu.items())))
