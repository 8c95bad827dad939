"""GET /v1/stats: the cluster's last hour, one value per second (docs/api.md, "Operations")."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from bluedove.dispatcher import last_hour
from bluedove.dispatcher.deps import state

router = APIRouter()


@router.get("/v1/stats", response_model=None)
async def get_stats(request: Request) -> dict[str, Any]:
    return await last_hour.stats(state(request), request.query_params.get("since"))
