"""`bench subscribe --modes churn`: what subscription churn costs the publishers.

Drivers change routes and phones come and go, so subscribes and unsubscribes arrive while
messages do. On a cluster holding the workload's subscriptions (topped up by `:batch` calls
first), three steps, each in processes of their own:

1. the saturation: a publisher sending `:batch` calls of PUBLISH_BATCH as fast as they are
   answered (PUBLISH_INFLIGHT under way), its accepted messages/s;
2. alone: a paced publisher at `--publish-share` of that rate (default a half), for
   `--duration` seconds: messages accepted per second and each call's latency;
3. with churn: the same publisher, and beside it a churner subscribing at `--churn` per second
   (single POST /v1/subscriptions into CHURN_QUEUES queues) and unsubscribing as fast the
   oldest of the subscriptions it made (so the cluster's size stays put).

The figure is the publish rate with churn over the rate alone (a drop of at most 10 % is the
goal, docs/bench-reference.md, "Subscribe"), with the churn achieved and its latencies.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from collections import deque
from typing import Any

import numpy as np

from bluedove.client.errors import BlueDoveError
from bluedove.lab.aio_transport import SubscribeTransport
from bluedove.lab.load import PacedPublisher, Pacer, pool

PUBLISH_BATCH = 100
PUBLISH_INFLIGHT = 8
CHURN_QUEUES = 50
CHURN_INFLIGHT = 256


def _publish_body(points: np.ndarray, names: tuple[str, ...], start: int) -> str:
    rows = points[start % len(points):][:PUBLISH_BATCH]
    if len(rows) < PUBLISH_BATCH:
        rows = np.concatenate([rows, points[:PUBLISH_BATCH - len(rows)]])
    items = ",".join('{"attributes":{' + ",".join(f'"{n}":{v!r}' for n, v in zip(names, r)) + "}}"
                     for r in rows.tolist())
    return '{"messages":[' + items + "]}"


def publisher_main(url: str, rate: float, seconds: float, points: np.ndarray, names: tuple[str, ...],
                   out: Any) -> None:
    """Publish for `seconds` at `rate` msg/s (0: as fast as answered); put {accepted, refused,
    skipped, latencies_ms, seconds}."""
    async def main() -> dict[str, Any]:
        t = pool(url, PUBLISH_INFLIGHT)
        k = [0]

        async def send() -> bool:
            body = _publish_body(points, names, k[0])
            k[0] += PUBLISH_BATCH
            r = await t.h.post("/v1/messages:batch", content=body, headers={"Content-Type": "application/json"})
            return r.status_code == 202

        p = PacedPublisher(send, PUBLISH_BATCH, PUBLISH_INFLIGHT, rate=rate if rate > 0 else 1e9)
        until = time.monotonic() + seconds
        t0 = time.monotonic()
        try:
            await p.run(lambda: time.monotonic() >= until)
        finally:
            await t.close()
        return {"accepted": p.accepted, "refused": p.refused, "skipped": p.skipped,
                "latencies_ms": [1000 * s for _, s in p.latencies], "seconds": time.monotonic() - t0}

    out.put(("publisher", asyncio.run(main())))


def churner_main(url: str, rate: float, seconds: float, preds: list[dict], out: Any) -> None:
    """Subscribe at `rate`/s for `seconds` into CHURN_QUEUES queues of its own, each subscribe
    followed by the unsubscribe of the oldest one made, as a call of its own: a subscribe's
    slot (CHURN_INFLIGHT under way) is free once it is answered, and the unsubscribes have as
    many slots again (tied together, a slow unsubscribe held its subscribe's slot: 256 slots
    over ~3 s a pair gave ~85 subscribes/s at most, whatever the service did); put
    {subscribed, unsubscribed, errors, subscribe_ms, unsubscribe_ms}."""
    async def main() -> dict[str, Any]:
        t = SubscribeTransport(url, 2 * CHURN_INFLIGHT)  # aiohttp: httpx cost ~5.6 ms of CPU a call here
        queues = [(q["queue"], q["token"]) for q in [await t.create_queue() for _ in range(CHURN_QUEUES)]]
        live: deque[tuple[str, str]] = deque()
        sub_ms: list[float] = []
        unsub_ms: list[float] = []
        errors: list[str] = []
        tasks: set[asyncio.Task[None]] = set()
        unsubs: set[asyncio.Task[None]] = set()
        unsub_slots = asyncio.Semaphore(CHURN_INFLIGHT)

        async def unsubscribe(sub_id: str, token: str) -> None:
            async with unsub_slots:
                t0 = time.monotonic()
                try:
                    await t.unsubscribe(sub_id, token)
                    unsub_ms.append(1000 * (time.monotonic() - t0))
                except BlueDoveError as exc:
                    errors.append(repr(exc))

        async def one(j: int) -> None:
            q, token = queues[j % len(queues)]
            t0 = time.monotonic()
            try:
                sub_id = (await t.subscribe({"queue": q, "predicates": preds[j % len(preds)]}, token))["id"]
            except BlueDoveError as exc:
                errors.append(repr(exc))
                return
            sub_ms.append(1000 * (time.monotonic() - t0))
            live.append((sub_id, token))
            if len(live) > CHURN_QUEUES:
                task = asyncio.get_running_loop().create_task(unsubscribe(*live.popleft()))
                unsubs.add(task)
                task.add_done_callback(unsubs.discard)

        pacer, j, until = Pacer(), 0, time.monotonic() + seconds
        try:
            while time.monotonic() < until and len(errors) < 10:
                if len(tasks) < CHURN_INFLIGHT:
                    task = asyncio.get_running_loop().create_task(one(j))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                    j += 1
                await asyncio.sleep(pacer.wait_s(rate, 1, time.monotonic()))
            await asyncio.gather(*tasks)
            await asyncio.gather(*unsubs)
        finally:
            await t.close()
        return {"subscribed": len(sub_ms), "unsubscribed": len(unsub_ms), "errors": errors[:3],
                "subscribe_ms": sub_ms, "unsubscribe_ms": unsub_ms}

    out.put(("churner", asyncio.run(main())))


def _run(jobs: list[tuple[Any, tuple]], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Each (target, args) in a process of its own, `out` appended to its args: {kind: result}."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=f, args=(*a, out), daemon=True) for f, a in jobs]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=timeout_s) for _ in procs)
    for p in procs:
        p.join(timeout=10)
    return got


def _pct(xs: list[float], q: float) -> float | None:
    return round(float(np.percentile(xs, q)), 2) if xs else None


def _publish_view(r: dict[str, Any], seconds: float) -> dict[str, Any]:
    return {"accepted_per_s": round(r["accepted"] / seconds), "refused": r["refused"], "skipped": r["skipped"],
            "p50_ms": _pct(r["latencies_ms"], 50), "p99_ms": _pct(r["latencies_ms"], 99)}


def measure_churn(url: str, points: np.ndarray, names: tuple[str, ...], preds: list[dict], churn: float,
                  share: float, seconds: float) -> dict[str, Any]:
    """The three steps of the module docstring: {saturation, rate, alone, churn, drop}."""
    sat = _run([(publisher_main, (url, 0.0, max(4.0, seconds / 2), points, names))], seconds + 300)["publisher"]
    saturation = sat["accepted"] / sat["seconds"]
    rate = share * saturation
    alone = _run([(publisher_main, (url, rate, seconds, points, names))], seconds + 300)["publisher"]
    both = _run([(publisher_main, (url, rate, seconds, points, names)),
                 (churner_main, (url, churn, seconds, preds))], seconds + 300)
    a, b = _publish_view(alone, seconds), _publish_view(both["publisher"], seconds)
    c = both["churner"]
    return {"saturation_per_s": round(saturation), "rate_per_s": round(rate), "alone": a, "with_churn": b,
            "drop": round(1 - b["accepted_per_s"] / a["accepted_per_s"], 4) if a["accepted_per_s"] else None,
            "churn": {"asked_per_s": churn, "subscribed_per_s": round(c["subscribed"] / seconds),
                      "unsubscribed_per_s": round(c["unsubscribed"] / seconds), "errors": c["errors"],
                      "subscribe_p50_ms": _pct(c["subscribe_ms"], 50), "subscribe_p99_ms": _pct(c["subscribe_ms"], 99),
                      "unsubscribe_p50_ms": _pct(c["unsubscribe_ms"], 50)}}
