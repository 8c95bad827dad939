"""Operations: the space, the cluster view, the dashboard, health and readiness, Prometheus metrics."""

from __future__ import annotations

import functools
from pathlib import Path

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from dispatcher import operations as ops
from dispatcher.deps import state

router = APIRouter()


@router.get("/v1/space")
async def get_space(request: Request):
    return state(request).space.to_json()


@router.get("/v1/cluster")
async def get_cluster(request: Request):
    return await ops.cluster_view(state(request))


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
    body = d.metrics.render(d.cluster, d.forwarder.failovers, await d.store.event_counts())
    return Response(body, media_type=CONTENT_TYPE_LATEST)
