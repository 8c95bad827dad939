"""Rate limits per key and per space: token buckets for messages and bytes per second
(docs/api.md, "API keys" and "Spaces").

Pure: time is an argument. A bucket holds up to `burst` tokens and gains `rate` per second.
A request of n is admitted when the bucket holds min(n, burst) tokens, and then takes n, which
may leave it below zero: a batch larger than the burst passes when the bucket is full and the
requests after it wait until the debt is paid, so the average rate holds whatever the batch
size. A request refused takes nothing. `KeyLimit` ties a key's two buckets together: both admit
or neither takes anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class Bucket:
    """One token bucket: its rate and burst, and the tokens it held when last counted."""

    rate: float  # tokens per second, > 0
    burst: float  # most tokens held, > 0
    tokens: float
    at: float  # when `tokens` was counted

    @classmethod
    def full(cls, rate: float, burst: float, now: float) -> "Bucket":
        burst = burst or rate
        return cls(rate, burst, burst, now)

    def _level(self, now: float) -> float:
        level = self.tokens + (now - self.at) * self.rate if now > self.at else self.tokens
        return level if level < self.burst else self.burst

    def wait(self, n: float, now: float) -> float:
        """Seconds until a request of n would be admitted; 0 = now."""
        need = n if n < self.burst else self.burst
        level = self._level(now)
        return 0.0 if level >= need else (need - level) / self.rate

    def take(self, n: float, now: float) -> None:
        self.tokens, self.at = self._level(now) - n, now

    def scale(self, factor: float, now: float) -> None:
        """Rate, burst and what it holds times `factor` (the dispatcher's share changed)."""
        self.tokens, self.at = self._level(now) * factor, now
        self.rate *= factor
        self.burst *= factor


class KeyLimit:
    """A key's (or a space's) limits on one dispatcher: `share` of its rates and bursts (1/N
    with N dispatchers). A rate of 0 is no limit."""

    __slots__ = ("share", "msgs", "bytes")

    def __init__(self, rate_msgs: float, rate_bytes: float, burst_msgs: float, burst_bytes: float,
                 now: float, share: float = 1.0) -> None:
        self.share = share
        self.msgs = Bucket.full(rate_msgs * share, burst_msgs * share, now) if rate_msgs > 0 else None
        self.bytes = Bucket.full(rate_bytes * share, burst_bytes * share, now) if rate_bytes > 0 else None

    def set_share(self, share: float, now: float) -> None:
        if share == self.share:
            return
        for bucket in (self.msgs, self.bytes):
            if bucket is not None:
                bucket.scale(share / self.share, now)
        self.share = share

    def admit(self, n_msgs: int, n_bytes: int, now: float) -> float:
        """0 when admitted (both buckets take their share); else the seconds to wait, and
        nothing is taken."""
        wait = self.wait(n_msgs, n_bytes, now)
        if wait > 0:
            return wait
        self.take(n_msgs, n_bytes, now)
        return 0.0

    def wait(self, n_msgs: int, n_bytes: int, now: float) -> float:
        """The seconds until both buckets would admit the request (0: now); takes nothing."""
        msgs, bytes_ = self.msgs, self.bytes
        wait = msgs.wait(n_msgs, now) if msgs is not None else 0.0
        if bytes_ is not None:
            wait = max(wait, bytes_.wait(n_bytes, now))
        return wait

    def take(self, n_msgs: int, n_bytes: int, now: float) -> None:
        if self.msgs is not None:
            self.msgs.take(n_msgs, now)
        if self.bytes is not None:
            self.bytes.take(n_bytes, now)


def retry_after(wait_s: float) -> int:
    """The Retry-After header's value: whole seconds, at least 1."""
    return max(1, math.ceil(wait_s))
