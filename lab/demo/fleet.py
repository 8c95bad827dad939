"""The demo's REST clients (the SDK's transport): drivers' queues and subscriptions, pollers that ack, paced
sensors, and the ledger against the oracle."""

from __future__ import annotations

import asyncio
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import AsyncIterator

import numpy as np

from bluedove.client import BlueDoveError
from bluedove.client.http import AsyncHttpTransport
from bluedove.workloads import Workload, brute_force
from bluedove.workloads.traffic import nearest_city
from lab.load import pool, subscribe_workload

# A poller serving one queue long-polls this long; one serving several polls each with wait=0.
LONG_POLL_S = 10.0
# A queue is polled again at most this often after a poll that brought something, so that
# deliveries arriving close together share one request (the client shares the CPU).
MIN_POLL_GAP_S = 0.5
# Receipts are acked in batches at most this often per queue (visibility timeout is 30 s).
ACK_EVERY_S = 5.0
# A poller serving several queues (more drivers than MAX_POLLERS) goes round them at most
# this often while they are empty.
IDLE_ROUND_S = 2.0
# At most this many concurrent poller tasks (each a long-poll connection).
MAX_POLLERS = 400
POLLERS_PER_CLIENT = 4
SETUP_CONCURRENCY = 16
# Sensors publish every PUBLISH_TICK_S whatever is due by the rate, in batches of at most
# PUBLISH_BATCH_MAX, with at most PUBLISH_INFLIGHT batches awaiting their 202.
PUBLISH_TICK_S = 0.1
PUBLISH_BATCH_MAX = 1000
PUBLISH_INFLIGHT = 4
PUBLISH_ATTEMPTS = 3


def _skip_sniffio_lookups() -> None:
    """httpcore runs `import sniffio` on every request; when sniffio is not installed, each
    failed import searches sys.path again (a third of the client's CPU). A None entry makes
    the import fail at once, and httpcore then assumes asyncio, which is what runs here."""
    try:
        import sniffio  # noqa: F401
    except ImportError:
        sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]


_skip_sniffio_lookups()


class DemoError(RuntimeError):
    """The demo cannot go on (the cluster refused a request it needs); the message says why."""


@dataclass
class Driver:
    queue: str
    token: str
    pending_acks: list[str] = field(default_factory=list)
    last_ack: float = 0.0


@dataclass
class Comparison:
    expected: int
    delivered: int
    missing: list[tuple[int, str]]
    duplicates: list[tuple[int, str]]  # one entry per extra copy
    unexpected: list[tuple[int, str]]
    wrong_subscriptions: list[tuple[int, str]]
    failed_publishes: int
    still_queued: int = 0  # of the missing, how many a last look found unread in their queues

    @property
    def exact(self) -> bool:
        return not (self.missing or self.duplicates or self.unexpected or self.wrong_subscriptions
                    or self.failed_publishes)


class Ledger:
    """What was published and confirmed (202), what the oracle expects, and what arrived.

    Keys are (driver index, message id); the expected value is the set of the driver's
    subscription ids the message matches.
    """

    def __init__(self, workload: Workload, points: np.ndarray, ids: list[str]) -> None:
        self.w = workload
        self.points = points
        self.ids = ids
        self.sub_ids: list[str] = [""] * workload.n_subs
        self.expected: dict[tuple[int, str], frozenset[str]] = {}
        self.seen: dict[tuple[int, str], int] = {}
        self.seen_subs: dict[tuple[int, str], frozenset[str]] = {}
        self.latencies: list[float] = []
        self.published = 0
        self.failed: set[str] = set()
        self.poll_errors: dict[str, int] = {}  # exception name -> polls or acks it spoiled

    def confirm(self, idx: range) -> None:
        """Messages idx were accepted: add what the oracle says each must reach."""
        self.published += len(idx)
        matches = brute_force(self.w.lows, self.w.highs, self.points[idx.start:idx.stop])
        for i, subs in zip(idx, matches):
            for j in subs.tolist():
                key = (int(self.w.queue_of[j]), self.ids[i])
                self.expected[key] = self.expected.get(key, frozenset()) | {self.sub_ids[j]}

    def receive(self, driver: int, messages: list[dict], now: float) -> None:
        for m in messages:
            key = (driver, m["id"])
            self.seen[key] = self.seen.get(key, 0) + 1
            self.seen_subs[key] = frozenset(m.get("subscriptions", ()))
            try:
                self.latencies.append(now - datetime.fromisoformat(m["published_at"]).timestamp())
            except (KeyError, TypeError, ValueError):
                pass

    @property
    def delivered(self) -> int:
        return len(self.seen)

    def complete(self) -> bool:
        return all(k in self.seen for k in self.expected)

    def compare(self) -> Comparison:
        missing = [k for k in self.expected if k not in self.seen]
        dups = [k for k, n in self.seen.items() for _ in range(n - 1)]
        unexpected = [k for k in self.seen if k not in self.expected and k[1] not in self.failed]
        wrong = [k for k, subs in self.expected.items() if k in self.seen_subs and self.seen_subs[k] != subs]
        return Comparison(len(self.expected), len(self.seen), missing, dups, unexpected, wrong, len(self.failed))


