"""A matcher's part of the cluster time series (bluedove/store/series.py): deliveries written
per second, and every STATS_EVERY_S its stats entry: CPU fraction of one core, resident memory,
and per dimension the subscriptions covering the centres of the density bins it owns."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from bluedove.core import timeseries as ts
from bluedove.core.partition.segments import SegmentTable
from bluedove.matcher.load import Totals
from bluedove.matcher.sets import SubscriptionSets
from bluedove.runtime.settings import MatcherSettings
from bluedove.runtime.telemetry import CpuMeter
from bluedove.store.connection import Connection
from bluedove.store.series import Recorder, put_matcher_stats

log = logging.getLogger("bluedove.matcher")

STATS_EVERY_S = 2.0


class Sampled(Protocol):
    """What the series reads of a matcher (bluedove/matcher/matcher.py `Matcher`, which starts it)."""

    @property
    def s(self) -> MatcherSettings: ...
    @property
    def store(self) -> Connection: ...
    @property
    def ready(self) -> bool: ...
    @property
    def table(self) -> SegmentTable | None: ...
    @property
    def sets(self) -> SubscriptionSets | None: ...
    def run_index(self, fn: Callable[[Sampled], dict[str, dict[str, int]]], m: Sampled, /
                  ) -> Awaitable[dict[str, dict[str, int]]]: ...


def rss_bytes() -> int | None:
    """Resident set size now (Linux /proc), else None."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def coverage(m: Sampled) -> dict[str, dict[str, int]]:
    """On the index thread: per dimension, {bin: subscriptions covering its centre} for the
    bins whose centre lies in our segment (none before the matcher has its table and sets)."""
    out: dict[str, dict[str, int]] = {}
    table, sets = m.table, m.sets
    if table is None or sets is None:
        return out
    segments = table.segments_of(m.s.id)
    for i, dim in enumerate(table.space.dimensions):
        seg = segments.get(i)
        if seg is None:
            continue
        bins = ts.owned_bins(seg[0], seg[1], dim.min, dim.max)
        centres = ts.bin_centres(dim.min, dim.max)
        counts = sets.sets[i].coverage(i, [centres[j] for j in bins])
        out[dim.name] = {str(j): c for j, c in zip(bins, counts)}
    return out


async def run_series(m: Sampled, totals: Totals) -> None:
    """The matcher's recorder and stats entry, until cancelled (`m` a started Matcher, `totals`
    its queue's)."""
    rec = Recorder(m.store, zero=(ts.DELIVERED,))
    seen = totals.written

    def sample(now: float) -> None:
        nonlocal seen
        total = totals.written
        rec.add(ts.DELIVERED, total - seen, now - 1)
        seen = total

    rec.before_flush.append(sample)
    rec.start()
    cpu = CpuMeter()
    try:
        while True:
            await asyncio.sleep(STATS_EVERY_S)
            try:
                cov = await m.run_index(coverage, m) if m.ready else {}
                await put_matcher_stats(m.store, m.s.id, {"t": round(time.time(), 3), "cpu": cpu.read(),
                                                          "rss_bytes": rss_bytes(), "coverage": cov})
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the store may be briefly away
                log.warning("could not write the matcher's stats entry: %r", exc)
    finally:
        await rec.stop()
