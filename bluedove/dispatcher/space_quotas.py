"""A named space's quotas on one dispatcher (docs/api.md, "Spaces"): messages and request bytes
per second, and subscriptions.

The rates are token buckets (bluedove/dispatcher/ratelimit.py) holding this dispatcher's share
of each, 1/N with N the dispatchers registered in the store (the dispatcher's `share`, re-read
with its heartbeat every 3 s), with one second's worth of burst: a publisher whose requests
spread over the dispatchers gets the quota in all. A publish over it is a 429 `quota_exceeded`
naming the quota (`quotas.messages_per_s`, `quotas.bytes_per_s`) with `Retry-After`, taking
nothing (from the space's buckets nor from the API key's).

The subscriptions quota is checked against the space's count of subscriptions in the store,
read at most once a second (one pipelined call): subscribes racing within that second may pass
it by what they add together; a subscribe that would take the count over is a 429 naming
`quotas.subscriptions`, storing nothing.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from bluedove.core.errors import ApiError
from bluedove.core.spaces import Quotas
from bluedove.dispatcher.ratelimit import KeyLimit, retry_after

COUNT_FRESH_S = 1.0  # how old a count of the space's subscriptions may be when a subscribe is checked


def over_quota(name: str, field: str, message: str, wait_s: float | None = None) -> ApiError:
    headers = {"Retry-After": str(retry_after(wait_s))} if wait_s is not None else None
    return ApiError(429, "quota_exceeded", f"space {name!r} is over its quota: {message}", field, headers=headers)


class SpaceQuotas:
    """One space's quotas as this dispatcher enforces them."""

    def __init__(self, name: str, quotas: Quotas, count: Callable[[], Awaitable[int]],
                 refused: Callable[[str], None] | None = None) -> None:
        self.name, self.quotas = name, quotas
        self._refused = refused  # told the quota (`messages_per_s`, …) of each refusal: the metrics
        now = time.monotonic()
        rate_m, rate_b = quotas.messages_per_s or 0.0, quotas.bytes_per_s or 0.0
        self.rates = KeyLimit(rate_m, rate_b, rate_m, rate_b, now) if rate_m or rate_b else None
        self._count = count  # the space's subscriptions in the store
        self._counted: tuple[int, float] | None = None  # (count, when)

    def check(self, n_msgs: int, n_bytes: int, share: float) -> None:
        """429 unless this dispatcher's share of the rates admits the request; takes nothing."""
        if self.rates is None:
            return
        now = time.monotonic()
        self.rates.set_share(share, now)
        wait = self.rates.wait(n_msgs, n_bytes, now)
        if wait <= 0:
            return
        msgs = self.rates.msgs
        if msgs is not None and msgs.wait(n_msgs, now) > 0:
            self._count_refusal("messages_per_s")
            raise over_quota(self.name, "quotas.messages_per_s", f"{self.quotas.messages_per_s:g} messages/s", wait)
        self._count_refusal("bytes_per_s")
        raise over_quota(self.name, "quotas.bytes_per_s", f"{self.quotas.bytes_per_s:g} bytes/s", wait)

    def _count_refusal(self, quota: str) -> None:
        if self._refused is not None:
            self._refused(quota)

    def take(self, n_msgs: int, n_bytes: int) -> None:
        if self.rates is not None:
            self.rates.take(n_msgs, n_bytes, time.monotonic())

    async def check_subscriptions(self, adding: int) -> None:
        """429 if `adding` more subscriptions would take the space over its quota."""
        most = self.quotas.subscriptions
        if most is None:
            return
        now = time.monotonic()
        if self._counted is None or now - self._counted[1] > COUNT_FRESH_S:
            self._counted = (await self._count(), now)
        count = self._counted[0]
        if count + adding > most:
            self._count_refusal("subscriptions")
            raise over_quota(self.name, "quotas.subscriptions", f"{most} subscriptions (it holds {count})")
        self._counted = (count + adding, self._counted[1])  # this dispatcher's own, counted at once
