"""The soak bench's moving parts on a running local cluster (bluedove/lab/bench/soak.py starts it): a paced
publisher, churn (subscriptions and queues come and go), one poller per queue that acks all it
gets, a matcher restart every so often, and a sampler of each process's RSS and open file
descriptors. Every call goes through the SDK (AsyncClient over gRPC); the ledger
(bluedove/lab/bench/soak_judge.py) learns of each step in the order the oracle needs."""

from __future__ import annotations

import asyncio
import itertools
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field

import numpy as np
import psutil

from bluedove.client import AsyncClient
from bluedove.client.errors import BlueDoveError, NotFound
from bluedove.lab.bench.soak_judge import Ledger
from bluedove.local.cluster import LocalCluster

TICK_S = 0.25  # the publisher sends one batch per tick


@dataclass
class Plan:
    """How a soak runs: its length, rate, queues, churn, restarts and sampling."""

    seconds: float
    rate: float  # messages/s
    queues: int  # queues alive at any time
    subs_per_queue: int
    churn_every: float  # seconds between subscription swaps
    queue_every: float  # seconds between queue swaps (one retired, one created)
    restart_every: float  # seconds between matcher restarts (0: none)
    sample_every: float  # seconds between RSS/fd samples
    drain_s: float  # after the load: how long the pollers may take to empty the queues
    ids: bool = False  # messages carry idempotency ids (the SDK retries them on UNAVAILABLE)
    seed: int = 1


@dataclass
class Stats:
    """What a soak counted: errors by kind, churn, restarts and each process's RSS/fd samples."""

    errors: dict[str, int] = field(default_factory=dict)
    subscribed: int = 0
    unsubscribed: int = 0
    queues_created: int = 0
    queues_deleted: int = 0
    restarts: list[dict] = field(default_factory=list)
    series: dict[str, list[tuple[float, int, int]]] = field(default_factory=dict)  # key -> (t, rss, fds)

    def error(self, what: str, exc: BaseException) -> None:
        key = f"{what}: {type(exc).__name__}"
        self.errors[key] = self.errors.get(key, 0) + 1