async def create_drivers(transport: AsyncHttpTransport, ledger: Ledger) -> list[Driver]:
    """One queue per driver (made by its first subscription), then the rest of its subscriptions."""
    try:
        sub_ids, queues = await subscribe_workload(transport, ledger.w, SETUP_CONCURRENCY)
    except BlueDoveError as exc:
        raise DemoError(f"POST /v1/subscriptions answered {exc.status}: {exc.code}: {exc.message}") from exc
    ledger.sub_ids[:] = sub_ids
    return [Driver(*queues[q]) for q in sorted(queues)]


async def _ack(transport: AsyncHttpTransport, d: Driver, now: float) -> None:
    receipts, d.pending_acks, d.last_ack = d.pending_acks, [], now
    try:
        await transport.ack(d.queue, d.token, receipts)
    except BaseException:
        d.pending_acks = receipts + d.pending_acks  # try again next round
        raise


async def poller(transport: AsyncHttpTransport, drivers: list[Driver], mine: list[int], ledger: Ledger) -> None:
    """Serve the drivers `mine`: poll (a long-poll when alone), record, ack in batches."""
    alone = len(mine) == 1
    while True:
        started = time.monotonic()
        got = 0
        for i in mine:
            d = drivers[i]
            try:
                if d.pending_acks and (started - d.last_ack >= ACK_EVERY_S or len(d.pending_acks) >= 500):
                    await _ack(transport, d, started)
                # Alone: long-poll, but wake in time to ack what is pending.
                wait = (ACK_EVERY_S if d.pending_acks else LONG_POLL_S) if alone else 0.0
                msgs = await transport.poll(d.queue, d.token, 100, wait)
                ledger.receive(i, msgs, time.time())
                got += len(msgs)
                d.pending_acks += [m["receipt"] for m in msgs]
            except Exception as exc:  # noqa: BLE001 - a poller must outlive any one bad answer
                ledger.poll_errors[type(exc).__name__] = ledger.poll_errors.get(type(exc).__name__, 0) + 1
                await asyncio.sleep(0.5)  # the cluster is busy or a process restarts: retry
        if got:
            await asyncio.sleep(max(0.0, started + MIN_POLL_GAP_S - time.monotonic()))
        elif not alone:
            await asyncio.sleep(max(0.0, started + IDLE_ROUND_S - time.monotonic()))


@asynccontextmanager
async def running_pollers(url: str, drivers: list[Driver], ledger: Ledger) -> AsyncIterator[list[asyncio.Task]]:
    """Poller tasks for every driver while the block runs; cancelled and closed after it.

    The pollers share small connection pools, POLLERS_PER_CLIENT each: httpcore's pool
    checks every one of its connections for every request, which costs a core with hundreds.
    """
    n = min(len(drivers), MAX_POLLERS)
    groups = [list(range(g, len(drivers), n)) for g in range(n)]
    clients: list[AsyncHttpTransport] = []
    tasks: list[asyncio.Task] = []
    try:
        for k, g in enumerate(groups):
            if k % POLLERS_PER_CLIENT == 0:
                clients.append(pool(url, POLLERS_PER_CLIENT + 1, timeout_s=LONG_POLL_S + 20))
            tasks.append(asyncio.create_task(poller(clients[-1], drivers, g, ledger), name=f"poller{k}"))
        yield tasks
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in clients:
            await c.close()


