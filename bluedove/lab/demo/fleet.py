"""The demo's REST clients (the SDK's transport): drivers' queues and subscriptions, pollers that ack, paced
sensors, and the ledger against the oracle."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from bluedove.client import BlueDoveError
from bluedove.client.http import AsyncHttpTransport
from bluedove.lab.load import publish_due
from bluedove.lab.readers import Inbox, reading, subscribe_workload
from bluedove.lab.workloads import Workload, brute_force
from bluedove.lab.workloads.traffic import nearest_city
from bluedove.lab.workloads.typed import Served

SETUP_CONCURRENCY = 16
PUBLISH_INFLIGHT = 4  # sensor batches awaiting their 202 at most
PUBLISH_ATTEMPTS = 3


class DemoError(RuntimeError):
    """The demo cannot go on (the cluster refused a request it needs); the message says why."""


Driver = Inbox  # a driver reads its own queue, as a phone would


@dataclass
class Comparison:
    """The ledger against the oracle: deliveries expected and made, and each one missing or wrong."""

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

    def __init__(self, workload: Workload | Served, points: np.ndarray, ids: list[str]) -> None:
        self.w = workload
        self.points = points
        self.ids = ids
        self.sub_ids: list[str] = [""] * workload.n_subs
        self.expected: dict[tuple[int, str], frozenset[str]] = {}
        self.seen: dict[tuple[int, str], int] = {}
        self.seen_subs: dict[tuple[int, str], frozenset[str]] = {}
        self.latencies: list[float] = []  # published_at -> the poller has it (s)
        # ... split at the delivery's store time (its receipt, a Redis stream entry id: ms):
        self.to_stored: list[float] = []  # published_at -> stored: the service (forward, match, write)
        self.from_stored: list[float] = []  # stored -> the poller has it: the long-poll's wake-up and answer
        self.client_wait: list[float] = []  # ... of which stored while the poller had no poll open
        self.last_answer: dict[int, float] = {}  # driver -> when its previous poll answered
        self.last_sent: dict[int, float] = {}  # driver -> when its latest poll was sent
        self.published = 0
        self.failed: set[str] = set()
        self.poll_errors: dict[str, int] = {}  # exception name -> polls or acks it spoiled

    def matches(self, idx: range) -> list[list[int]]:
        """The oracle: for each of messages idx, the subscriptions it matches (brute force over the boxes)."""
        return [subs.tolist() for subs in brute_force(self.w.lows, self.w.highs, self.points[idx.start:idx.stop])]

    def phase(self) -> str:
        """Where the publishing is, for the progress line: the sensors' time of day."""
        day = self.points[min(self.published, len(self.points)) - 1, 3] if self.published else 0.0
        return "day " + time.strftime("%H:%M", time.gmtime(day))

    def confirm(self, idx: range) -> None:
        """Messages idx were accepted: add what the oracle says each must reach."""
        self.published += len(idx)
        for i, subs in zip(idx, self.matches(idx)):
            for j in subs:
                key = (int(self.w.queue_of[j]), self.ids[i])
                self.expected[key] = self.expected.get(key, frozenset()) | {self.sub_ids[j]}

    def receive(self, driver: int, messages: list[dict], now: float) -> None:
        # A delivery stored after the previous poll answered and before this one was sent
        # waited for the poller (its loop, an ack), not for the service.
        previous, sent = self.last_answer.get(driver), self.last_sent.get(driver)
        self.last_answer[driver] = now
        for m in messages:
            key = (driver, m["id"])
            self.seen[key] = self.seen.get(key, 0) + 1
            self.seen_subs[key] = frozenset(m.get("subscriptions", ()))
            try:
                published = datetime.fromisoformat(m["published_at"]).timestamp()
                stored = (int(m["receipt"].split("-")[0]) + 0.5) / 1000  # to the ms
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            self.latencies.append(now - published)
            self.to_stored.append(stored - published)
            self.from_stored.append(now - stored)
            waited = sent - max(stored, previous) if sent is not None and previous is not None else 0.0
            self.client_wait.append(max(0.0, waited))

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


def running_pollers(url: str, drivers: list[Driver], ledger: Ledger):
    """Readers for every driver while the block runs (bluedove.lab.readers.reading), recording into the
    ledger; each keeps a long-poll open (a new one as soon as the last answered), so that the
    latency shown is the service's, not a pause of the poller's own."""

    def received(i: int, msgs: list[dict]) -> None:
        ledger.receive(i, msgs, time.time())

    def failed(exc: Exception) -> None:
        ledger.poll_errors[type(exc).__name__] = ledger.poll_errors.get(type(exc).__name__, 0) + 1

    def polling(i: int) -> None:
        ledger.last_sent[i] = time.time()

    return reading(url, drivers, received, failed, min_gap_s=0.0, polling=polling)


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
    """Publish `bodies` in order at `rate`/s for `duration_s` (bluedove.lab.load.publish_due); returns
    when every batch answered."""
    await publish_due(lambda idx: _publish_batch(transport, bodies, idx, ledger), len(bodies), rate, duration_s,
                      PUBLISH_INFLIGHT)


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