class Soak:
    """The soak's moving parts on one running local cluster, with their ledger and counts."""

    def __init__(self, cluster: LocalCluster, plan: Plan, dims: list[dict]) -> None:
        self.cluster = cluster
        self.plan = plan
        self.dims = dims
        self.names = [d["name"] for d in dims]
        self.lo = np.array([d["min"] for d in dims], float)
        self.hi = np.array([d["max"] for d in dims], float)
        self.ledger = Ledger(len(dims))
        self.stats = Stats()
        self.rng = random.Random(plan.seed)
        self.np_rng = np.random.default_rng(plan.seed)
        self.client = AsyncClient(f"grpc://{cluster.grpc_address}", timeout_s=30.0, retries=6)
        self.queues: dict[str, list] = {}  # queue id -> [Queue, [Subscription, ...]]
        self.pollers: dict[str, asyncio.Task] = {}
        self.retiring: set[str] = set()
        self.generation: dict[str, int] = {}  # process name -> series generation
        self.t0 = 0.0
        self.stopping = asyncio.Event()
        self._ids = itertools.count()

    # -- subscriptions -------------------------------------------------------------------------
    def _box(self) -> tuple[dict, np.ndarray, np.ndarray]:
        """A subscription on 1 to 3 dimensions (the rest wildcards), each a quarter of the range wide."""
        low, high = self.lo.copy(), self.hi.copy()
        preds = {}
        for k in self.rng.sample(range(len(self.names)), self.rng.choice((1, 2, 3))):
            width = (self.hi[k] - self.lo[k]) / 4
            a = self.rng.uniform(self.lo[k], self.hi[k] - width)
            low[k], high[k] = a, a + width
            preds[self.names[k]] = (a, a + width)
        return preds, low, high

    async def subscribe(self, qid: str) -> None:
        queue, subs = self.queues[qid]
        preds, low, high = self._box()
        try:
            sub = await self.client.subscribe(queue, preds)
        except BlueDoveError as exc:
            self.stats.error("subscribe", exc)
            return
        self.ledger.added(sub.id, qid, low, high, time.monotonic() - self.t0)
        subs.append(sub)
        self.stats.subscribed += 1

    async def unsubscribe(self, qid: str) -> None:
        subs = self.queues[qid][1]
        if not subs:
            return
        sub = subs.pop(self.rng.randrange(len(subs)))
        self.ledger.removing(sub.id)
        try:
            await self.client.unsubscribe(sub)
            self.stats.unsubscribed += 1
        except BlueDoveError as exc:
            self.stats.error("unsubscribe", exc)

    async def new_queue(self) -> None:
        try:
            queue = await self.client.create_queue()
        except BlueDoveError as exc:
            self.stats.error("create_queue", exc)
            return
        self.stats.queues_created += 1
        self.queues[queue.id] = [queue, []]
        self.pollers[queue.id] = asyncio.create_task(self.poll(queue))
        for _ in range(self.plan.subs_per_queue):
            await self.subscribe(queue.id)

    async def retire_queue(self, qid: str) -> None:
        """Unsubscribe all, let the poller take every expected delivery, then delete the queue."""
        self.retiring.add(qid)
        queue, subs = self.queues[qid]
        while subs:
            await self.unsubscribe(qid)
        deadline = time.monotonic() + self.plan.drain_s
        while self.ledger.pending_in(qid) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        self.pollers.pop(qid).cancel()
        del self.queues[qid]
        try:
            await self.client.delete_queue(queue)
            self.stats.queues_deleted += 1
        except BlueDoveError as exc:
            self.stats.error("delete_queue", exc)

    async def churn(self) -> None:
        next_queue = time.monotonic() + self.plan.queue_every
        while not self.stopping.is_set():
            await asyncio.sleep(self.plan.churn_every)
            open_ = [q for q in self.queues if q not in self.retiring]
            if not open_:
                continue
            qid = self.rng.choice(open_)
            await self.unsubscribe(qid)
            await self.subscribe(qid)
            if time.monotonic() >= next_queue and not self.stopping.is_set():
                next_queue += self.plan.queue_every
                await self.new_queue()
                await self.retire_queue(self.rng.choice(open_))

    # -- messages ------------------------------------------------------------------------------
    async def publish(self) -> None:
        per_tick = max(1, round(self.plan.rate * TICK_S))
        due = time.monotonic()
        while not self.stopping.is_set():
            pts = self.np_rng.uniform(self.lo, self.hi, (per_tick, len(self.names)))
            ids = [f"soak-{self.plan.seed}-{next(self._ids)}" for _ in range(per_tick)]
            msgs = [{"attributes": dict(zip(self.names, row)), "payload": mid,
                     **({"id": mid} if self.plan.ids else {})} for mid, row in zip(ids, pts.tolist())]
            before = self.ledger.snapshot()
            try:
                got = await self.client.publish_many(msgs)
                self.ledger.published_batch(before, got, pts, time.monotonic() - self.t0)
            except BlueDoveError as exc:
                self.stats.error("publish", exc)
                self.ledger.failed_batch(ids, pts)
            due += TICK_S
            await asyncio.sleep(max(0.0, due - time.monotonic()))

    async def poll(self, queue) -> None:
        while True:
            try:
                got = await self.client.poll(queue, max=100, wait=0.5)
                for d in got:
                    self.ledger.delivered(d.id, queue.id, d.subscriptions)
                await self.client.ack(queue, got)
            except NotFound:
                return
            except BlueDoveError as exc:
                self.stats.error("poll/ack", exc)
                await asyncio.sleep(0.2)

    # -- processes -----------------------------------------------------------------------------
    def processes(self) -> dict[str, int]:
        """name#generation -> pid of every process of the cluster alive now."""
        out = {f"{c.name}#{self.generation.get(c.name, 0)}": c.pid for c in self.cluster.children if c.alive()}
        if self.cluster.redis and self.cluster.redis.proc:
            out["redis#0"] = self.cluster.redis.proc.pid
        return out

    async def sample(self) -> None:
        handles: dict[int, psutil.Process] = {}
        while True:
            t = time.monotonic() - self.t0
            for key, pid in self.processes().items():
                try:
                    p = handles.setdefault(pid, psutil.Process(pid))
                    point = (round(t, 2), p.memory_info().rss, p.num_fds())
                except psutil.Error:
                    continue
                self.stats.series.setdefault(key, []).append(point)
            if self.stopping.is_set():
                return
            await asyncio.sleep(self.plan.sample_every)

    def _member(self, name: str) -> dict:
        try:
            return next((m for m in self.cluster.cluster_state()["members"] if m["id"] == name), {})
        except (OSError, KeyError, ValueError):
            return {}

    def _restart_blocking(self, name: str, sig: signal.Signals) -> float:
        """Signal the matcher, start it again (same id and port) and wait until gossip sees the
        new process (a new generation) alive."""
        child = self.cluster.child(name)
        old = self._member(name).get("generation")
        child.proc.send_signal(sig)
        try:
            child.proc.wait(15)
        except subprocess.TimeoutExpired:
            child.proc.kill()
            child.proc.wait()
        began = time.monotonic()
        child.restarts += 1
        child.start()
        deadline = began + 90
        while time.monotonic() < deadline:
            m = self._member(name)
            if m.get("status") == "alive" and m.get("generation") != old and child.alive():
                return time.monotonic() - began
            time.sleep(0.2)
        raise RuntimeError(f"matcher {name} not alive again within 90 s of its restart")

    async def restarts(self) -> None:
        if self.plan.restart_every <= 0:
            return
        sigs = itertools.cycle((signal.SIGKILL, signal.SIGTERM))
        names = itertools.cycle([c.name for c in self.cluster.children if c.role == "matcher"])
        k = 1
        while True:
            if k * self.plan.restart_every >= self.plan.seconds:
                return
            await asyncio.sleep(max(0.0, self.t0 + k * self.plan.restart_every - time.monotonic()))
            if self.stopping.is_set():
                return
            name, sig = next(names), next(sigs)
            at = time.monotonic() - self.t0
            self.generation[name] = self.generation.get(name, 0) + 1
            ready_s = await asyncio.to_thread(self._restart_blocking, name, sig)
            self.stats.restarts.append({"matcher": name, "signal": sig.name, "at_s": round(at, 1),
                                        "alive_again_s": round(ready_s, 2)})
            k += 1

    # -- the run -------------------------------------------------------------------------------
    async def run(self) -> None:
        self.t0 = time.monotonic()
        sampler = asyncio.create_task(self.sample())
        for _ in range(self.plan.queues):
            await self.new_queue()
        workers = [asyncio.create_task(c) for c in (self.publish(), self.churn(), self.restarts())]
        try:
            timer = asyncio.create_task(asyncio.sleep(self.plan.seconds))
            running = workers
            while not timer.done():
                done, _ = await asyncio.wait([*running, timer], return_when=asyncio.FIRST_COMPLETED)
                for d in done - {timer}:
                    d.result()  # a worker that failed ends the run with its error
                running = [w for w in running if not w.done()]
            self.stopping.set()
            await asyncio.gather(*workers)
            deadline = time.monotonic() + self.plan.drain_s
            while self.ledger.lost() and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            await sampler
        finally:
            self.stopping.set()
            for t in [*workers, *self.pollers.values(), sampler]:
                t.cancel()
            await self.client.close()
