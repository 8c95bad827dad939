"""Operations: the space, the cluster view, the dashboard, health and readiness, Prometheus metrics."""

from __future__ import annotations

import functools
import time
from pathlib import Path

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dispatcher import operations as ops
from dispatcher.deps import state

router = APIRouter()


@router.get("/v1/space")
async def get_space(request: Request):
    return state(request).space.to_json()


@router.get("/v1/cluster")
async def get_cluster(request: Request):
    d = state(request)
    view = d.cluster
    table = view.table
    now = time.monotonic()
    members = []
    if table is not None:
        names = table.space.names
        for m in view.known():
            segs = table.segments_of(m)
            g = view.gossip.get(m)
            members.append({
                "id": m,
                "address": view.address(m),
                "status": view.status(m, now),
                "generation": g.generation if g else None,
                # An alive member that owns no segment (restarted after a takeover) is idle
                # until a split gives it some.
                "idle": not segs,
                "segments": {names[i]: [lo, hi] for i, (lo, hi) in sorted(segs.items())},
                "subscriptions": {names[i]: view.reports[(m, i)].subs for i in range(len(names)) if (m, i) in view.reports},
                "load": {
                    names[i]: {"lambda": round(r.lam, 3), "mu": round(r.mu, 3), "q": r.q, "matched": r.matched_total}
                    for i in range(len(names)) if (r := view.reports.get((m, i))) is not None
                },
            })
    return {
        "epoch": table.epoch if table else 0,
        "space": d.space.to_json(),
        "policy": d.s.policy,
        "partition": d.s.partition,
        "members": members,
        "dispatchers": await d.store.dispatchers(),
        "autoscaler": {**(await d.store.get_autoscaler() or {"enabled": False, "min": None, "max": None}),
                       "events": await d.store.events()},
    }


@functools.cache
def dashboard_page() -> str:
    return (Path(__file__).resolve().parent.parent / "static" / "dashboard.html").read_text(encoding="utf-8")


@router.get("/dashboard", response_class=HTMLResponse)
async def dashboard():
    """The live cluster page: it reads GET /v1/cluster once a second."""
    return HTMLResponse(dashboard_page())


@router.get("/healthz")
async def healthz():
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request):
    d = state(request)
    problems = await ops.readiness(d)
    if problems:
        return JSONResponse({"status": "not ready", "problems": problems}, status_code=503)
    return {"status": "ready", "epoch": d.cluster.table.epoch}


@router.get("/metrics")
async def metrics(request: Request):
    d = state(request)
    d.metrics.refresh(d.cluster, d.forwarder.failovers, await d.store.event_counts())
    return Response(generate_latest(d.metrics.registry), media_type=CONTENT_TYPE_LATEST)
