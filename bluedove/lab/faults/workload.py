"""The steady workload a fault runs under, built on the SDK, and its check against brute force.

Random subscriptions over a few queues; a publisher sending messages at a steady rate, each
with its own id, retried with that id until accepted (a refusal: 503, or no answer at all, is
timed); afterwards every queue is drained and each (queue, message) pair compared with the
oracle. A pair the oracle names and nobody received is *lost*; a pair received twice (after
acks) is a *duplicate*; a pair received with the wrong subscriptions, or that the oracle
does not name, is *wrong*.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import numpy as np

from bluedove.client import AsyncClient
from bluedove.client.errors import BlueDoveError, Unavailable
from bluedove.client.objects import Queue
from bluedove.lab.workloads import brute_force

DIMS = ("x0", "x1", "x2", "x3")
SPACE_HIGH = 1000.0


def random_predicates(rng: random.Random) -> dict[str, list[float]]:
    """A rectangle with integral bounds (messages may sit exactly on them); a dimension left
    out a third of the time (a wildcard)."""
    preds = {}
    for d in DIMS:
        if rng.random() < 0.35:
            continue
        lo = rng.randrange(0, 900)
        preds[d] = [lo, lo + rng.randrange(1, 700)]
    return preds


@dataclass
class Subscribed:
    """The workload's queues, and each subscription's queue and predicates."""

    queues: list[Queue]
    # subscription id -> (queue id, predicates)
    subs: dict[str, tuple[str, dict]]


async def subscribe(client: AsyncClient, rng: random.Random, n_queues: int, n_subs: int) -> Subscribed:
    queues = [await client.create_queue() for _ in range(n_queues)]
    subs: dict[str, tuple[str, dict]] = {}
    per_queue: dict[str, list[dict]] = {q.id: [] for q in queues}
    for _ in range(n_subs):
        per_queue[rng.choice(queues).id].append(random_predicates(rng))
    for q in queues:
        if per_queue[q.id]:
            for s in await client.subscribe_many(per_queue[q.id], queue=q):
                subs[s.id] = (q.id, s.predicates)
    return Subscribed(queues, subs)


@dataclass
class Published:
    """The publisher's record: messages sent and accepted, with their points, refusals and give-ups."""

    # message id -> point, for every message accepted (202)
    points: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # message id -> point, for every message sent (accepted or not)
    sent: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # (monotonic time, message id) of every refused attempt
    refusals: list[tuple[float, str]] = field(default_factory=list)
    attempts: int = 0
    # (sent, answered: monotonic times of the accepted attempt, message id) of every acceptance
    accepted_at: list[tuple[float, float, str]] = field(default_factory=list)
    given_up: list[str] = field(default_factory=list)


async def publish_steadily(client: AsyncClient, rng: random.Random, prefix: str, rate: float, out: Published,
                           stop: asyncio.Event, give_up_s: float = 60.0, retry_s: float = 0.1) -> None:
    """Publish at `rate`/s until `stop` is set, each message with its own id, retried with that
    id until accepted (or `give_up_s` after its first attempt: then it is listed as given up,
    never accepted). The client must not retry by itself (retries=0): every refusal is seen here."""

    async def one(i: int) -> None:
        point = tuple(rng.uniform(0, SPACE_HIGH) for _ in DIMS)
        mid = f"{prefix}-{i}"
        out.sent[mid] = point
        deadline = time.monotonic() + give_up_s
        while True:
            out.attempts += 1
            sent = time.monotonic()
            try:
                await client.publish(dict(zip(DIMS, point)), id=mid)
                out.points[mid] = point
                out.accepted_at.append((sent, time.monotonic(), mid))
                return
            except Unavailable:
                out.refusals.append((time.monotonic(), mid))
            if time.monotonic() >= deadline:
                out.given_up.append(mid)
                return
            await asyncio.sleep(retry_s)

    tasks = []
    start = time.monotonic()
    i = 0
    while not stop.is_set():
        tasks.append(asyncio.create_task(one(i)))
        i += 1
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
    await asyncio.gather(*tasks)


async def drain(client: AsyncClient, queues: list[Queue], quiet_s: float = 2.0,
                limit_s: float = 120.0) -> list[tuple[str, str, frozenset[str]]]:
    """Poll and ack every queue until none has had anything for `quiet_s`: a list of
    (queue id, message id, subscription ids) as received."""
    got: list[tuple[str, str, frozenset[str]]] = []
    deadline = time.monotonic() + limit_s
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < quiet_s:
        if time.monotonic() > deadline:
            raise TimeoutError(f"queues still delivering after {limit_s:.0f} s")
        counts = await asyncio.gather(*(_take(client, q, got) for q in queues))
        if any(counts):
            quiet_since = time.monotonic()
        else:
            await asyncio.sleep(0.2)
    return got


async def _take(client: AsyncClient, q: Queue, got: list) -> int:
    try:
        batch = await client.poll(q, max=100, wait=0)
    except Unavailable:
        return 1  # not quiet: the store is away, try again
    for d in batch:
        got.append((q.id, d.id, frozenset(d.subscriptions)))
    if batch:
        try:
            await client.ack(q, batch)
        except BlueDoveError:
            pass  # unacked, they come back after the visibility timeout: seen as duplicates then
    return len(batch)


def expected_pairs(subs: dict[str, tuple[str, dict]], points: dict[str, tuple[float, ...]]
                   ) -> dict[tuple[str, str], frozenset[str]]:
    """{(queue, message): the subscriptions of that queue it matches}, by brute force."""
    sub_ids = list(subs)
    lows = np.array([[subs[s][1].get(d, [0, SPACE_HIGH])[0] for d in DIMS] for s in sub_ids], dtype=float)
    highs = np.array([[subs[s][1].get(d, [0, SPACE_HIGH])[1] for d in DIMS] for s in sub_ids], dtype=float)
    mids = list(points)
    arr = np.array([points[m] for m in mids], dtype=float).reshape(len(mids), len(DIMS))
    out: dict[tuple[str, str], set[str]] = {}
    for mid, hits in zip(mids, brute_force(lows, highs, arr)):
        for j in hits:
            sid = sub_ids[j]
            out.setdefault((subs[sid][0], mid), set()).add(sid)
    return {k: frozenset(v) for k, v in out.items()}


@dataclass
class Verdict:
    """The drained queues against the oracle: pairs expected and received, lost, duplicated, wrong."""

    expected: int
    received: int
    lost: int
    duplicates: int
    wrong: int
    # deliveries of a message whose publish was never accepted (allowed: at-least-once)
    unaccepted: int = 0


def judge(expected: dict[tuple[str, str], frozenset[str]], got: list[tuple[str, str, frozenset[str]]],
          accepted: set[str]) -> Verdict:
    """`expected` over the accepted messages; `got` as drained."""
    seen: dict[tuple[str, str], int] = {}
    wrong = unaccepted = 0
    for q, mid, sids in got:
        if mid not in accepted:
            unaccepted += 1
            continue
        key = (q, mid)
        seen[key] = seen.get(key, 0) + 1
        if expected.get(key) != sids:
            wrong += 1
    lost = sum(1 for k in expected if k not in seen)
    dups = sum(n - 1 for n in seen.values() if n > 1)
    return Verdict(len(expected), len(got), lost, dups, wrong, unaccepted)
