"""Phi-accrual failure detection on heartbeat arrivals (Hayashibara et al. 2004).

phi(t) = -log10(1 - F(t - last)), where F is the normal distribution fitted to the recent
intervals between new heartbeat versions of a member. phi = 8 means the chance that the
heartbeat is merely late is 1e-8. Pure: time is an argument.
"""

from __future__ import annotations

import math
from collections import deque
from statistics import NormalDist

PHI_MAX = 1000.0  # where 1 - F underflows: certain


def phi(mean_s: float, std_s: float, elapsed_s: float) -> float:
    """Suspicion level after `elapsed_s` without a heartbeat, for intervals ~ N(mean, std)."""
    if elapsed_s <= 0:
        return 0.0
    z = (elapsed_s - mean_s) / (std_s * math.sqrt(2.0))
    tail = 0.5 * math.erfc(z)  # P(interval > elapsed)
    if tail <= 0.0:
        return PHI_MAX
    return min(-math.log10(tail), PHI_MAX)


def z_for(threshold: float) -> float:
    """The z-score at which phi reaches `threshold`: 1 - F(z) = 10^-threshold."""
    return NormalDist().inv_cdf(1.0 - 10.0 ** -threshold) if threshold < 15 else (2 * threshold * math.log(10)) ** 0.5


class ArrivalWindow:
    """The last `size` inter-arrival times of one member's heartbeats."""

    def __init__(self, size: int, min_std_s: float, first_interval_s: float) -> None:
        self.intervals: deque[float] = deque(maxlen=size)
        self.min_std_s = min_std_s
        # Before any interval is seen, assume the gossip interval, so a member that dies
        # right after joining is still detected.
        self.first_interval_s = first_interval_s
        self.last: float | None = None
        self._sum = 0.0
        self._sumsq = 0.0

    def record(self, now: float) -> None:
        if self.last is not None and now > self.last:
            x = now - self.last
            if len(self.intervals) == self.intervals.maxlen:
                old = self.intervals[0]
                self._sum -= old
                self._sumsq -= old * old
            self.intervals.append(x)
            self._sum += x
            self._sumsq += x * x
        self.last = now

    def touch(self, now: float) -> None:
        """Evidence of life other than a heartbeat (an ack): restart the clock, add no sample."""
        self.last = now if self.last is None else max(self.last, now)

    def stats(self) -> tuple[float, float]:
        n = len(self.intervals)
        if n == 0:
            return self.first_interval_s, max(self.first_interval_s / 2, self.min_std_s)
        mean = self._sum / n
        var = max(self._sumsq / n - mean * mean, 0.0)
        return mean, max(math.sqrt(var), self.min_std_s)

    def phi(self, now: float) -> float:
        if self.last is None:
            return 0.0
        mean, std = self.stats()
        return phi(mean, std, now - self.last)

    def suspect_at(self, z: float) -> float:
        """When phi will reach the threshold whose z-score is `z` (see `z_for`), if nothing arrives."""
        if self.last is None:
            return math.inf
        mean, std = self.stats()
        return self.last + mean + z * std
