"""What the cluster tests share: random subscriptions and messages, a steady publisher that
retries refusals, the matchers' gossip views, and a dry-run match on every candidate."""

from __future__ import annotations

import asyncio
import json
import random
import time

import grpc
import httpx

from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import default_space
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc
from tests.integration.helpers import drain, new_queue, oracle

DIMS = ("x0", "x1", "x2", "x3")
SPACE = default_space()
N_SUBS = 2000
N_MESSAGES = 2000


def random_predicates(rng: random.Random) -> dict:
    preds = {}
    for d in ("x0", "x1", "x2", "x3"):
        kind = rng.random()
        if kind < 0.3:
            continue  # wildcard
        if kind < 0.4:  # past the edges: clipped, not rejected
            preds[d] = [rng.choice([-500, -1, 0]), rng.choice([1000, 1001, 5000])] if rng.random() < 0.5 \
                else [rng.uniform(-100, 50), rng.uniform(900, 2000)]
        elif kind < 0.5:  # tiny
            lo = rng.randrange(0, 1000)
            preds[d] = [lo, lo + rng.choice([1e-9, 0.001, 1])]
        else:  # integral bounds so that messages can sit exactly on them
            lo = rng.randrange(0, 900)
            preds[d] = [lo, lo + rng.randrange(1, 600)]
    return preds


def random_filter(rng: random.Random) -> dict:
    """Random predicates in the filter language beyond ranges (whole-number values, so that
    messages can sit on them): several boxes (`in`, overlapping `any_of`), checks after the
    index (`not_in`), bounds and equals."""
    d, e = rng.sample(DIMS, 2)
    lo = rng.randrange(0, 900)
    kind = rng.randrange(5)
    if kind == 0:
        return {d: {"in": sorted(rng.sample(range(0, 1000), rng.randrange(1, 5)))}}
    if kind == 1:
        return {d: {"not_in": [lo, lo + 1]}, e: [lo, lo + rng.randrange(50, 600)]}
    if kind == 2:  # two alternatives that overlap: a message in both is delivered once
        return {"any_of": [{d: [lo, lo + 300]}, {d: [lo + 100, lo + 400], e: {"gte": lo}}]}
    if kind == 3:
        return {d: {"gt": lo, "lte": lo + rng.randrange(1, 500)}}
    return {d: lo, e: {"lt": lo + 100}}


def predicate_numbers(preds: object) -> list[float]:
    """Every number a subscription's predicates name (where messages should sit)."""
    if isinstance(preds, bool):
        return []
    if isinstance(preds, (int, float)):
        return [float(preds)]
    if isinstance(preds, dict):
        return [x for v in preds.values() for x in predicate_numbers(v)]
    if isinstance(preds, list):
        return [x for v in preds for x in predicate_numbers(v)]
    return []


def subscribe_random(api: httpx.Client, rng: random.Random, n_queues: int, n_subs: int,
                     filters: float = 0.0) -> tuple[dict, dict]:
    """n_subs random subscriptions over n_queues new queues (a share `filters` of them in the
    filter language beyond ranges): ({queue: auth headers}, {subscription id: (queue, predicates)})."""
    queues = dict(new_queue(api) for _ in range(n_queues))
    subs = {}
    for _ in range(n_subs):
        q = rng.choice(list(queues))
        preds = random_filter(rng) if rng.random() < filters else random_predicates(rng)
        r = api.post("/v1/subscriptions", json={"queue": q, "predicates": preds}, headers=queues[q])
        assert r.status_code == 201
        subs[r.json()["id"]] = (q, preds)
    return queues, subs


async def publish_steadily(client: httpx.AsyncClient, rng: random.Random, prefix: str, n: int, rate: float,
                           messages: dict, refused: list, times: dict | None = None, give_up_s: float = 15) -> None:
    """Publish n messages at `rate`/s, each retried with its id until accepted (at most
    `give_up_s`); `times[id]` = (first sent, accepted)."""

    async def one(i: int) -> None:
        attrs = {d: rng.uniform(0, 1000) for d in DIMS}
        mid = f"{prefix}-{i}"
        first = time.monotonic()
        deadline = first + give_up_s
        while True:
            try:
                r = await client.post("/v1/messages", json={"attributes": attrs, "id": mid})
                if r.status_code == 202:
                    messages[mid] = tuple(attrs[d] for d in DIMS)
                    if times is not None:
                        times[mid] = (first, time.monotonic())
                    return
                assert r.status_code == 503, r.text
                refused.append((time.monotonic(), mid))
            except httpx.TransportError:
                refused.append((time.monotonic(), mid))
            assert time.monotonic() < deadline, f"{mid} was refused for {give_up_s} s"
            await asyncio.sleep(0.1)

    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(one(i)))
        await asyncio.sleep(1 / rate)
    await asyncio.gather(*tasks)


async def publish_until(client: httpx.AsyncClient, rng: random.Random, done: asyncio.Event, messages: dict,
                        refused: list, times: dict | None = None, rate: float = 100, tail_s: float = 3.0) -> int:
    """`publish_steadily` at `rate`/s, a second's worth at a time, until `tail_s` after `done` is
    set: publishing covers whatever the caller does meanwhile, however long it takes. Returns how
    many were sent."""
    chunks = 0
    while not done.is_set():
        await publish_steadily(client, rng, f"p{chunks}", int(rate), rate, messages, refused, times)
        chunks += 1
    await publish_steadily(client, rng, "tail", int(rate * tail_s), rate, messages, refused, times)
    return chunks * int(rate) + int(rate * tail_s)


