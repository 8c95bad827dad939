"""`bluedove demo`: a local cluster plus the traffic (or orders) workload over REST; exits 0 only on exact delivery,
leaving no process."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bluedove.client import BlueDoveError
from bluedove.client.http import AsyncHttpTransport
from bluedove.core.space import SpaceError, load_space
from bluedove.lab.demo import orders as demo_orders
from bluedove.lab.demo.fleet import (
    SETUP_CONCURRENCY,
    Comparison,
    DemoError,
    Ledger,
    create_drivers,
    delete_queues,
    message_bodies,
    publish,
    running_pollers,
    still_queued,
)
from bluedove.lab.load import pool
from bluedove.lab.workloads import orders, traffic
from bluedove.local.cluster import LocalCluster
from bluedove.local.flags import store_flags_problem

SUBS_PER_DRIVER = 3
DEFAULT_DRIVERS = 300
DEFAULT_RATE = 300.0  # sensor readings per second
# --workload: who subscribes, and what is published
WORDS = {"traffic": ("drivers", "sensor readings"), "orders": ("subscribers", "orders")}
# After publishing, wait this long at most for every expected delivery; then this grace
# period catches late duplicates or strays before the comparison.
DRAIN_TIMEOUT_S = 15.0
GRACE_S = 1.0
TICK_S = 1.0
EXAMPLES = 5


@dataclass
class MemberTotals:
    """One matcher's figures for the summary: subscriptions, messages matched, highest queue seen."""

    subscriptions: int = 0
    messages: int = 0  # messages the matcher matched, from its own counters
    peak_q: int = 0


class Progress:
    """Once a second: one line of rates, latency and matcher queues; sums per matcher."""

    def __init__(self, ledger: Ledger, client: AsyncHttpTransport, cluster: LocalCluster) -> None:
        self.ledger, self.client, self.cluster = ledger, client, cluster
        self.tty = sys.stdout.isatty()
        self.t0 = self.last_t = time.monotonic()
        self.last_pub = self.last_dlv = self.last_lat = 0
        self.members: dict[str, MemberTotals] = {}
        self.publishing = True
        self.printed = False

    async def run(self) -> None:
        k = 1
        while True:  # on the second since t0, skipping any second a slow tick overran
            await asyncio.sleep(max(0.0, self.t0 + k * TICK_S - time.monotonic()))
            await self.tick()
            k = max(k, int((time.monotonic() - self.t0) / TICK_S)) + 1

    async def _loads(self) -> str:
        try:
            members = (await self.client.cluster(timeout_s=2.0))["members"]
        except (BlueDoveError, ValueError, KeyError):
            return "q ?"
        parts = []
        for m in members:
            t = self.members.setdefault(m["id"], MemberTotals())
            q = sum(int(x.get("q", 0)) for x in m.get("load", {}).values())
            t.subscriptions = sum(int(v) for v in m.get("subscriptions", {}).values())
            t.messages = sum(int(x.get("matched", 0)) for x in m.get("load", {}).values())
            t.peak_q = max(t.peak_q, q)
            parts.append(f"{m['id']}:{q}")
        return "q " + " ".join(parts)

    async def tick(self) -> None:
        now = time.monotonic()
        dt, self.last_t = now - self.last_t, now
        led = self.ledger
        pub, dlv = led.published, led.delivered
        lat = led.latencies[self.last_lat:]
        self.last_lat = len(led.latencies)
        lat_s = (f"p50 {_ms(np.percentile(lat, 50))} p99 {_ms(np.percentile(lat, 99))}" if lat
                 else "p50 - p99 -")
        loads = await self._loads()
        phase = "drain" if not self.publishing else led.phase()
        line = (f"{now - self.t0:5.1f}s {phase}  pub {(pub - self.last_pub) / dt:4.0f}/s  "
                f"dlv {(dlv - self.last_dlv) / dt:4.0f}/s ({dlv}/{len(led.expected)})  {lat_s}  {loads}")
        self.last_pub, self.last_dlv = pub, dlv
        for event in self.cluster.check():
            self._line(f"{time.strftime('%H:%M:%S')} {event}", final=True)
        self._line(line)

    def _line(self, text: str, final: bool = False) -> None:
        if self.tty:  # one line rewritten in place: never wider than the terminal
            width = shutil.get_terminal_size().columns - 1
            sys.stdout.write("\r" + (text if final else text[:width]) + "\x1b[K" + ("\n" if final else ""))
            sys.stdout.flush()
            self.printed = not final
        else:
            print(text, flush=True)

    def finish(self) -> None:
        if self.printed:
            print(flush=True)
            self.printed = False


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}ms"


def _pcts(seconds: list[float]) -> str:
    """p50 / p95 / p99 in ms, one decimal (a store time is known to the millisecond)."""
    if not seconds:
        return "-"
    return " / ".join(f"{x * 1000:.1f}ms" for x in np.percentile(seconds, [50, 95, 99]))


