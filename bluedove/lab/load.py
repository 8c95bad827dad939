"""The lab's load: a Pacer, paced publishers (open loop, closed loop, ticked) and pollers that
poll and ack queues, over the SDK's REST transport (bluedove.client); readers are in bluedove/lab/readers.py.

Time is an argument: each takes a `Clock` (now() and an asyncio sleep), the real one by
default, so that tests run them on a fake clock against an httpx.MockTransport.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import httpx

from bluedove.client.errors import BlueDoveError, Unavailable
from bluedove.client.http import AsyncHttpTransport

POLL_MAX = 100  # what a poller asks for per poll (the API's largest max)
# Connections per httpx pool: httpcore looks at every connection of its pool for every request,
# which costs a core with a hundred; pollers share small pools instead.
CONNECTIONS_PER_POOL = 4


class Clock(Protocol):
    """The time the lab's load runs on: now() and an asyncio sleep (real, or a test's fake)."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    """time.monotonic and asyncio.sleep."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


REAL = RealClock()


class Pacer:
    """A paced sender's schedule: item j is due at start + j / rate (per item sent, `wait_s`
    says how long to sleep first). Time lost to a late wake-up or a full window is made up, up
    to MAKEUP_S of it; sleeping for what was left of each item's share alone fell ~20 % short
    of the rate on a busy machine. A new rate, or none (<= 0: full speed or paused), starts
    the schedule again."""

    MAKEUP_S = 1.0

    def __init__(self) -> None:
        self._due: float | None = None
        self._rate = 0.0

    def wait_s(self, rate: float, per_item: float, now: float) -> float:
        """Seconds to sleep after sending one item of `per_item` units at `rate` units/s."""
        if rate <= 0:
            self._due = None
            return 0.0
        if self._due is None or rate != self._rate:
            self._due, self._rate = now, rate
        self._due = max(self._due + per_item / rate, now - self.MAKEUP_S)
        return max(0.0, self._due - now)


@dataclass
class PacedPublisher:
    """Open loop: `send()` (one batch of `per_send` messages; True when accepted) at `rate`
    messages/s, at most `inflight` sends awaiting their answer; a send that finds them all
    busy is skipped (the cluster is not keeping up), which the caller sees as a shortfall.
    `rate` may change while it runs (<= 0: paused). Counts are of messages."""

    send: Callable[[], Awaitable[bool]]
    per_send: int
    inflight: int
    clock: Clock = REAL
    rate: float = 0.0
    sent: int = 0
    accepted: int = 0
    refused: int = 0
    skipped: int = 0
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (answered at, seconds)

    async def run(self, stop: Callable[[], bool]) -> None:
        """Publish until `stop()`; returns once every send under way has its answer."""
        pacer = Pacer()
        tasks: set[asyncio.Task] = set()
        while not stop():
            if self.rate <= 0:
                pacer.wait_s(0.0, 0, self.clock.now())  # a pause ends the schedule
                await self.clock.sleep(0.1)
                continue
            if len(tasks) >= self.inflight:
                self.skipped += self.per_send
            else:
                task = asyncio.get_running_loop().create_task(self._one())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await self.clock.sleep(pacer.wait_s(self.rate, self.per_send, self.clock.now()))
        await asyncio.gather(*tasks)

    async def _one(self) -> None:
        self.sent += self.per_send
        t0 = self.clock.now()
        try:
            ok = await self.send()
        except BlueDoveError:  # an error answer, or none
            ok = False
        if ok:
            self.accepted += self.per_send
            self.latencies.append((self.clock.now(), self.clock.now() - t0))
        else:
            self.refused += self.per_send


async def closed_loop(send: Callable[[], Awaitable[list[str]]], calls: int, until: float,
                      clock: Clock = REAL) -> tuple[int, set[str], int]:
    """`calls` concurrent callers of `send` (one publish call; the ids it got), each calling
    again as soon as answered, until `until`: (messages of the calls answered by then, distinct
    ids of every call, ids every call returned)."""
    ids: set[str] = set()
    counted = returned = 0

    async def caller() -> None:
        nonlocal counted, returned
        while clock.now() < until:
            got = await send()
            ids.update(got)
            returned += len(got)
            if clock.now() <= until:  # only calls answered inside the window count
                counted += len(got)

    await asyncio.gather(*(caller() for _ in range(calls)))
    return counted, ids, returned


def publish_encoded(transport: AsyncHttpTransport, batches: list[bytes]) -> Callable[[], Awaitable[bool]]:
    """A PacedPublisher's `send`: the prepared batches in turn, round and round."""
    turn = itertools.count()

    async def send() -> bool:
        await transport.publish_encoded(batches[next(turn) % len(batches)])
        return True

    return send


