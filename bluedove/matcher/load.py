"""Per-dimension load statistics over a sliding window (the paper's §III-B: λ, μ, q).

λ is arrivals per second over the last `window_s`; μ is messages processed per second of
the work the caller counts (a service rate, so an idle matcher still reports how fast it
*can* work): the matching, for forwarding, or the matcher's whole work on the messages (its
CPU over a batch's path, `apportion` sharing a batch's among its dimensions), for the
autoscaler (bluedove/matcher/queues.py); q is the current queue length, kept by the caller.
Time is an argument.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass
class _Bucket:
    """One time bucket of a dimension's window: arrivals, messages processed, seconds of work."""

    start: float
    arrived: int = 0
    processed: int = 0
    busy_s: float = 0.0


class WindowStats:
    """One dimension's arrivals and the work on them in time buckets: λ and μ over the window."""

    def __init__(self, window_s: float = 5.0, bucket_s: float = 0.5) -> None:
        self.window_s = window_s
        self.bucket_s = bucket_s
        self._buckets: deque[_Bucket] = deque()
        self._last_mu = 0.0
        self.total_arrived = 0
        self.total_processed = 0

    def _bucket(self, now: float) -> _Bucket:
        if not self._buckets or now - self._buckets[-1].start >= self.bucket_s:
            self._buckets.append(_Bucket(now))
        while self._buckets and now - self._buckets[0].start > self.window_s + self.bucket_s:
            self._buckets.popleft()
        return self._buckets[-1]

    def arrived(self, n: int, now: float) -> None:
        self._bucket(now).arrived += n
        self.total_arrived += n

    def processed(self, n: int, busy_s: float, now: float) -> None:
        b = self._bucket(now)
        b.processed += n
        b.busy_s += busy_s
        self.total_processed += n

    def rates(self, now: float) -> tuple[float, float]:
        """(λ, μ) over the window ending at `now`."""
        self._bucket(now)
        live = [b for b in self._buckets if now - b.start <= self.window_s]
        span = max(min(self.window_s, now - live[0].start) if live else self.window_s, self.bucket_s)
        arrived = sum(b.arrived for b in live)
        processed = sum(b.processed for b in live)
        busy = sum(b.busy_s for b in live)
        if processed and busy > 0:
            self._last_mu = processed / busy
        return arrived / span, self._last_mu


def apportion(cpu_s: float, messages: dict[int, int], walk_s: dict[int, float]) -> dict[int, float]:
    """A batch's work `cpu_s` shared among its dimensions (`messages`: each one's messages in the
    batch): each first gets its own index walk (`walk_s`, the index thread's CPU in it), the rest
    goes by share of the messages (decoding, the gRPC call, the deliveries' writes cost about
    the same per message whatever its dimension). The shares add up to `cpu_s`. Batches overlap
    (the next is matched while one is stored), so a batch's `cpu_s` may hold part of the next
    one's walk and fall short of its own: then the walks are scaled down to fit."""
    n = sum(messages.values())
    if n <= 0 or cpu_s <= 0:
        return {d: 0.0 for d in messages}
    walks = {d: max(0.0, walk_s.get(d, 0.0)) for d in messages}
    walked = sum(walks.values())
    scale = min(1.0, cpu_s / walked) if walked > 0 else 0.0
    rest = cpu_s - walked * scale
    return {d: walks[d] * scale + rest * m / n for d, m in messages.items()}


# Upper bounds of the batch-size histogram (messages per batch; the last is +Inf).
BATCH_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


class Totals:
    """Since the matcher started: per dimension, subscription matches found and deliveries
    asked of the store; deliveries the store wrote (fewer: a message seen before writes
    nothing again); batches by size. Read by bluedove/matcher/metrics.py."""

    def __init__(self, k: int) -> None:
        self.matches = [0] * k
        self.deliveries = [0] * k
        # CPU seconds of the index thread inside each set's walk (SubscriptionSet.match_ids),
        # by thread time: what the matcher spends outside it is its cost beside the kernel's
        # (`bench e2e`, docs/benchmarks.md)
        self.walk_cpu_s = [0.0] * k
        self.written = 0
        self.batches = [0] * (len(BATCH_BOUNDS) + 1)  # per bound, then above the last
        self.batch_messages = 0

    def walked(self, cpu_s: dict[int, float]) -> None:
        for dim, s in cpu_s.items():
            self.walk_cpu_s[dim] += s

    def batch(self, n: int, written: int) -> None:
        self.written += written
        self.batch_messages += n
        self.batches[next((i for i, b in enumerate(BATCH_BOUNDS) if n <= b), len(BATCH_BOUNDS))] += 1


# Per-message matching work in units of one match: the fixed cost of a message is about that
# of 25 matches (bluedove sim calibrate: ~20 µs per message against ~0.8 µs per match).
MESSAGE_WORK = 25.0


class ValueSample:
    """The recent values of one dimension's matched messages, each weighted by its work
    (MESSAGE_WORK + matches): where this matcher's load lies inside its segment."""

    def __init__(self, capacity: int = 4096) -> None:
        # Made at the first value: a matcher holds one per dimension of every space it serves,
        # and an idle space's would cost 64 KiB each for nothing.
        self.capacity = capacity
        self.values = self.weights = np.zeros(0)
        self._n = 0  # values seen; the ring holds the last `capacity`

    def add(self, values: np.ndarray, matches: np.ndarray) -> None:
        cap = self.capacity
        if not len(self.values):
            self.values, self.weights = np.zeros(cap), np.zeros(cap)
        values, w = values[-cap:], MESSAGE_WORK + matches[-cap:]
        idx = (self._n + np.arange(len(values))) % cap
        self.values[idx], self.weights[idx] = values, w
        self._n += len(values)

    def load_median(self, lo: float, hi: float) -> float:
        """The value that halves the sampled work inside [lo, hi); NaN with too few samples."""
        n = min(self._n, len(self.values))
        v, w = self.values[:n], self.weights[:n]
        inside = (v >= lo) & (v < hi)
        if inside.sum() < 32:
            return float("nan")
        v, w = v[inside], w[inside]
        order = np.argsort(v, kind="stable")
        v, cum = v[order], np.cumsum(w[order])
        at = float(v[np.searchsorted(cum, cum[-1] / 2)])
        return at if lo < at < hi else float("nan")
