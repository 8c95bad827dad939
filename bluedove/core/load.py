"""A matcher's load and the arithmetic the forwarding policies and the split planner share.

Pure functions; the caller passes the time. A `LoadReport` is what a matcher says about one
dimension's input queue every report interval: arrival rate λ, matching rate μ (messages
matched per second of matching work), queue length q, the size of its subscription set, and
when the report was taken (`at`, on the dispatcher's clock).

The paper's estimate (§III-B), (q_t + 1)/μ with q_t = q + (λ − μ)(t − t'), treats each
dimension queue as a server of its own. Our matcher matches all its k dimension queues on one
index thread, so a message waits behind the matcher's whole backlog, and a queue extrapolated
at its own μ drains k times too fast on paper: between reports a busy matcher looks idle and
dispatchers herd onto it (docs/reproduction.md, Fig. 7). `backlog` and `matcher_time` apply the
same estimate to the matcher as one server — its queued work W = Σ_j q_j/μ_j grows at
Σ_j λ_j/μ_j − 1 seconds per second, and the message costs 1/μ_i more — which for a matcher
with a single dimension queue is exactly the paper's.
"""


from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# With no measured μ yet (a fresh matcher), estimate the matching cost from the set size:
# roughly this many seconds per subscription searched. Only orders cold candidates.
COLD_COST_PER_SUB_S = 1e-7
COLD_COST_BASE_S = 1e-5


@dataclass(frozen=True)
class LoadReport:
    """What a matcher says about one dimension's input queue every report interval."""

    lam: float = 0.0  # arrivals per second over the last window
    mu: float = 0.0  # messages matched per second of matching work (service rate)
    q: int = 0  # messages waiting in the dimension's input queue
    subs: int = 0  # subscriptions in the dimension's set
    at: float = 0.0  # when the report was taken, dispatcher clock (s)
    matched_total: int = 0  # messages matched since the matcher started (for operators)
    split_at: float = math.nan  # the value halving its recent work inside its segment (for joins)

    @property
    def busy(self) -> float:
        """Busy fraction λ/μ (work in over work out); 0 while nothing arrives."""
        return self.lam / self.mu if self.mu > 0 else (1.0 if self.q else 0.0)


def extrapolated_queue(r: LoadReport, now: float) -> float:
    """The BlueDove paper §III-B, eq. q_t = q_t' + (λ_t' − μ_t')(t − t'), never below zero."""
    return max(0.0, r.q + (r.lam - r.mu) * max(0.0, now - r.at))


def processing_time(r: LoadReport, now: float, extrapolate: bool = True) -> float:
    """The BlueDove paper §III-B: time to process the next message, (q_t + 1) / μ_t'."""
    q = extrapolated_queue(r, now) if extrapolate else float(r.q)
    if r.mu > 0:
        return (q + 1.0) / r.mu
    return (q + 1.0) * (COLD_COST_BASE_S + COLD_COST_PER_SUB_S * r.subs)


def cost(r: LoadReport) -> float:
    """Seconds of matching work one message costs this queue: 1/μ, or the cold estimate."""
    return 1.0 / r.mu if r.mu > 0 else COLD_COST_BASE_S + COLD_COST_PER_SUB_S * r.subs


def backlog(reports: Sequence[LoadReport], now: float, extrapolate: bool = True, sent: float = 0.0) -> float:
    """Seconds of work queued at a matcher that serves all its dimension queues on one thread:
    W = Σ_j q_j/μ_j, extrapolated as W + (Σ_j λ_j/μ_j − 1)(t − t'), never below zero.

    `sent` is the work this dispatcher has itself sent the matcher since the reports: counted
    at once, a dispatcher sees the effect of its own choices instead of herding onto one
    matcher until the next report. Its own traffic is also in λ, so the matcher it feeds looks
    busier than it is by at most its own share of λ over one report interval — a bias towards
    spreading that balanced the simulated cluster better than subtracting its own rate
    (docs/reproduction.md, Fig. 7 and 8)."""
    if not reports:
        return sent
    work, load, at = 0.0, 0.0, reports[0].at  # one pass: this runs for every message forwarded
    for r in reports:
        c = 1.0 / r.mu if r.mu > 0 else COLD_COST_BASE_S + COLD_COST_PER_SUB_S * r.subs
        work += r.q * c
        load += r.lam * c
        if r.at > at:
            at = r.at
    work += sent  # after the sum, as `bluedove.core.forwarding.matcher_loads` adds it: the same bits
    if not extrapolate:
        return work
    return max(0.0, work + (load - 1.0) * max(0.0, now - at))


def matcher_time(r: LoadReport, siblings: Sequence[LoadReport], now: float, extrapolate: bool = True,
                 sent: float = 0.0) -> float:
    """Time to process the next message sent to queue `r` of a matcher whose dimension queues
    (including `r`) are `siblings`: the matcher's backlog, then the message itself."""
    return backlog(siblings, now, extrapolate, sent) + cost(r)
