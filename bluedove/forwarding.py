"""Performance-aware forwarding (seed 001 §III-B): pick one of a message's candidate matchers.

Pure functions; the caller passes the time. A `LoadReport` is what a matcher says about one
dimension's input queue every report interval: arrival rate λ, matching rate μ (messages
matched per second of matching work), queue length q, the size of its subscription set, and
when the report was taken (`at`, on the dispatcher's clock).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

POLICIES = ("adaptive", "response-time", "subscription-count", "random")

# With no measured μ yet (a fresh matcher), estimate the matching cost from the set size:
# roughly this many seconds per subscription searched. Only orders cold candidates.
COLD_COST_PER_SUB_S = 1e-7
COLD_COST_BASE_S = 1e-5


@dataclass(frozen=True)
class LoadReport:
    lam: float = 0.0  # arrivals per second over the last window
    mu: float = 0.0  # messages matched per second of matching work (service rate)
    q: int = 0  # messages waiting in the dimension's input queue
    subs: int = 0  # subscriptions in the dimension's set
    at: float = 0.0  # when the report was taken, dispatcher clock (s)
    matched_total: int = 0  # messages matched since the matcher started (for operators)


Candidate = tuple[int, str]  # (dimension, member id)


def extrapolated_queue(r: LoadReport, now: float) -> float:
    """Seed 001 §III-B, eq. q_t = q_t' + (λ_t' − μ_t')(t − t'), never below zero."""
    return max(0.0, r.q + (r.lam - r.mu) * max(0.0, now - r.at))


def processing_time(r: LoadReport, now: float, extrapolate: bool = True) -> float:
    """Seed 001 §III-B: time to process the next message, (q_t + 1) / μ_t'."""
    q = extrapolated_queue(r, now) if extrapolate else float(r.q)
    if r.mu > 0:
        return (q + 1.0) / r.mu
    return (q + 1.0) * (COLD_COST_BASE_S + COLD_COST_PER_SUB_S * r.subs)


def rank(
    policy: str,
    candidates: Sequence[Candidate],
    reports: Callable[[Candidate], LoadReport],
    now: float,
    rng: random.Random,
) -> list[Candidate]:
    """Candidates ordered best first under `policy`, one entry per distinct matcher.

    A matcher that is a candidate along several dimensions appears once, with its best
    dimension, so the rest of the list is the failover order across distinct matchers.
    """
    if policy == "random":
        order = list(candidates)
        rng.shuffle(order)
    else:
        if policy == "adaptive":
            key = lambda c: processing_time(reports(c), now, extrapolate=True)  # noqa: E731
        elif policy == "response-time":
            key = lambda c: processing_time(reports(c), now, extrapolate=False)  # noqa: E731
        elif policy == "subscription-count":
            key = lambda c: reports(c).subs  # noqa: E731
        else:
            raise ValueError(f"unknown forwarding policy {policy!r}; choose one of {POLICIES}")
        # Ties broken at random so equal candidates share the load.
        order = sorted(candidates, key=lambda c: (key(c), rng.random()))
    seen: set[str] = set()
    out = []
    for c in order:
        if c[1] not in seen:
            seen.add(c[1])
            out.append(c)
    return out
