"""The last hour of cluster time series in the store, and the per-process recorder that writes it.

Keys (prefix `bd:`):
  bd:ts:<unix second>   hash    that second's record (bluedove/core/timeseries.py): counts added
                                by every process (HINCRBY), gauges set (HSET); expires after
                                KEY_TTL_S
  bd:density            hash    dispatcher id -> its recent message rate per density bin,
                                JSON {t, rates: {dim: [64 rates]}}; dropped at read when stale
  bd:mstats             hash    matcher id -> its latest stats JSON {t, cpu, rss_bytes,
                                coverage: {dim: {bin: subscriptions}}}; stale ones dropped at read
  bd:depth:lock         string  who samples queue depth now (SET NX EX): one dispatcher at a time

Why the store and not each process's memory: docs/design.md, "The last hour".
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from bluedove.core.timeseries import KEY_TTL_S
from bluedove.store import keys as K
from bluedove.store.connection import Connection
from bluedove.store.queues import GROUP

log = logging.getLogger("bluedove.series")

DENSITY = "bd:density"
DENSITY_TTL_S = 10
MATCHER_STATS_MAX_AGE_S = 60.0
DEPTH_LOCK_S = 4
# The most of a sampler's time queue depth sampling may take (its interval grows with its cost).
DEPTH_SHARE = 0.05


def ts_key(t: int) -> str:
    return f"bd:ts:{t}"


class Recorder:
    """One process's part of the per-second records, aggregated in memory and written once a
    second in one pipelined call. `add` and `set` cost a dict update: cheap enough for a hot
    path. `zero` fields are written (as 0) every second even when nothing happened, so that
    a null in the series means "no process of that kind was there". `before_flush` callables
    run just before each write (to sample counters kept elsewhere). A failed write keeps the
    seconds for the next one (up to the window)."""

    def __init__(self, store: Connection, zero: tuple[str, ...] = (), interval_s: float = 1.0) -> None:
        self.store = store
        self.zero = zero
        self.interval_s = interval_s
        self.before_flush: list[Callable[[float], None]] = []
        self._counts: dict[int, dict[str, int]] = {}
        self._gauges: dict[int, dict[str, float]] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, name: str, n: int = 1, now: float | None = None) -> None:
        t = int(time.time() if now is None else now)
        rec = self._counts.get(t)
        if rec is None:
            rec = self._counts[t] = {}
        rec[name] = rec.get(name, 0) + n

    def set(self, name: str, value: float, now: float | None = None) -> None:
        if value is None or not math.isfinite(value):
            return
        t = int(time.time() if now is None else now)
        self._gauges.setdefault(t, {})[name] = value

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="series")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        try:  # the last whole second, and what the current one holds so far
            await self.flush(time.time() + 1)
        except Exception:  # noqa: BLE001 - the store may be gone at shutdown
            pass

    async def _run(self) -> None:
        while True:
            now = time.time()
            # just after the next whole second: the second before it is complete
            await asyncio.sleep(self.interval_s - (now % self.interval_s) + 0.02)
            try:
                await self.flush(time.time())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the store may be briefly away; kept for the next
                log.warning("could not write the time series: %r", exc)

    async def flush(self, now: float) -> int:
        """Write every second before `now`'s; returns how many seconds were written."""
        for hook in self.before_flush:
            hook(now)
        current = int(now)
        done = current - 1
        for name in self.zero:
            self.add(name, 0, now=done)
        seconds = sorted(t for t in set(self._counts) | set(self._gauges) if t < current)
        seconds = [t for t in seconds if t > current - KEY_TTL_S]
        if not seconds:
            return 0
        async with self.store.r.pipeline(transaction=False) as p:
            for t in seconds:
                key = ts_key(t)
                for name, n in self._counts.get(t, {}).items():
                    p.hincrby(key, name, n)
                if self._gauges.get(t):
                    p.hset(key, mapping=self._gauges[t])
                p.expire(key, KEY_TTL_S)
            await p.execute()
        for t in list(self._counts):
            if t < current:
                del self._counts[t]
        for t in list(self._gauges):
            if t < current:
                del self._gauges[t]
        return len(seconds)


async def put_gauges(store: Connection, values: Mapping[str, float], now: float | None = None) -> None:
    """Set gauges in the record of `now`'s second at once (a process that writes rarely)."""
    key = ts_key(int(time.time() if now is None else now))
    values = {k: v for k, v in values.items() if v is not None and math.isfinite(v)}
    async with store.r.pipeline(transaction=False) as p:
        if values:
            p.hset(key, mapping=values)
        p.expire(key, KEY_TTL_S)
        await p.execute()