def message_bodies(points: np.ndarray, ids: list[str], names: tuple[str, ...]) -> list[dict]:
    """Sensor readings as API messages: every dimension, the nearest city in the payload."""
    cities = nearest_city(points)
    return [{"id": mid, "attributes": dict(zip(names, p)), "payload": {"sensor": f"s{k % 5000}", "near": c}}
            for k, (mid, p, c) in enumerate(zip(ids, points.tolist(), cities))]


async def _publish_batch(transport: AsyncHttpTransport, bodies: list[dict], idx: range, ledger: Ledger) -> None:
    """POST one batch; retries reuse the ids, so the cluster's dedup delivers nothing twice."""
    last = ""
    for attempt in range(PUBLISH_ATTEMPTS):
        try:
            await transport.publish_batch(bodies[idx.start:idx.stop])
            ledger.confirm(idx)
            return
        except BlueDoveError as exc:
            last = f"{exc.status} {exc.code}: {exc.message[:200]}"
            if exc.status < 500:
                break
        await asyncio.sleep(0.5 * (attempt + 1))
    ledger.failed.update(ledger.ids[idx.start:idx.stop])
    print(f"\npublish of {len(idx)} messages failed: {last}", flush=True)


async def publish(transport: AsyncHttpTransport, ledger: Ledger, bodies: list[dict], rate: float,
                  duration_s: float) -> None:
    """Publish `bodies` in order at `rate`/s for `duration_s`; returns when every batch answered.

    A slow cluster holds batches back (at most PUBLISH_INFLIGHT await their 202); what is
    due then goes in the next, larger batch, and nothing is sent after `duration_s`.
    """
    sem = asyncio.Semaphore(PUBLISH_INFLIGHT)
    tasks: set[asyncio.Task] = set()
    sent = 0
    t0 = time.monotonic()

    async def send(idx: range) -> None:
        try:
            await _publish_batch(transport, bodies, idx, ledger)
        finally:
            sem.release()

    try:
        while sent < len(bodies):
            elapsed = time.monotonic() - t0
            if elapsed >= duration_s:
                break
            if int(rate * (elapsed + PUBLISH_TICK_S)) > sent:
                await sem.acquire()
                if time.monotonic() - t0 >= duration_s:
                    sem.release()
                    break
                # What is due by the end of this tick, more if the wait for a slot was long.
                due = min(len(bodies), int(rate * (time.monotonic() - t0 + PUBLISH_TICK_S)), sent + PUBLISH_BATCH_MAX)
                t = asyncio.create_task(send(range(sent, due)))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
                sent = due
            next_tick = t0 + (int(elapsed / PUBLISH_TICK_S) + 1) * PUBLISH_TICK_S
            await asyncio.sleep(max(0.0, next_tick - time.monotonic()))
        await asyncio.gather(*tasks)
    finally:  # interrupted: no batch outlives its client
        for t in list(tasks):
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def still_queued(transport: AsyncHttpTransport, drivers: list[Driver], missing: list[tuple[int, str]]) -> int:
    """How many of the `missing` (driver, message id) pairs are unread in their queues."""
    wanted: dict[int, set[str]] = {}
    for d, mid in missing:
        wanted.setdefault(d, set()).add(mid)
    found = 0
    for d, mids in list(wanted.items())[:100]:
        try:
            msgs = await transport.poll(drivers[d].queue, drivers[d].token, 1000, 0)
            found += sum(m["id"] in mids for m in msgs)
        except (BlueDoveError, ValueError, KeyError):
            pass
    return found


async def delete_queues(transport: AsyncHttpTransport, drivers: list[Driver]) -> None:
    """Remove the demo's queues and subscriptions (used when the store outlives the demo)."""
    sem = asyncio.Semaphore(SETUP_CONCURRENCY)

    async def one(d: Driver) -> None:
        async with sem:
            try:
                await transport.delete_queue(d.queue, d.token)
            except BlueDoveError:
                pass

    await asyncio.gather(*(one(d) for d in drivers))