async def _main(cluster: LocalCluster, w, args: argparse.Namespace) -> tuple[Comparison, Ledger, Progress]:
    """Run the fleet; SIGINT or SIGTERM cancels it, so every `finally` closes its connections."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    for s in _SIGNALS:
        loop.add_signal_handler(s, task.cancel)
    try:
        return await _run_fleet(cluster, w, args)
    finally:
        for s in _SIGNALS:
            loop.remove_signal_handler(s)  # (which leaves the default action: put ours back)
            signal.signal(s, _interrupt)


async def _run_fleet(cluster: LocalCluster, w, args: argparse.Namespace) -> tuple[Comparison, Ledger, Progress]:
    n = max(1, int(round(args.rate * args.duration)))
    run = uuid.uuid4().hex[:8]  # fresh ids: a reused store's dedup window must not swallow them
    ids = [f"{run}-{i}" for i in range(n)]
    ledger, bodies = _plan(w, args, n, ids)
    who, what = WORDS[args.workload]
    client = pool(cluster.url, SETUP_CONCURRENCY + 8)
    try:
        t = time.monotonic()
        drivers = await create_drivers(client, ledger)
        print(f"{len(drivers)} {who} subscribed ({w.n_subs} subscriptions) in {time.monotonic() - t:.1f}s; "
              f"publishing {n} {what} at {args.rate:g}/s for {args.duration:g}s", flush=True)
        progress = Progress(ledger, client, cluster)
        async with running_pollers(cluster.url, drivers, ledger):
            ticker = asyncio.create_task(progress.run())
            try:
                await publish(client, ledger, bodies, args.rate, args.duration)
                progress.publishing = False
                deadline = time.monotonic() + DRAIN_TIMEOUT_S
                while not ledger.complete() and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                await asyncio.sleep(GRACE_S)
                await progress.tick()
            finally:
                ticker.cancel()
                await asyncio.gather(ticker, return_exceptions=True)
                progress.finish()
        comparison = ledger.compare()
        if comparison.missing:  # in the queues all the same (a poller fell behind), or lost?
            comparison.still_queued = await still_queued(client, drivers, comparison.missing)
        if args.store:  # the store outlives the demo: leave nothing of it there
            await delete_queues(client, drivers)
    finally:
        await client.close()
    return comparison, ledger, progress


def _plan(w, args: argparse.Namespace, n: int, ids: list[str]) -> tuple[Ledger, list[dict]]:
    """The `n` messages of the workload (`messages(n, seed + 1)`): their ledger and their API bodies."""
    if args.workload == "orders":
        return demo_orders.plan(w, n, args.seed + 1, ids)
    points = w.messages(n, seed=args.seed + 1)
    points = points[np.argsort(points[:, 3], kind="stable")]  # the sensors' day runs in order
    return Ledger(w, points, ids), message_bodies(points, ids, w.space.names)


def _summary(c: Comparison, ledger: Ledger, progress: Progress, planned: int) -> list[str]:
    lat = np.array(ledger.latencies) if ledger.latencies else np.zeros(1)
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    rows = [
        ("messages published",
         f"{ledger.published}" + (f" of {planned} planned" if ledger.published < planned else "")),
        ("publishes failed", str(c.failed_publishes)),
        ("deliveries expected", f"{c.expected}  (brute-force oracle: distinct (queue, message) pairs)"),
        ("delivered", str(c.delivered)),
        ("missing", str(len(c.missing))),
        ("duplicates", str(len(c.duplicates))),
        ("unexpected", str(len(c.unexpected))),
        ("wrong subscription lists", str(len(c.wrong_subscriptions))),
        ("failed polls or acks", ", ".join(f"{n} {k}" for k, n in ledger.poll_errors.items()) or "0"),
        ("latency p50/p95/p99/max", " / ".join(_ms(x) for x in (p50, p95, p99, lat.max())) + "  (published_at→poller)"),
        ("  published→stored", _pcts(ledger.to_stored) + "  (the service: forward, match, store write)"),
        ("  stored→poller", _pcts(ledger.from_stored) + "  (the long-poll's wake-up and answer)"),
        ("    waited for the poller", _pcts(ledger.client_wait) + "  (the client's share: stored between its polls)"),
    ]
    out = ["", "summary"] + [f"  {k:<26}{v}" for k, v in rows]
    out += ["", f"  {'matcher':<9}{'subscriptions':>14}{'messages':>10}{'peak q':>8}"]
    for m, t in sorted(progress.members.items()):
        out.append(f"  {m:<9}{t.subscriptions:>14}{t.messages:>10}{t.peak_q:>8}")
    out.append("  (subscriptions: summed over the per-dimension sets; messages: matched by that matcher)")
    return out


def _differences(c: Comparison) -> list[str]:
    out = []
    for name, keys in (("missing", c.missing), ("duplicates", c.duplicates), ("unexpected", c.unexpected),
                       ("wrong subscription lists", c.wrong_subscriptions)):
        if keys:
            shown = ", ".join(f"driver {d} message {m}" for d, m in keys[:EXAMPLES])
            out.append(f"  {name}: {len(keys)}, e.g. {shown}")
    if c.missing:
        out.append(f"  of the missing, {c.still_queued} were still waiting in their queues unread "
                   f"(the rest were never stored, or were read and not acked)")
    if c.failed_publishes:
        out.append(f"  {c.failed_publishes} messages were not accepted (no 202 after retries)")
    return out


def _check_args(args: argparse.Namespace) -> str | None:
    if problem := store_flags_problem(args):
        return problem
    for name in ("matchers", "dispatchers", "drivers"):
        if getattr(args, name) < 1:
            return f"--{name} must be at least 1"
    if not args.duration > 0 or not args.rate > 0:
        return "--duration and --rate must be positive"
    if args.space is not None:
        typed = args.workload == "orders"
        try:
            if load_space(args.space) != (orders.orders_space() if typed else traffic.traffic_space()):
                text = demo_orders.space_yaml() if typed else traffic.space_yaml()
                return f"--space {args.space}: the demo needs the {args.workload} space:\n{text}"
        except SpaceError as exc:
            return str(exc)
    return None


def _workload(args: argparse.Namespace, data_dir: Path):
    """The workload `--workload` names, and its space file (`--space`, else written into `data_dir`)."""
    if args.workload == "orders":
        space_file = args.space or str(demo_orders.write_space(data_dir / "orders-space.yaml"))
        return demo_orders.workload(args.seed, args.drivers), space_file
    space_file = args.space or str(traffic.write_space(data_dir / "traffic-space.yaml"))
    return traffic.get(seed=args.seed, drivers=args.drivers, subs_per_driver=SUBS_PER_DRIVER), space_file


def _defaults(args: argparse.Namespace) -> None:
    """--drivers and --rate left out: the workload's own defaults."""
    typed = args.workload == "orders"
    if args.drivers is None:
        args.drivers = demo_orders.DEFAULT_SUBSCRIBERS if typed else DEFAULT_DRIVERS
    if args.rate is None:
        args.rate = demo_orders.DEFAULT_RATE if typed else DEFAULT_RATE


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _interrupt(_signum, _frame) -> None:
    """Outside the event loop (cluster start and stop), a signal interrupts like Ctrl-C."""
    raise KeyboardInterrupt


