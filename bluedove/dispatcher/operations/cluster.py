"""The operational view: readiness (/readyz, gRPC health) and GET /v1/cluster."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bluedove.core.attributes import STRING, label
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import Space
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.last_hour import member_stats
from bluedove.dispatcher.view import ClusterView
from bluedove.gossip.messages import DISPATCHER, MATCHER

# How long readiness waits for the store to answer a ping.
READY_PING_S = 2.0


async def readiness(d: Dispatcher) -> list[str]:
    """What keeps the dispatcher from serving, none when ready: it needs a segment table and the
    store. /readyz and gRPC health (SERVING while ready) both ask this, each time."""
    problems: list[str] = []
    if d.cluster.table is None:
        problems.append("no segment table")
    try:
        await asyncio.wait_for(d.store.ping(), READY_PING_S)
    except Exception as exc:  # noqa: BLE001 - reported
        problems.append(f"store unreachable: {exc or type(exc).__name__}")
    return problems


def _member_view(view: ClusterView, table: SegmentTable, m: str, now: float, extra: dict[str, Any]) -> dict[str, Any]:
    names = table.space.names
    segs = table.segments_of(m)
    g = view.gossip.get(m)
    return {
        "id": m,
        "role": MATCHER,
        "address": view.address(m),
        "status": view.status(m, now),
        "generation": g.generation if g else None,
        # An alive member that owns no segment (restarted after a takeover) is idle
        # until a split gives it some.
        "idle": not segs,
        "segments": {names[i]: [lo, hi] for i, (lo, hi) in sorted(segs.items())},
        "labels": _labels(table.space, segs),
        "subscriptions": {names[i]: view.reports[(m, i)].subs for i in range(len(names)) if (m, i) in view.reports},
        "load": {
            names[i]: {"lambda": round(r.lam, 3), "mu": round(r.mu, 3), "q": r.q, "matched": r.matched_total,
                       "congestion": round(r.lam / r.mu, 6) if r.mu > 0 else None}
            for i in range(len(names)) if (r := view.reports.get((m, i))) is not None
        },
        "cpu": extra.get("cpu"),  # from the matcher's stats entry in the store (bluedove/matcher/series.py)
        "cpu_limit": _cpu_limit(view.cpu_limits.get(m)),
        "rss_bytes": extra.get("rss_bytes"),
    }


def _cpu_limit(reported: tuple[float, float, float] | None) -> dict[str, float] | None:
    """A matcher's CPU limit as its last load report gave it (bluedove/runtime/cpu_limit.py), or
    None: no limit known (none set, or no report yet)."""
    if reported is None or reported[0] <= 0:
        return None
    cores, used, throttled = reported
    return {"cores": round(cores, 4), "used": round(used, 4), "throttled": round(throttled, 4)}


def _labels(space: Space, segs: dict[int, tuple[float, float]]) -> dict[str, list[str | None]]:
    """The segments' ends on string dimensions as text (bluedove/core/attributes.py `label`; null:
    the dimension's end); a number's or a boolean's segments have none."""
    return {space.names[i]: [label(lo), label(hi)] for i, (lo, hi) in sorted(segs.items())
            if space.by_name[space.names[i]].type == STRING}


async def _dispatchers(d: Dispatcher) -> list[dict[str, Any]]:
    """Every dispatcher gossip or the store knows of: its status and gossip address as gossip
    sees it, its HTTP address, table epoch and adoption time as it registered them."""
    registered = {r["id"]: r for r in await d.store.dispatchers()}
    gossip = d.cluster.dispatchers
    out = []
    for i in sorted(set(registered) | set(gossip)):
        r, g = registered.get(i, {}), gossip.get(i)
        out.append({"id": i, "role": DISPATCHER, "address": r.get("address"),
                    "gossip_address": g.address if g else None, "status": g.status if g else None,
                    "generation": g.generation if g else None, "epoch": r.get("epoch"),
                    "adopted_at": r.get("adopted_at")})
    return out


async def cluster_view(d: Dispatcher) -> dict[str, Any]:
    """GET /v1/cluster: the table's epoch, each member as this dispatcher sees it, the
    dispatchers, and the autoscaler with its events."""
    view = d.cluster
    table = view.table
    now = time.monotonic()
    members = []
    if table is not None:
        extra = await member_stats(d)  # CPU and RSS, from the matchers' stats entries
        members = [_member_view(view, table, m, now, extra.get(m, {})) for m in view.known()]
    return {
        "epoch": table.epoch if table else 0,
        "space": d.space.to_json(),
        "policy": d.s.policy,
        "partition": d.s.partition,
        "members": members,
        "dispatchers": await _dispatchers(d),
        "autoscaler": {**(await d.store.get_autoscaler() or {"enabled": False, "min": None, "max": None}),
                       "events": await d.store.events()},
    }
