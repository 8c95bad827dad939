"""`bluedove bench backpressure`: publishers push far more than a local cluster can take; the
dispatchers and matchers must refuse (503 + Retry-After) rather than buffer, so their memory
plateaus, and every accepted message must still be delivered exactly.

The cluster runs with small bounds (the dispatcher's max_outstanding, the matchers'
max_queued). Publisher processes built on the SDK each keep several batch calls under way, with
their own message ids; after a 503 a publisher sends the same batch again after a short pause
(far less than Retry-After), so the offered load stays a multiple of what is accepted. The
matchers' and dispatchers' resident memory is sampled all along (psutil). At the end every queue
is drained and compared with a brute-force oracle: each accepted message is in exactly the
queues whose rectangle holds it, once; a refused one is in all of them or none (a refused batch
may have had some messages stored before another was refused: each message is all-or-nothing).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np
import psutil

from bluedove.client import AsyncClient
from bluedove.client.errors import Unavailable
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags, report

DIMS = ("x0", "x1", "x2", "x3")


@dataclass
class Tally:
    """What the publishers saw: messages offered, accepted, refused; 503s, Retry-Afters, other errors."""

    accepted: set[str] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)
    offered: int = 0  # messages sent in calls, accepted or not
    answers_503: int = 0
    retry_after: list[float] = field(default_factory=list)
    refused_at: list[float] = field(default_factory=list)  # time.monotonic() of each 503
    other_errors: list[str] = field(default_factory=list)


def _batch(rng: np.random.Generator, tag: str, n: int) -> tuple[list[str], dict[str, list[float]], bytes]:
    points = rng.uniform(0.0, 1000.0, (n, len(DIMS))).round(3).tolist()
    ids = [f"{tag}-{i}" for i in range(n)]
    body = json.dumps({"messages": [{"id": i, "attributes": dict(zip(DIMS, p))} for i, p in zip(ids, points)]})
    return ids, dict(zip(ids, points)), body.encode()


async def _publisher(url: str, name: str, until: float, calls: int, batch: int, pause_s: float, tally: Tally,
                     points: dict, seed: int) -> None:
    rng = np.random.default_rng(seed)
    async with AsyncClient(url, retries=0, timeout_s=60.0) as c:
        seq = 0

        async def lane(lane_no: int) -> None:
            nonlocal seq
            ids: list[str] = []
            while time.monotonic() < until:
                if not ids:  # a refused batch is sent again as it was, with the same ids
                    seq += 1
                    ids, pts, body = _batch(rng, f"{name}.{lane_no}.{seq}", batch)
                    points.update(pts)
                tally.offered += len(ids)
                try:
                    await c.t.publish_encoded(body)
                    tally.accepted.update(ids)
                    ids = []
                except Unavailable as exc:
                    tally.refused.update(ids)
                    tally.answers_503 += 1
                    tally.refused_at.append(time.monotonic())
                    if exc.retry_after_s is not None:
                        tally.retry_after.append(exc.retry_after_s)
                    await asyncio.sleep(pause_s)
                except Exception as exc:  # noqa: BLE001 - counted: the check fails on any
                    tally.refused.update(ids)
                    tally.other_errors.append(repr(exc))
                    ids = []

        await asyncio.gather(*(lane(i) for i in range(calls)))


def _publisher_process(url: str, name: str, until: float, calls: int, batch: int, pause_s: float,
                       seed: int) -> tuple[dict, dict]:
    """One publisher process (its own interpreter, so the publishers are not held to one core):
    its tally and the points of the messages it made."""
    tally, points = Tally(), {}
    asyncio.run(_publisher(url, name, until, calls, batch, pause_s, tally, points, seed))
    return asdict(tally), points


async def _sample_rss(pids: dict[str, int], until: float, every_s: float, out: dict[str, list[tuple[float, int]]]):
    procs = {n: psutil.Process(p) for n, p in pids.items()}
    t0 = time.monotonic()
    while time.monotonic() < until:
        for n, p in procs.items():
            out.setdefault(n, []).append((time.monotonic() - t0, p.memory_info().rss))
        await asyncio.sleep(every_s)


def plateau(samples: list[tuple[float, int]]) -> dict:
    """The max RSS of the first and the last third of a run's samples (bytes)."""
    rss = [r for _, r in samples]
    third = max(len(rss) // 3, 1)
    return {"first_max": max(rss[:third]), "last_max": max(rss[-third:]), "samples": len(rss)}


async def _drain(url: str, queues: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Every delivery of every queue (polled and acked until a few empty rounds)."""
    got: dict[str, list[str]] = {q: [] for q, _ in queues}
    async with AsyncClient(url, timeout_s=60.0) as c:
        async def one(q: str, token: str) -> None:
            empty = 0
            while empty < 3:
                msgs = await c.t.poll(q, token, 1000, 1.0)
                if not msgs:
                    empty += 1
                    continue
                empty = 0
                got[q] += [m["id"] for m in msgs]
                await c.t.ack(q, token, [m["receipt"] for m in msgs])
        await asyncio.gather(*(one(q, t) for q, t in queues))
    return got


def check(subs: dict[str, dict], points: dict[str, list[float]], tally: Tally, got: dict[str, list[str]]) -> dict:
    """The brute-force oracle's verdict: counts of each kind of mistake (all 0 when exact)."""
    lo = {q: np.array([s[d][0] for d in DIMS]) for q, s in subs.items()}
    hi = {q: np.array([s[d][1] for d in DIMS]) for q, s in subs.items()}
    ids = sorted(points)
    pts = np.array([points[i] for i in ids])
    want: dict[str, set[str]] = {}
    for q in subs:
        inside = np.all((pts >= lo[q]) & (pts < hi[q]), axis=1)
        want[q] = {ids[i] for i in np.flatnonzero(inside)}
    missing = duplicates = unexpected = partial = 0
    refused_stored = 0
    held: dict[str, set[str]] = {}
    for q, lst in got.items():
        s = set(lst)
        duplicates += len(lst) - len(s)
        unexpected += len(s - want[q])
        missing += len((want[q] & tally.accepted) - s)
        held[q] = s
    for mid in tally.refused - tally.accepted:
        queues = [q for q in subs if mid in want[q]]
        stored = [q for q in queues if mid in held[q]]
        if stored:
            refused_stored += 1
            if len(stored) != len(queues):
                partial += 1
    return {"missing": missing, "duplicates": duplicates, "unexpected": unexpected,
            "refused_but_partly_stored": partial, "refused_but_stored": refused_stored,
            "deliveries": sum(len(v) for v in got.values())}


async def overload(url: str, pids: dict[str, int], seconds: float = 24.0, publishers: int = 4, calls: int = 16,
                   batch: int = 200, n_queues: int = 20, pause_s: float = 0.002, warmup_s: float = 4.0,
                   seed: int = 1) -> dict:
    """Push the cluster at `url` for `seconds` and check it; `pids`: name -> pid to sample."""
    rng = np.random.default_rng(seed)
    subs: dict[str, dict] = {}
    queues = []
    async with AsyncClient(url, timeout_s=60.0) as c:
        for _ in range(n_queues):
            q = await c.create_queue()
            box = {}
            for d in DIMS:
                a = float(rng.uniform(0, 700))
                box[d] = [round(a, 3), round(a + float(rng.uniform(150, 300)), 3)]
            await c.subscribe(q, box)
            subs[q.id] = box
            queues.append((q.id, q.token))
    await asyncio.sleep(0.5)  # the subscriptions reach every matcher
    tally, points, rss = Tally(), {}, {}
    t0 = time.monotonic()
    until = t0 + warmup_s + seconds
    sampler = asyncio.create_task(_sample_rss(pids, until, 0.25, rss))
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(publishers, mp_context=mp.get_context("spawn")) as pool:
        outs = await asyncio.gather(*(loop.run_in_executor(pool, _publisher_process, url, f"p{i}", until, calls, batch,
                                                           pause_s, seed * 100 + i) for i in range(publishers)))
    for part, pts in outs:
        tally.accepted |= part["accepted"]
        tally.refused |= part["refused"]
        tally.offered += part["offered"]
        tally.answers_503 += part["answers_503"]
        tally.retry_after += part["retry_after"]
        tally.refused_at += part["refused_at"]
        tally.other_errors += part["other_errors"]
        points.update(pts)
    await sampler
    took = time.monotonic() - t0
    rss = {n: [(t, r) for t, r in s if t >= warmup_s] for n, s in rss.items()}
    got = await _drain(url, queues)
    start = t0 + warmup_s
    thirds = [sum(1 for t in tally.refused_at if start + k * seconds / 3 <= t < start + (k + 1) * seconds / 3)
              for k in range(3)]
    return {
        "seconds": round(took, 1),
        "offered": tally.offered,
        "accepted": len(tally.accepted),
        "refused": len(tally.refused - tally.accepted),
        "offered_per_s": round(tally.offered / took),
        "accepted_per_s": round(len(tally.accepted) / took),
        "answers_503": tally.answers_503,
        "answers_503_by_third": thirds,
        "retry_after": sorted(set(tally.retry_after)),
        "with_retry_after": len(tally.retry_after),
        "other_errors": tally.other_errors[:5],
        "rss": {n: plateau(s) for n, s in rss.items()},
        "oracle": check(subs, points, tally, got),
    }


def add_parser(sub) -> None:
    p = sub.add_parser("backpressure", help=BENCHES["backpressure"])
    p.add_argument("--matchers", type=int, default=2, help="matcher processes (default 2)")
    p.add_argument("--seconds", type=float, default=24.0, help="how long the publishers push (default 24)")
    p.add_argument("--publishers", type=int, default=4, help="publisher processes (default 4)")
    p.add_argument("--calls", type=int, default=16, help="batch calls under way per publisher (default 16)")
    p.add_argument("--batch", type=int, default=200, help="messages per batch call (default 200)")
    p.add_argument("--max-outstanding", type=int, default=2000, help="the dispatchers' bound (default 2000)")
    p.add_argument("--max-queued", type=int, default=1000, help="the matchers' bound per dimension (default 1000)")
    add_output_flags(p)
    p.set_defaults(func=run_backpressure_bench)


def run_backpressure_bench(args) -> int:
    from bluedove.local.cluster import LocalCluster

    env = {"BLUEDOVE_MAX_OUTSTANDING": str(args.max_outstanding), "BLUEDOVE_MAX_QUEUED": str(args.max_queued)}
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(matchers=args.matchers, http_port=0, data_dir=tmp, quiet=True, restart=False,
                               child_env=env).start()
        try:
            pids = {c.name: c.pid for c in cluster.children}
            result = asyncio.run(overload(cluster.url, pids, args.seconds, args.publishers, args.calls, args.batch,
                                          seed=args.seed))
        finally:
            cluster.stop()
    report(result, args.json, lambda r: print(json.dumps(r, indent=1)))
    return 0
