"""When to add or remove matchers: a pure policy over a history of cluster load samples.

Saturation (the paper's §IV-B): queues and response time grow without bound once arrivals
outpace matching; OctopiS (content-based routing in overlays) calls λ/μ > 1 sustained a
congestion element. We scale out only when the matchers are saturated: over a whole window,
either their demand λ/μ per matcher stays above `out_busy`, or their queued messages keep
growing while they match (busy at least `in_busy`: a queue that grows at idle matchers waits
on the store's writes, not on matching); by more than one matcher when far over (to reach
`target_busy`). We scale in, one matcher at a time, after a long window in which demand
stayed below `in_busy` and would stay below `target_busy` with one matcher fewer. Cooldowns
after every change and the min/max bounds keep it from flapping. Time is an argument.

A matcher under a CPU limit (its cgroup's quota: a pod's CPU limit) that the kernel keeps
throttling is saturated whatever its λ/μ reads (`matcher_demand`): held at its quota, it
cannot show more demand than the CPU it gets, and its queue may stay short while the
dispatchers' backpressure and latency grow instead.

Every scale-out taken for saturation is then checked (bluedove/autoscaler/relief.py): `check` is that
check while it runs, or the stop it ended in when the scale-out relieved nothing; meanwhile
no further matcher is added.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ScalingConfig:
    """The policy's bounds, thresholds, windows and cooldowns, and those of the scale-out check."""

    min_matchers: int = 1
    max_matchers: int = 8
    # Saturation must hold over this whole window (a burst shorter than it is absorbed).
    window_s: float = 10.0
    # Mean busy fraction λ/μ per matcher above which the cluster counts as saturated.
    out_busy: float = 0.8
    # Queued messages growing by at least this many over the window also means saturated.
    queue_growth: int = 200
    # Scale out to reach this busy fraction; scale in only if it would stay under it.
    target_busy: float = 0.6
    # Demand below this for `in_window_s` lets a matcher go.
    in_busy: float = 0.25
    in_window_s: float = 60.0
    # No decision this soon after a change (a new matcher needs its hand-off and a few
    # load reports before its effect shows).
    out_cooldown_s: float = 15.0
    in_cooldown_s: float = 60.0
    # Most matchers added at once.
    max_step: int = 4
    # -- the check after a scale-out (bluedove/autoscaler/relief.py) --
    # Once the new matchers serve, wait this long (their λ/μ window) and then measure over
    # `window_s`; a scale-out whose matchers do not serve within `check_timeout_s` is not checked.
    check_settle_s: float = 5.0
    check_timeout_s: float = 60.0
    # Relieved: the accepted rate rose by this fraction; or, the rate held, growing queues
    # stopped growing or the publish p50 fell by this fraction (counted only from a p50 of at
    # least `relief_latency_floor_s`).
    relief_rate: float = 0.1
    relief_latency: float = 0.2
    relief_latency_floor_s: float = 0.05
    # A dispatcher or Redis (each on one event loop) at this fraction of one core, or the host
    # at this fraction of all its cores, is at its limit.
    limit_cpu: float = 0.85
    # A matcher with a CPU limit is at it, and counts as a whole matcher's worth of demand
    # (λ/μ at least 1), when over its stats window it was throttled in more than this share of
    # its CFS periods with work, or used this much of its limit. Its batches come in bursts, so
    # it is throttled before its quota is used up: measured at 0.15 core, ~20 % of the periods
    # at half the quota used, ~60 % at 82 %, 76-100 % saturated (~70 % saturated at 0.2 core).
    capped_throttled: float = 0.5
    capped_used: float = 0.95
    # After a stop, one more scale-out is tried this long after it even if nothing it can see
    # changed (the other ways to resume: docs/operations.md, "The autoscaler").
    retry_s: float = 300.0


@dataclass(frozen=True)
class LoadSample:
    """The cluster at one moment: summed over matchers and dimensions."""

    at: float
    matchers: int
    demand: float  # Σ λ/μ: matchers' worth of matching work arriving per second (`matcher_demand`)
    queued: int    # messages waiting in matcher queues
    # The rest of the cluster (bluedove/autoscaler/signals.py), None where unknown: messages accepted
    # per second and their publish p50; the busiest dispatcher's and Redis's CPU (of one core);
    # failed store reads; the host's CPU (of all cores; when the matchers run on it).
    accepted: float | None = None
    p50_s: float | None = None
    dispatcher_cpu: float | None = None
    store_cpu: float | None = None
    store_errors: int = 0
    host_cpu: float | None = None
    at_limit: int = 0  # matchers at their CPU limit (`matcher_demand`)

    @property
    def busy(self) -> float:
        return self.demand / self.matchers if self.matchers else 0.0


class Check(Protocol):
    """A scale-out's check while it runs, or the stop it ended in (bluedove/autoscaler/relief.py)."""

    def holds(self) -> str:
        """Why no matcher is added meanwhile."""


