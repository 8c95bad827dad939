"""GET /v1/stats: the cluster's last hour, one value per second (docs/api.md, "Operations")."""

from __future__ import annotations

from fastapi import APIRouter, Request

from bluedove.dispatcher import last_hour
from bluedove.dispatcher.deps import state

router = APIRouter()


@router.get("/v1/stats")
async def get_stats(request: Request):
    return await last_hour.stats(state(request), request.query_params.get("since"))
