"""What several operations check: a number in range, a queue's token."""

from __future__ import annotations

from bluedove.core.errors import ApiError, unauthorized
from bluedove.dispatcher.dispatcher import Dispatcher


def check_range(name: str, v: float, lo: float, hi: float) -> float:
    """`v` if lo <= v <= hi, else 422 invalid_parameter naming `name` (NaN fails too)."""
    if not lo <= v <= hi:
        raise ApiError(422, "invalid_parameter", f"{name} must be a number from {lo:g} to {hi:g}", name)
    return v


async def require_queue_token(d: Dispatcher, queue: str, token: str | None) -> None:
    if not await d.store.check_token(queue, token):
        raise unauthorized()