def run_demo(args: argparse.Namespace) -> int:
    _defaults(args)
    problem = _check_args(args)
    if problem:
        print(f"bluedove demo: {problem}", file=sys.stderr)
        return 2
    tmp = None if args.data_dir else tempfile.mkdtemp(prefix="bluedove-demo-")
    data_dir = Path(args.data_dir or tmp)
    old = {s: signal.signal(s, _interrupt) for s in _SIGNALS}
    cluster: LocalCluster | None = None
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        w, space_file = _workload(args, data_dir)
        cluster = LocalCluster(matchers=args.matchers, dispatchers=args.dispatchers, http_port=args.http_port,
                               grpc_port=args.grpc_port,
                               data_dir=data_dir, store=args.store, space_file=space_file, policy=args.policy,
                               quiet=True, partition=args.partition, store_cluster=args.store_cluster)
        print(f"starting BlueDove: {args.matchers} matchers, {args.dispatchers} dispatcher(s), data in {data_dir}",
              flush=True)
        cluster.start()
        procs = ([f"redis-server={cluster.redis.proc.pid}"] if cluster.redis else []) + \
                [f"redis-{port}={node.proc.pid}" for port, node in
                 (cluster.redis_cluster.nodes.items() if cluster.redis_cluster else [])] + \
                [f"{c.name}={c.pid}" for c in cluster.children]
        print(f"REST API {cluster.url}  (docs {cluster.url}/docs, dashboard {cluster.url}/dashboard)", flush=True)
        print(f"processes: {' '.join(procs)}", flush=True)
        comparison, ledger, progress = asyncio.run(_main(cluster, w, args))
        print("\n".join(_summary(comparison, ledger, progress, max(1, int(round(args.rate * args.duration))))))
        if comparison.exact and comparison.delivered:
            print("result: exact delivery (every expected delivery arrived once, and nothing else)", flush=True)
            return 0
        if comparison.exact:
            print("result: nothing was expected, nothing arrived (try more --drivers or a longer --duration)",
                  flush=True)
            return 0
        print("result: delivery NOT exact", flush=True)
        print("\n".join(_differences(comparison)), flush=True)
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("\ninterrupted", file=sys.stderr, flush=True)
        return 130
    except (DemoError, RuntimeError, OSError, BlueDoveError) as exc:
        print(f"\nbluedove demo failed: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        for s in old:  # a second Ctrl-C must not cut the clean-up short
            signal.signal(s, signal.SIG_IGN)
        try:
            if cluster is not None:
                print("stopping the cluster…", flush=True)
                cluster.stop()
                print("cluster stopped", flush=True)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