async def read_records(store: Connection, seconds: list[int]) -> list[dict[str, str]]:
    """Each second's record ({} where there is none), in one pipelined call."""
    if not seconds:
        return []
    async with store.r.pipeline(transaction=False) as p:
        for t in seconds:
            p.hgetall(ts_key(t))
        return list(await p.execute())


# -- density -----------------------------------------------------------------------------------
async def put_density(store: Connection, disp_id: str, rates: Mapping[str, list[float]]) -> None:
    await store.r.hset(DENSITY, disp_id, json.dumps({"t": time.time(), "rates": rates}))


async def read_density(store: Connection, now: float | None = None) -> list[dict[str, list[float]]]:
    """Every live dispatcher's message density entry (those not refreshed within
    DENSITY_TTL_S are deleted)."""
    now = time.time() if now is None else now
    out, stale = [], []
    for disp_id, raw in (await store.r.hgetall(DENSITY)).items():
        entry = json.loads(raw)
        if now - float(entry.get("t", 0)) > DENSITY_TTL_S:
            stale.append(disp_id)
        else:
            out.append(entry["rates"])
    if stale:
        await store.r.hdel(DENSITY, *stale)
    return out


async def put_matcher_stats(store: Connection, matcher_id: str, entry: dict[str, Any]) -> None:
    await store.r.hset("bd:mstats", matcher_id, json.dumps(entry))


async def read_matcher_stats(store: Connection, now: float | None = None,
                             max_age_s: float = MATCHER_STATS_MAX_AGE_S) -> dict[str, dict[str, Any]]:
    """Matcher id -> latest stats entry; entries older than `max_age_s` are dropped (and deleted)."""
    now = time.time() if now is None else now
    raw = await store.r.hgetall("bd:mstats")
    out, stale = {}, []
    for mid, v in raw.items():
        try:
            entry = json.loads(v)
        except ValueError:
            stale.append(mid)
            continue
        if now - float(entry.get("t", 0)) > max_age_s:
            stale.append(mid)
        else:
            out[mid] = entry
    if stale:
        await store.r.hdel("bd:mstats", *stale)
    return out


# -- queue depth -------------------------------------------------------------------------------
async def take_depth_turn(store: Connection, who: str) -> bool:
    """True if `who` samples queue depth this turn (one process per DEPTH_LOCK_S)."""
    return bool(await store.r.set("bd:depth:lock", who, nx=True, ex=DEPTH_LOCK_S))


def depth_pause_s(took_s: float) -> int:
    """How long no process samples queue depth after a sample that took `took_s`: at least a
    turn, and long enough that sampling keeps under DEPTH_SHARE of the sampler's time (one
    sample reads every queue: about 1 s for 40,000 queues, docs/design.md)."""
    return max(DEPTH_LOCK_S, math.ceil(took_s / DEPTH_SHARE))


async def hold_depth_turn(store: Connection, who: str, seconds: int) -> None:
    """Keep the turn `who` holds for `seconds` from now (no one samples meanwhile)."""
    await store.r.set("bd:depth:lock", who, ex=seconds)


async def queue_depth(store: Connection, chunk: int = 1000) -> tuple[int, int]:
    """(undelivered, unacked) summed over every queue: deliveries never handed out, and those
    handed out and not acked. An ack deletes its entry (XDEL), or on a queue that keeps acked
    deliveries counts it in the hash's `kept`, so a stream holds the pending entries, those
    never read and the kept ones: undelivered = XLEN - pending - kept (Redis 6.2 has no group
    lag). A walk of the set of queues and three commands per queue."""
    undelivered = unacked = 0
    keys: list[str] = []

    async def count(batch: list[str]) -> tuple[int, int]:
        async with store.r.pipeline(transaction=False) as p:
            for q in batch:
                p.xlen(K.queue_stream(q))
                p.xpending(K.queue_stream(q), GROUP)
                p.hget(K.queue_hash(q), "kept")
            res = await p.execute(raise_on_error=False)
        u = a = 0
        for i in range(0, len(res), 3):
            n, pend, kept = res[i], res[i + 1], res[i + 2]
            if isinstance(n, Exception) or isinstance(pend, Exception):
                continue  # deleted meanwhile
            pending = int(pend["pending"]) if isinstance(pend, dict) else int(pend[0])
            u += max(int(n) - pending - (int(kept) if isinstance(kept, (str, bytes, int)) else 0), 0)
            a += pending
        return u, a

    async for queue in store.r.sscan_iter(K.QUEUES, count=1000):
        keys.append(queue)
        if len(keys) >= chunk:
            u, a = await count(keys)
            undelivered, unacked, keys = undelivered + u, unacked + a, []
    if keys:
        u, a = await count(keys)
        undelivered, unacked = undelivered + u, unacked + a
    return undelivered, unacked
