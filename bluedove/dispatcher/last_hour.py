"""GET /v1/stats: the last hour of the cluster from the store (docs/api.md), and the matchers'
stats entries that /v1/cluster shows (CPU, RSS)."""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Any

from bluedove.core import timeseries as ts
from bluedove.core.errors import ApiError
from bluedove.core.space import Space
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.store.series import read_density, read_matcher_stats, read_records


def parse_since(raw: str | None) -> float | None:
    """The `since` query parameter: None when absent, else a finite number (422 naming it)."""
    if raw is None:
        return None
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not math.isfinite(v):
        raise ApiError(422, "invalid_parameter", "since must be a number: Unix seconds", "since")
    return v


def _event_time(e: dict[str, Any]) -> float | None:
    """An event's "t"; for one written before events had it, its "at" read as a time."""
    t = e.get("t")
    if isinstance(t, (int, float)):
        return float(t)
    try:
        return datetime.fromisoformat(str(e.get("at")).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def density(space: Space, entries: list[dict[str, list[float]]], mstats: dict[str, dict[str, Any]]
            ) -> dict[str, dict[str, Any]]:
    n = ts.DENSITY_BINS
    out = {}
    for dim in space.dimensions:
        messages = ts.sum_lists([e[dim.name] for e in entries if dim.name in e], n)
        subs: list[float | None] = [None] * n
        for entry in mstats.values():
            for j, c in (entry.get("coverage", {}).get(dim.name) or {}).items():
                j = int(j)
                if 0 <= j < n:
                    subs[j] = (subs[j] or 0) + c
        out[dim.name] = {"lo": dim.to_json()["min"], "hi": dim.to_json()["max"], "bins": n,
                         "messages": [round(v, 4) if v is not None else 0 for v in messages],
                         "subscriptions": subs}
    return out


async def stats(d: Dispatcher, since_raw: str | None) -> dict[str, Any]:
    now = time.time()
    since = ts.clamp_since(parse_since(since_raw), now)
    seconds = ts.seconds_between(since, now)
    records = await read_records(d.store, seconds)
    events = []
    for e in await d.store.events(limit=200):
        t = _event_time(e)
        if t is not None and t > since:
            events.append({"t": t, "at": e.get("at"), "action": e.get("action"), "reason": e.get("reason", ""),
                           "matchers": e.get("matchers")})
    events.sort(key=lambda e: e["t"])
    mstats = await read_matcher_stats(d.store, now)
    return {
        "now": round(now, 3),
        "step_s": 1,
        "window_s": ts.WINDOW_S,
        "series": ts.assemble(seconds, records),
        "events": events,
        "density": density(d.space, await read_density(d.store), mstats),
    }


async def member_stats(d: Dispatcher) -> dict[str, dict[str, Any]]:
    """Matcher id -> {cpu, rss_bytes} from the matchers' stats entries."""
    return {m: {"cpu": e.get("cpu"), "rss_bytes": e.get("rss_bytes")}
            for m, e in (await read_matcher_stats(d.store)).items()}