async def gossip_views(addresses: list[str]) -> list[tuple[SegmentTable, dict[str, str]]]:
    """(table, {member: status}) as each matcher at `addresses` sees it."""
    out = []
    for a in addresses:
        async with grpc.aio.insecure_channel(a) as ch:
            r = await pb_grpc.MatcherStub(ch).GetTable(pb.TableRequest(), timeout=2)
        out.append((SegmentTable.from_json(json.loads(r.table_json)), {m.id: m.status for m in r.members}))
    return out


async def match_on_every_candidate(table: SegmentTable, rng: random.Random, subs: dict, n: int) -> int:
    """Ask each candidate of n random messages which subscriptions match (a dry run): every
    candidate must find exactly the oracle's set. Returns the matches checked."""
    checked = 0
    points = [[float(rng.randrange(1000)) if rng.random() < 0.3 else rng.uniform(0, 1000) for _ in DIMS]
              for _ in range(n)]
    matched: dict[str, set[str]] = {}
    for (_, mid), sids in oracle(SPACE, subs, {str(i): tuple(p) for i, p in enumerate(points)}).items():
        matched.setdefault(mid, set()).update(sids)
    channels = {m: grpc.aio.insecure_channel(a) for m, a in table.members.items()}
    try:
        for i, point in enumerate(points):
            expected = sorted(matched.get(str(i), ()))
            for dim, owner in table.candidates(point):
                req = pb.ForwardRequest(dimension=dim, messages=[pb.ForwardMessage(id=f"probe-{i}", point=point)])
                reply = await pb_grpc.MatcherStub(channels[owner]).Match(req, timeout=5)
                got = list(reply.messages[0].subscription_ids)
                assert got == expected, (point, dim, owner, set(expected) ^ set(got))
                checked += len(expected)
    finally:
        for ch in channels.values():
            await ch.close()
    return checked


def random_point(rng: random.Random, bounds: list[float]) -> dict:
    attrs = {}
    for d in ("x0", "x1", "x2", "x3"):
        r = rng.random()
        if r < 0.4 and bounds:
            v = rng.choice(bounds)  # exactly on some predicate's low or high
        elif r < 0.45:
            v = rng.choice([0, 999.999999, 500, 250, 750])  # on and near segment cuts
        else:
            v = rng.uniform(0, 1000)
        attrs[d] = v if 0 <= v < 1000 else rng.uniform(0, 1000)
    return attrs


async def random_workload(url: str, queues: dict[str, dict], rng: random.Random, n_subs: int = N_SUBS,
                          n_messages: int = N_MESSAGES, filters: float = 0.0) -> tuple[dict, dict, list]:
    """Subscribe `n_subs` random subscriptions into `queues` (a share `filters` of them in the
    filter language beyond ranges), remove a tenth again, publish `n_messages` (half singly,
    half in batches of 100), drain every queue: (subs, messages, got)."""
    qids = list(queues)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=32)) as client:
        sem = asyncio.Semaphore(24)
        subs: dict[str, tuple[str, dict]] = {}

        async def subscribe(q: str, preds: dict) -> None:
            async with sem:
                r = await client.post("/v1/subscriptions", json={"queue": q, "predicates": preds},
                                      headers=queues[q])
                assert r.status_code == 201, r.text
                subs[r.json()["id"]] = (q, preds)

        await asyncio.gather(*(subscribe(rng.choice(qids), random_filter(rng) if rng.random() < filters
                                         else random_predicates(rng)) for _ in range(n_subs)))

        # Remove a tenth again.
        removed = rng.sample(sorted(subs), n_subs // 10)

        async def unsubscribe(sid: str) -> None:
            async with sem:
                r = await client.delete(f"/v1/subscriptions/{sid}", headers=queues[subs[sid][0]])
                assert r.status_code == 204, r.text

        await asyncio.gather(*(unsubscribe(s) for s in removed))
        for s in removed:
            del subs[s]

        bounds = sorted({b for _, p in subs.values() for b in predicate_numbers(p) if 0 <= b < 1000})
        points = [random_point(rng, bounds) for _ in range(n_messages)]
        messages = await publish_points(client, sem, points)
        got = await drain(client, queues)
        return subs, messages, got


async def publish_points(client: httpx.AsyncClient, sem: asyncio.Semaphore, points: list[dict]) -> dict:
    """Publish half the points singly and half in batches of 100: {message id: point}."""
    messages: dict[str, tuple[float, ...]] = {}

    async def publish_one(attrs: dict) -> None:
        async with sem:
            r = await client.post("/v1/messages", json={"attributes": attrs, "payload": {"n": 1}})
            assert r.status_code == 202, r.text
            messages[r.json()["id"]] = tuple(attrs[d] for d in ("x0", "x1", "x2", "x3"))

    half = len(points) // 2
    await asyncio.gather(*(publish_one(a) for a in points[:half]))
    for i in range(half, len(points), 100):
        chunk = points[i:i + 100]
        r = await client.post("/v1/messages:batch", json={"messages": [{"attributes": a} for a in chunk]})
        assert r.status_code == 202, r.text
        for mid, a in zip(r.json()["ids"], chunk):
            messages[mid] = tuple(a[d] for d in ("x0", "x1", "x2", "x3"))
    return messages


EXACT = {"missing": [], "unexpected": [], "duplicates": [], "wrong_subscriptions": []}
