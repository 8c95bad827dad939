"""The soak bench's two judges, pure (no I/O, time given): resource growth per process, and the
delivery ledger that checks every delivery against a brute-force oracle under churn.

Growth: a series is one process's samples (t, value) (a restarted matcher starts a new series).
The first `warmup` fraction of the run is not judged (a restarted process's series: as long
from its start); of what follows, the median of the first
`window` fraction is compared with the median of the last: growth over `limit` (10 %) fails,
unless the rise is within `slack` absolute units (file descriptors are small counts: 20 -> 23 is
not a leak). A series with fewer than `min_samples` in either window is reported, not judged.

Deliveries: a (message, subscription) pair is *expected* only when the message was published
after the subscription's add returned and its publish returned before the subscription's remove
was sent; a pair in that window but not delivered by the end is *lost*. A pair outside it may or
may not be delivered. Every delivery is also checked geometrically: a delivery naming a
subscription whose box does not hold the message is *wrong*. A message delivered to a queue more
than once is a *duplicate*.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median

import numpy as np

WARMUP = 0.2  # the first 20 % of the run is warm-up
WINDOW = 0.2  # first/last windows: 20 % of the judged span each
LIMIT = 0.10  # growth over 10 % fails
MIN_SAMPLES = 3
SAMPLE = 5  # lost and duplicate deliveries a summary names, to diagnose a failed run


@dataclass
class Verdict:
    """The growth judgement of one series: first and last window medians, and whether it failed."""

    series: str
    metric: str
    first: float | None  # median of the first window after warm-up
    last: float | None  # median of the last window
    growth: float | None  # last / first - 1
    judged: bool
    failed: bool
    reason: str = ""

    def to_json(self) -> dict:
        return {"series": self.series, "metric": self.metric, "first": self.first, "last": self.last,
                "growth": None if self.growth is None else round(self.growth, 4), "judged": self.judged,
                "failed": self.failed, "reason": self.reason}


def judge_series(name: str, metric: str, samples: list[tuple[float, float]], t0: float, t1: float, *,
                 warmup: float = WARMUP, window: float = WINDOW, limit: float = LIMIT, slack: float = 0.0,
                 min_samples: int = MIN_SAMPLES) -> Verdict:
    """One series of one metric over the run [t0, t1] (see the module's docstring). A series
    that begins late (a restarted process) has a warm-up of its own, as long, from its first sample."""
    begin = max(t0, samples[0][0]) if samples else t0
    start = begin + warmup * (t1 - t0)
    judged = [(t, v) for t, v in samples if t >= start]
    if not judged:
        return Verdict(name, metric, None, None, None, False, False, "no sample after warm-up")
    a, b = max(start, judged[0][0]), judged[-1][0]
    w = window * (b - a)
    first = [v for t, v in judged if t <= a + w]
    last = [v for t, v in judged if t >= b - w]
    if len(first) < min_samples or len(last) < min_samples or b - w <= a + w:
        return Verdict(name, metric, None, None, None, False, False,
                       f"too short to judge ({len(judged)} samples after warm-up)")
    m0, m1 = float(median(first)), float(median(last))
    growth = (m1 / m0 - 1.0) if m0 > 0 else (0.0 if m1 <= 0 else float("inf"))
    failed = growth > limit and (m1 - m0) > slack
    reason = (f"{name} {metric} grew {growth:+.1%} ({m0:.0f} -> {m1:.0f}, medians of the first and last "
              f"windows after warm-up; limit {limit:.0%})") if failed else ""
    return Verdict(name, metric, m0, m1, growth, True, failed, reason)


# -- deliveries ----------------------------------------------------------------------------------
@dataclass
class _Sub:
    """A subscription as the oracle sees it: its queue and its box."""

    queue: str
    low: np.ndarray
    high: np.ndarray
    at: float = 0.0  # when its add returned (the run's clock), to diagnose a loss


@dataclass
class Ledger:
    """What was published, subscribed and delivered; the oracle's verdict on it (`summary`)."""

    dims: int
    subs: dict[str, _Sub] = field(default_factory=dict)  # every subscription whose add returned
    live: set[str] = field(default_factory=set)  # add returned, remove not yet sent
    points: dict[str, tuple] = field(default_factory=dict)  # message id -> attributes (in dim order)
    pending: dict[str, set[str]] = field(default_factory=dict)  # subscription -> expected message ids not seen
    expected: int = 0
    published: int = 0
    failed_messages: int = 0
    deliveries: int = 0
    duplicates: int = 0
    wrong: int = 0
    unknown: int = 0  # deliveries naming a subscription or message this run never saw (add or publish failed)
    duplicate_sample: list[dict] = field(default_factory=list)  # the first SAMPLE duplicates, to diagnose
    _seen: set[tuple[str, str]] = field(default_factory=set)  # (message, queue)
    # message -> subscriptions it reached, for messages delivered before their publish returned
    _early: dict[str, set[str]] = field(default_factory=dict)
    _deferred: list[tuple[str, str]] = field(default_factory=list)  # (message, subscription) to check later
    published_at: dict[str, float] = field(default_factory=dict)  # message id -> when its publish returned

    def added(self, sub_id: str, queue: str, low, high, at: float = 0.0) -> None:
        """A subscription's add returned (at `at` on the run's clock): from now on, what is
        published matches it for sure."""
        self.subs[sub_id] = _Sub(queue, np.asarray(low, float), np.asarray(high, float), at)
        self.live.add(sub_id)
        self.pending.setdefault(sub_id, set())

    def removing(self, sub_id: str) -> None:
        """Call just before the remove is sent: from now on it may or may not match."""
        self.live.discard(sub_id)

    def snapshot(self) -> frozenset[str]:
        """Before a publish is sent: the subscriptions live now."""
        return frozenset(self.live)

    def published_batch(self, before: frozenset[str], ids: list[str], points: np.ndarray,
                        at: float = 0.0) -> None:
        """A publish returned (at `at`): its messages must reach every subscription live both
        before it was sent and now (brute force over those boxes)."""
        self.published += len(ids)
        for mid in ids:
            self.published_at[mid] = at
        early = [self._note(mid, p) for mid, p in zip(ids, points.tolist())]
        certain = [s for s in before if s in self.live]
        if not certain or not ids:
            return
        low = np.stack([self.subs[s].low for s in certain])
        high = np.stack([self.subs[s].high for s in certain])
        hit = ((points[:, None, :] >= low[None]) & (points[:, None, :] < high[None])).all(axis=2)
        for i, j in zip(*np.nonzero(hit)):
            self.expected += 1
            if certain[j] not in early[i]:
                self.pending[certain[j]].add(ids[i])

    def _note(self, mid: str, point: list) -> set[str]:
        """Remember a message's attributes; the subscriptions it reached before this (if any)."""
        self.points[mid] = tuple(point)
        return self._early.pop(mid, set())

    def failed_batch(self, ids: list[str], points: np.ndarray) -> None:
        """A publish that failed: its messages may or may not be delivered (none is expected)."""
        self.failed_messages += len(ids)
        for mid, p in zip(ids, points.tolist()):
            self._note(mid, p)

    def delivered(self, msg_id: str, queue: str, sub_ids: list[str]) -> None:
        self.deliveries += 1
        if (msg_id, queue) in self._seen:
            self.duplicates += 1
            if len(self.duplicate_sample) < SAMPLE:
                self.duplicate_sample.append({"message": msg_id, "queue": queue, "subscriptions": sub_ids})
            return
        self._seen.add((msg_id, queue))
        if msg_id not in self.points:  # its publish has not returned yet
            self._early.setdefault(msg_id, set()).update(sub_ids)
        for s in sub_ids:
            self.pending.get(s, set()).discard(msg_id)
            self._deferred.append((msg_id, s))

    def pending_in(self, queue: str) -> int:
        """Expected deliveries to `queue` not seen yet."""
        return sum(len(m) for s, m in self.pending.items() if self.subs[s].queue == queue)

    def lost(self) -> int:
        return sum(len(m) for m in self.pending.values())

    def check_deferred(self) -> None:
        """The geometric check of every delivery seen so far (its subscription's add may have
        returned after the delivery arrived, hence deferred)."""
        for mid, s in self._deferred:
            sub, p = self.subs.get(s), self.points.get(mid)
            if sub is None or p is None:
                self.unknown += 1
                continue
            pt = np.asarray(p)
            if not (np.all(pt >= sub.low) and np.all(pt < sub.high)):
                self.wrong += 1
        self._deferred.clear()

    def summary(self) -> dict:
        self.check_deferred()
        lost = [{"message": m, "subscription": s, "queue": self.subs[s].queue,
                 "subscribed_at_s": round(self.subs[s].at, 2),
                 "published_at_s": round(self.published_at.get(m, 0.0), 2)}
                for s, ms in self.pending.items() for m in sorted(ms)][:SAMPLE]
        return {"published": self.published, "failed_messages": self.failed_messages, "expected": self.expected,
                "deliveries": self.deliveries, "lost": self.lost(), "duplicates": self.duplicates,
                "wrong": self.wrong, "unknown": self.unknown,
                **({"lost_sample": lost} if lost else {}),
                **({"duplicate_sample": self.duplicate_sample} if self.duplicate_sample else {})}


def failures(verdicts: list[Verdict], deliveries: dict) -> list[str]:
    """Why the soak fails (empty: it passes)."""
    out = [v.reason for v in verdicts if v.failed]
    if deliveries["lost"]:
        out.append(f"{deliveries['lost']} expected deliveries lost (of {deliveries['expected']})")
    if deliveries["duplicates"]:
        out.append(f"{deliveries['duplicates']} duplicate deliveries")
    if deliveries["wrong"]:
        out.append(f"{deliveries['wrong']} deliveries to a subscription that does not match the message")
    return out