def pool(url: str, connections: int, transport: httpx.AsyncBaseTransport | None = None,
         timeout_s: float = 30.0) -> AsyncHttpTransport:
    """The SDK's REST transport with a pool of `connections`; idle ones are dropped before the
    server drops them (uvicorn: after 5 s), or a request may race the close."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=2.0)
    return AsyncHttpTransport(url, timeout_s, limits=limits, transport=transport)


class Switches(Protocol):
    """What tells pollers when to poll, and what they report (the delivery bench's shared
    multiprocessing values; a plain object in tests)."""

    def active(self) -> bool: ...  # poll while True; paused while False

    def stopping(self) -> bool: ...  # finish (after draining the queues, when draining)

    def draining(self) -> bool: ...

    def polled(self) -> None: ...  # one poll made

    def acked(self, n: int) -> None: ...  # n deliveries acked


@dataclass
class Pollers:
    """Poll (max=POLL_MAX, no wait) and ack `queues` [(queue, token)] over `len(transports)`
    connections while `switches.active()`, each connection polling each of its queues once per
    `interval` seconds (0: as fast as it can); on stopping while draining, empty them first,
    unpaced. Keeps the deliveries of the `sample` queues as (queue, id, subscriptions)."""

    queues: list[tuple[str, str]]
    transports: list[PollTransport]  # one per connection; connections may share a pool
    switches: Switches
    interval: float = 0.0
    sample: frozenset[str] | set[str] = frozenset()
    clock: Clock = REAL
    seen: list[tuple[str, str, list[str]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    acked: int = 0

    async def run(self) -> dict:
        # One watcher looks at the switches; paused connections wait on it. (Each of 128
        # connections looking every 20 ms cost a poller 5 % of a core while paused, taken from
        # the phases that measure writing.)
        self._running = asyncio.Event()
        n = len(self.transports)
        shares = [self.queues[i::n] for i in range(n)]
        watcher = asyncio.get_running_loop().create_task(self._watch())
        try:
            await asyncio.gather(*(self._worker(t, s, i / n) for i, (t, s) in enumerate(zip(self.transports, shares))
                                   if s))
        finally:
            watcher.cancel()
        return {"seen": self.seen, "acked": self.acked, "errors": self.errors[:5]}

    async def _watch(self) -> None:
        while True:
            if self.switches.active() or self.switches.stopping():
                self._running.set()
            else:
                self._running.clear()
            await self.clock.sleep(0.02)

    async def _worker(self, t: PollTransport, share: list[tuple[str, str]], phase: float) -> None:
        """Pass after pass over `share`, paced like a fleet of phones that each poll their queue
        every `interval` seconds: a pass done early waits until `interval` after its start; one
        that falls behind (the service is the bottleneck) is followed at once. Within a pass the
        polls go back to back; each connection's passes are offset by `phase` of an interval,
        so that the connections, not in step, make an even load together.

        The offset is kept through falling behind: the pass that follows a late one counts as
        begun at the last start its own schedule had, so the one after it is back on that
        schedule. (Restarting the schedule at the late pass's end put every connection in
        step once a backlog had held them all up: they then polled in bursts, and a
        measurement window could fall between two bursts and read almost no acks.)"""
        empty_passes, start = 0, None
        while not (self.switches.stopping() and (not self.switches.draining() or empty_passes >= 2)):
            if not self._running.is_set():
                await self._running.wait()
                start = None  # paused: the next pass begins afresh
                continue
            # The first pass begins at once (the drain phase measures from then) but counts as
            # begun `phase` of an interval ago: the offset shows from the second pass on.
            start = self._next_start(start, phase)
            got = await self._pass(t, share)
            if got is None:
                return
            empty_passes = 0 if got else empty_passes + 1
            if not got:
                await self.clock.sleep(0.05)
            if self.interval:
                await self._until(start + self.interval)

    def _next_start(self, start: float | None, phase: float) -> float:
        """When the coming pass counts as begun: `phase` of an interval ago for the first; else
        the latest start of the connection's schedule (one interval after the last, or more
        when the last pass ran late)."""
        now = self.clock.now()
        if start is None:
            return now - phase * self.interval
        if not self.interval:
            return now
        return start + self.interval * max(1, int((now - start) / self.interval))

    async def _pass(self, t: PollTransport, share: list[tuple[str, str]]) -> int | None:
        """Poll and ack each queue of `share` once: deliveries acked, or None after a failed request."""
        got = 0
        for q, token in share:
            what = "poll"
            try:
                msgs = await t.poll(q, token, POLL_MAX, 0)
                self.switches.polled()
                if not msgs:
                    continue
                what = "ack"
                await t.ack(q, token, [m["receipt"] for m in msgs])
            except BlueDoveError as exc:
                failed = "connection failed" if isinstance(exc, Unavailable) else f"{what} {exc.status}"
                self.errors.append(f"{failed}: {exc.code}: {exc.message[:200]}")
                return None
            got += len(msgs)
            if q in self.sample:
                self.seen.extend((q, m["id"], m["subscriptions"]) for m in msgs)
            self.acked += len(msgs)
            self.switches.acked(len(msgs))
        return got

    async def _until(self, at: float) -> None:
        """Sleep until `at`, or less once stopping (the final drain starts within half a second)."""
        while (left := at - self.clock.now()) > 0 and not self.switches.stopping():
            await self.clock.sleep(min(left, 0.5))


class PollTransport(Protocol):
    """What a poller connection needs: the SDK's REST poll and ack (AsyncHttpTransport, or
    bluedove.lab.aio_transport.AioHttpTransport for less CPU per request)."""

    async def poll(self, queue: str, token: str, max_n: int, wait: float) -> list[dict]: ...

    async def ack(self, queue: str, token: str, receipts: list[str]) -> None: ...

    async def close(self) -> None: ...


async def poll_queues(open_pool: Callable[[int], PollTransport], queues: list[tuple[str, str]], switches: Switches,
                      connections: int, interval: float = 0.0, sample: frozenset[str] | set[str] = frozenset(),
                      clock: Clock = REAL) -> dict:
    """`Pollers` over `connections` connections in pools of CONNECTIONS_PER_POOL, each pool made
    by `open_pool(connections)`; their result."""
    pools = [open_pool(CONNECTIONS_PER_POOL) for _ in range(-(-connections // CONNECTIONS_PER_POOL))]
    try:
        conns = [pools[i // CONNECTIONS_PER_POOL] for i in range(connections)]
        return await Pollers(queues, conns, switches, interval, sample, clock).run()
    finally:
        for p in pools:
            await p.close()


# -- the demo's sensors: items in order, what is due each tick in one batch ----------------------
TICK_S = 0.1
BATCH_MAX = 1000


async def open_loop(rate: float, send: Callable[[int], Awaitable[None]], stop: Stopping) -> None:
    """`send(i)` for i = 0, 1, … every 1/`rate` s, never waiting for an answer, until `stop` is
    set; returns when every call answered."""
    tasks: set[asyncio.Task[None]] = set()
    start, i = time.monotonic(), 0
    while not stop.is_set():
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        t = asyncio.create_task(send(i))
        tasks.add(t)
        t.add_done_callback(tasks.discard)
        i += 1
    await asyncio.gather(*tasks)


class Stopping(Protocol):
    """What tells a load generator to stop (a multiprocessing or threading Event)."""

    def is_set(self) -> bool: ...


async def publish_due(send: Callable[[range], Awaitable[None]], total: int, rate: float, duration_s: float,
                      inflight: int = 4, clock: Clock = REAL) -> None:
    """Items 0..total-1 in order at `rate`/s for `duration_s`: every TICK_S, `send(range)` of
    what is due by the end of the tick (at most BATCH_MAX); returns when every batch answered.
    A slow cluster holds batches back (at most `inflight` await an answer); what is due then
    goes in the next, larger batch, and what was due by `duration_s` but held back past it goes
    in one last batch, late: the `rate * duration_s` items are all sent (a demo's count holds
    on a loaded machine), nothing beyond them."""
    sem = asyncio.Semaphore(inflight)
    tasks: set[asyncio.Task] = set()
    sent = 0
    t0 = clock.now()

    async def one(idx: range) -> None:
        try:
            await send(idx)
        finally:
            sem.release()

    try:
        while sent < total and (elapsed := clock.now() - t0) < duration_s:
            if int(rate * (elapsed + TICK_S)) > sent:
                await sem.acquire()
                if clock.now() - t0 >= duration_s:
                    sem.release()
                    break
                # What is due by the end of this tick, more if the wait for a slot was long.
                due = min(total, int(rate * (clock.now() - t0 + TICK_S)), sent + BATCH_MAX)
                task = asyncio.get_running_loop().create_task(one(range(sent, due)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                sent = due
            await clock.sleep(max(0.0, t0 + (int(elapsed / TICK_S) + 1) * TICK_S - clock.now()))
        due = min(total, int(rate * duration_s))
        if sent < due:  # held back past the end by a slow cluster: what was due goes now, late
            await sem.acquire()
            task = asyncio.get_running_loop().create_task(one(range(sent, due)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)
    finally:  # interrupted: no batch outlives its caller
        for t in list(tasks):
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
