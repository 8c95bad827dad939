"""The operational view: readiness (/readyz, gRPC health) and GET /v1/cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Protocol

from bluedove.core.attributes import STRING, label
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import Space
from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.last_hour import member_stats
from bluedove.dispatcher.view import ClusterView
from bluedove.gossip.messages import DISPATCHER, MATCHER
from bluedove.store.spaces import ACTIVE
from bluedove.v1 import matcher_pb2 as pb

# How long readiness waits for the store to answer a ping.
READY_PING_S = 2.0
# How long GET /v1/cluster?space= waits for a matcher's load in a named space.
REPORT_TIMEOUT_S = 1.0


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


class DimLoad(Protocol):
    """One dimension's load as a matcher reported it (`LoadReport`, or a `Report` reply's dims)."""

    @property
    def lam(self) -> float: ...

    @property
    def mu(self) -> float: ...

    @property
    def q(self) -> int: ...

    @property
    def subs(self) -> int: ...

    @property
    def matched_total(self) -> int: ...


def _member_view(view: ClusterView, table: SegmentTable, m: str, now: float, extra: dict[str, Any],
                 reports: Mapping[tuple[str, int], DimLoad] | None = None) -> dict[str, Any]:
    """Matcher `m` in `table`'s space, its load from `reports` (the cluster view's, the default
    space's, unless given)."""
    names = table.space.names
    loads: Mapping[tuple[str, int], DimLoad] = view.reports if reports is None else reports
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
        "subscriptions": {names[i]: loads[(m, i)].subs for i in range(len(names)) if (m, i) in loads},
        "load": {
            names[i]: {"lambda": round(r.lam, 3), "mu": round(r.mu, 3), "q": r.q, "matched": r.matched_total,
                       "congestion": round(r.lam / r.mu, 6) if r.mu > 0 else None}
            for i in range(len(names)) if (r := loads.get((m, i))) is not None
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


async def cluster_view(d: Dispatcher, space: str = DEFAULT_SPACE) -> dict[str, Any]:
    """GET /v1/cluster: the table's epoch, each member as this dispatcher sees it, the
    dispatchers, the autoscaler with its events, and the spaces' names. With a named `space`:
    that space's schema, table and epoch, each matcher's segments and load in it (asked of each
    owner, `REPORT_TIMEOUT_S` at most), its own events, and with a log its size and replays under
    way; 404 for no such space."""
    view = d.cluster
    path = await d.paths.get(space)
    table = view.table if path.view is None else path.view.current()
    now = time.monotonic()
    members = []
    if table is not None:
        extra = await member_stats(d)  # CPU and RSS, from the matchers' stats entries
        reports = None if path.view is None else await _space_reports(view, table, space)
        members = [_member_view(view, table, m, now, extra.get(m, {}), reports) for m in view.known()]
    events = await d.store.events()
    if path.named:
        events = [e for e in events if e.get("space") == space]
    log = None if not path.retention_s else {"chunks": await d.store.log_entries(space),
                                               "replays": len(await d.store.replays_under_way(space))}
    return {
        "epoch": table.epoch if table else 0,
        "space": path.space.to_json(),
        "space_name": space,
        "spaces": [DEFAULT_SPACE, *sorted(n for n, r in d.registry.records.items()
                                          if r.state == ACTIVE and n != DEFAULT_SPACE)],
        "policy": d.s.policy,
        "partition": d.s.partition,
        "members": members,
        "dispatchers": await _dispatchers(d),
        "autoscaler": {**(await d.store.get_autoscaler() or {"enabled": False, "min": None, "max": None}),
                       "events": events},
        "log": log,  # a named space with a log: its chunks and the replays under way (docs/api.md, "Replay")
    }


async def _space_reports(view: ClusterView, table: SegmentTable, space: str) -> dict[tuple[str, int], DimLoad]:
    """Each owner's load per dimension of named space `space`, as it answers `Report` now (one
    that does not answer in time has none)."""
    async def one(m: str) -> tuple[str, pb.ReportReply]:
        return m, await view.stub(m).Report(pb.ReportRequest(space=space), timeout=REPORT_TIMEOUT_S)

    out: dict[tuple[str, int], DimLoad] = {}
    for r in await asyncio.gather(*(one(m) for m in table.members), return_exceptions=True):
        if not isinstance(r, BaseException):
            out.update(((r[0], i), dim) for i, dim in enumerate(r[1].dims))
    return out
