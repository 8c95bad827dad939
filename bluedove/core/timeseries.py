"""The cluster's last hour, one record per second: what each record holds and how `/v1/stats`
reads it. Pure: no I/O, time is an argument.

A record is the store hash `bd:ts:<unix second>` (bluedove/store/series.py). Every process adds
to it once a second: counts (published, delivered, redelivered, and the publish latency as
counts per fixed bucket) are added with HINCRBY, so the dispatchers' and matchers' parts sum;
gauges (queue depth, matcher counts, the autoscaler's input and thresholds) are set with HSET.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence

import numpy as np

# Counts, summed over processes.
PUBLISHED = "published"
DELIVERED = "delivered"
REDELIVERED = "redelivered"
COUNTS = (PUBLISHED, DELIVERED, REDELIVERED)
# Gauges, the last value set in the second.
GAUGES = ("undelivered", "unacked", "matchers_actual", "matchers_desired", "autoscaler_input",
          "autoscaler_out", "autoscaler_in")
# The series of /v1/stats, in the contract's order.
SERIES = ("published", "delivered", "redelivered", "latency_p50_s", "latency_p99_s", "answered_p50_s",
          "answered_p99_s", *GAUGES)

# Publish latency (accepted -> every delivery stored) bucket upper bounds, seconds: about four
# per factor of ten from 0.25 ms to 30 s; a last bucket takes everything above. A quantile is
# read to within its bucket (linear inside it), about ±30 %.
LATENCY_BOUNDS_S: tuple[float, ...] = (
    0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03,
    0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0)
LATENCY_FIELDS = tuple(f"lat{i}" for i in range(len(LATENCY_BOUNDS_S) + 1))
# The next hop, stored -> answered, in the same buckets: of each poll or Listen answer that hands
# out new deliveries, the time its oldest new delivery waited in the queue (its stream entry's
# time to the answer). For a subscriber parked on a long poll, the wake-up and answer.
ANSWERED_FIELDS = tuple(f"ans{i}" for i in range(len(LATENCY_BOUNDS_S) + 1))

WINDOW_S = 3600  # what /v1/stats can reach back to
KEY_TTL_S = 3700  # a record's lifetime in the store: the window and a margin
DEFAULT_SINCE_S = 600
# A second is read once it ended this long ago: each process writes the second just ended a
# few tens of ms after it ends, so a second read earlier could still be missing parts.
SETTLE_S = 0.5

DENSITY_BINS = 64


def latency_field(seconds: float) -> str:
    """The record field counting a publish that took `seconds`."""
    return LATENCY_FIELDS[bisect.bisect_left(LATENCY_BOUNDS_S, seconds)]


def answered_field(seconds: float) -> str:
    """The record field counting an answer whose oldest new delivery waited `seconds`."""
    return ANSWERED_FIELDS[bisect.bisect_left(LATENCY_BOUNDS_S, seconds)]


def quantile(counts: Sequence[float], q: float) -> float | None:
    """The q-quantile (0 < q < 1) of a latency histogram (counts per LATENCY_FIELDS bucket),
    linear inside its bucket; None for an empty one. The open last bucket reads as its floor."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0.0
    for i, c in enumerate(counts):
        if c > 0 and seen + c >= rank:
            lo = LATENCY_BOUNDS_S[i - 1] if i > 0 else 0.0
            if i >= len(LATENCY_BOUNDS_S):
                return lo
            return lo + (LATENCY_BOUNDS_S[i] - lo) * (rank - seen) / c
        seen += c
    return LATENCY_BOUNDS_S[-1]


def _num(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        v = float(raw)
    except ValueError:
        return None
    if not math.isfinite(v):
        return None
    return int(v) if v.is_integer() else v


def seconds_between(since: float, now: float) -> list[int]:
    """The whole seconds t with since < t and t + 1 + SETTLE_S <= now (ended and settled)."""
    first = math.floor(since) + 1
    last = math.floor(now - 1 - SETTLE_S)
    return list(range(first, last + 1))


def assemble(seconds: Sequence[int], records: Sequence[Mapping[str, str]]) -> dict[str, list[float | None]]:
    """`/v1/stats`'s "series": parallel arrays over `seconds`, from each second's record (the
    raw hash, {} when none). A count or gauge nobody wrote that second is None (a gap)."""
    out: dict[str, list[float | None]] = {"t": list(seconds), **{name: [] for name in SERIES}}
    for rec in records:
        for name in COUNTS + GAUGES:
            out[name].append(_num(rec.get(name)))
        for fields, p50, p99 in ((LATENCY_FIELDS, "latency_p50_s", "latency_p99_s"),
                                 (ANSWERED_FIELDS, "answered_p50_s", "answered_p99_s")):
            hist = [float(rec.get(f, 0) or 0) for f in fields]
            for name, q in ((p50, 0.5), (p99, 0.99)):
                v = quantile(hist, q)
                out[name].append(None if v is None else round(v, 6))
    return out


def clamp_since(since: float | None, now: float) -> float:
    """`since` as /v1/stats takes it: default now - 600, within [now - 3600, now]."""
    if since is None:
        return now - DEFAULT_SINCE_S
    return min(max(since, now - WINDOW_S), now)


# -- density ---------------------------------------------------------------------------------
def bin_counts(points: np.ndarray, lows: np.ndarray, highs: np.ndarray,
               bins: int = DENSITY_BINS) -> list[list[int]]:
    """Per dimension, how many of `points` (one row each) fall in each equal-width bin of
    [low, high) (values outside are clipped to the end bins)."""
    at = np.clip(((points - lows) * bins / (highs - lows)).astype(np.int64), 0, bins - 1)
    return [np.bincount(at[:, i], minlength=bins).tolist() for i in range(points.shape[1])]


def bin_centres(lo: float, hi: float, bins: int = DENSITY_BINS) -> list[float]:
    w = (hi - lo) / bins
    return [lo + (j + 0.5) * w for j in range(bins)]


def owned_bins(seg_lo: float, seg_hi: float, lo: float, hi: float, bins: int = DENSITY_BINS) -> list[int]:
    """The bins whose centre lies in the segment [seg_lo, seg_hi): under mPartition every
    centre has exactly one owner, so coverage counted by owners sums exactly."""
    return [j for j, c in enumerate(bin_centres(lo, hi, bins)) if seg_lo <= c < seg_hi]


class DecayedRate:
    """Events per second per bin, decayed exponentially with time constant `tau_s` (a recent
    rate that needs no window of buckets): add n at t, read at t' >= t."""

    def __init__(self, bins: int = DENSITY_BINS, tau_s: float = 10.0) -> None:
        self.tau_s = tau_s
        self.mass = [0.0] * bins
        self.at: float | None = None

    def _decay(self, now: float) -> None:
        if self.at is not None and now > self.at:
            f = math.exp(-(now - self.at) / self.tau_s)
            self.mass = [m * f for m in self.mass]
        if self.at is None or now > self.at:
            self.at = now

    def add(self, counts: Mapping[int, int], now: float) -> None:
        self._decay(now)
        for j, n in counts.items():
            self.mass[j] += n

    def rates(self, now: float) -> list[float]:
        self._decay(now)
        return [m / self.tau_s for m in self.mass]


def sum_lists(lists: Sequence[Sequence[float | None]], n: int) -> list[float | None]:
    """Element-wise sum; an element no list reports (None in all) stays None."""
    out: list[float | None] = [None] * n
    for xs in lists:
        for j, v in enumerate(xs[:n]):
            if v is not None:
                out[j] = (out[j] or 0) + v
    return out
