"""Operations: the space, the cluster view, the dashboard, health and readiness, Prometheus metrics."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.dispatcher import operations as ops
from bluedove.dispatcher.deps import state

router = APIRouter()


@router.get("/v1/space", response_model=None)
async def get_space(request: Request) -> dict[str, Any]:
    """The space's attributes and partition, and its `dimensions` for older clients."""
    return state(request).space.api_json()


@router.get("/v1/cluster", response_model=None)
async def get_cluster(request: Request, space: str = DEFAULT_SPACE) -> dict[str, Any]:
    """The cluster as this dispatcher sees it; `?space=` shows a named space's table and load."""
    return await ops.cluster_view(state(request), space)


# The dashboard's files (dispatcher/static, shipped in the package): only these are served.
DASHBOARD_ASSETS = {"dashboard.js": "text/javascript", "charts.js": "text/javascript", "dashboard.css": "text/css"}


@functools.cache
def static_file(name: str) -> str:
    return (Path(__file__).resolve().parent.parent / "static" / name).read_text(encoding="utf-8")


@router.get("/dashboard", response_class=HTMLResponse)
async def dashboard() -> HTMLResponse:
    """The live cluster page: it reads GET /v1/cluster and GET /v1/stats once a second."""
    return HTMLResponse(static_file("dashboard.html"))


@router.get("/dashboard/{name}", include_in_schema=False)
async def dashboard_asset(name: str) -> Response:
    """The page's script and style."""
    if name not in DASHBOARD_ASSETS:
        return JSONResponse({"error": {"code": "not_found", "message": f"no dashboard file {name}", "field": "name"}},
                            status_code=404)
    return Response(static_file(name), media_type=DASHBOARD_ASSETS[name])


@router.get("/healthz", response_model=None)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
async def readyz(request: Request) -> dict[str, Any] | JSONResponse:
    d = state(request)
    problems = await ops.readiness(d)
    if problems:
        return JSONResponse({"status": "not ready", "problems": problems}, status_code=503)
    table = d.cluster.table
    assert table is not None  # readiness found one, and a table once adopted is never dropped
    return {"status": "ready", "epoch": table.epoch}


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    d = state(request)
    body = d.metrics.render(d.cluster, d.forwarder.counts(), await d.store.event_counts())
    return Response(body, media_type=CONTENT_TYPE_LATEST)