@dataclass(frozen=True)
class Decision:
    """What the policy chose at one step: scale out, scale in or hold, to how many matchers, and why."""

    action: str  # "scale_out" | "scale_in" | "hold"
    target: int
    reason: str


def matcher_demand(busy: float, cpu_limit_cores: float, cpu_used: float, cpu_throttled: float,
                   c: ScalingConfig) -> tuple[float, bool]:
    """One matcher's part of the demand, from its load report: its Σ λ/μ, or at least 1 (a whole
    matcher's worth) while it is at its CPU limit — it has one (`cpu_limit_cores` above 0; a
    report without the fields has none), and over the window it was throttled in more than
    `capped_throttled` of its periods or used `capped_used` of the limit. And whether it is."""
    capped = cpu_limit_cores > 0 and (cpu_throttled > c.capped_throttled or cpu_used >= c.capped_used)
    return (max(busy, 1.0) if capped else busy), capped


def _window(loads: Sequence[LoadSample], now: float, span: float) -> list[LoadSample] | None:
    """The samples of the last `span` seconds, or None if they do not cover it."""
    inside = [s for s in loads if now - span <= s.at <= now]
    if len(inside) < 3 or inside[0].at - (now - span) > 0.2 * span:
        return None
    return inside


def saturation(win: Sequence[LoadSample], c: ScalingConfig) -> tuple[str | None, str]:
    """Why the matchers are saturated over the window `win` (None if they are not), and what
    was seen."""
    busy = [s.busy for s in win]
    rise = win[-1].queued - win[0].queued
    growing = rise >= c.queue_growth and all(b.queued >= a.queued for a, b in zip(win, win[1:]))
    mean = sum(busy) / len(busy)
    seen = f"busy {min(busy):.2f}-{max(busy):.2f} (λ/μ per matcher) over {c.window_s:.0f} s, queued {rise:+d}"
    if min(busy) > c.out_busy:
        capped = max(s.at_limit for s in win)
        held = (f"; {capped} at their CPU limit (throttled in over {c.capped_throttled:.0%} of their periods, "
                f"or using {c.capped_used:.0%} of it), counted as 1" if capped else "")
        return (f"busy {min(busy):.2f}-{max(busy):.2f} (λ/μ per matcher) over {c.window_s:.0f} s, "
                f"above {c.out_busy}{held}"), seen
    if growing and mean >= c.in_busy:
        return f"queues grew by {rise} over {c.window_s:.0f} s", seen
    if growing:
        return None, (f"queues grew by {rise} over {c.window_s:.0f} s while the matchers matched little "
                      f"(busy {mean:.2f}, under {c.in_busy}): they wait on the store's writes, not on matching")
    return None, seen


def plan(loads: Sequence[LoadSample], members: int, now: float, last_change_at: float | None = None,
         config: ScalingConfig = ScalingConfig(), check: Check | None = None) -> Decision:
    """What to do now, given the load history (oldest first), the matchers there are, and
    the check of the last scale-out (bluedove/autoscaler/relief.py: review) if one runs or stopped."""
    c = config
    if members < c.min_matchers:
        return Decision("scale_out", c.min_matchers, f"{members} matchers, below the minimum {c.min_matchers}")
    if members > c.max_matchers:
        return Decision("scale_in", c.max_matchers, f"{members} matchers, above the maximum {c.max_matchers}")
    since = math.inf if last_change_at is None else now - last_change_at
    win = _window(loads, now, c.window_s)
    if win is None:
        return Decision("hold", members, "not enough load history yet")
    why, seen = saturation(win, c)
    if why is not None:
        if members >= c.max_matchers:
            return Decision("hold", members, f"saturated, but already at the maximum {c.max_matchers}")
        if check is not None:
            return Decision("hold", members, f"saturated ({why}), but {check.holds()}")
        if since < c.out_cooldown_s:
            return Decision("hold", members, f"saturated, cooling down ({since:.0f}/{c.out_cooldown_s:.0f} s)")
        demand = sum(s.demand for s in win) / len(win)
        want = math.ceil(demand / c.target_busy)
        target = min(c.max_matchers, members + c.max_step, max(members + 1, want))
        return Decision("scale_out", target, f"saturated: {why}; demand {demand:.2f} matchers' worth")
    if members > c.min_matchers:
        long = _window(loads, now, c.in_window_s)
        if long is not None and max(s.busy for s in long) < c.in_busy and all(s.queued == 0 for s in long[-3:]):
            demand = max(s.demand for s in long)
            if demand / (members - 1) < c.target_busy:
                if since < c.in_cooldown_s:
                    return Decision("hold", members, f"idle, cooling down ({since:.0f}/{c.in_cooldown_s:.0f} s)")
                return Decision("scale_in", members - 1,
                                f"idle: busy below {c.in_busy} for {c.in_window_s:.0f} s (peak demand {demand:.2f})")
    return Decision("hold", members, f"not saturated: {seen}")
