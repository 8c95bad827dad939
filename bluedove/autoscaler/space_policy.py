"""When to give a hot named space more matchers: a pure policy over the spaces' load samples.

A named space spans the matchers its first table was laid out over (its `spans`), or its
definition's `matchers` (`fixed`: the autoscaler leaves it). Matchers the cluster adds later
join the default space; a named space gets more only when it is hot: over a whole window
(`window_s`) its owners' mean busy, Σλ/μ of its dimensions per owner (μ of the matchers' whole
work on them), stays above `out_busy`. It is then given enough matchers for `target_busy`, at
least one more and at most `max_step` more, never more than the cluster has; the matcher that
coordinates its changes joins them one by one (bluedove/matcher/space_changes.py), each joiner
splitting its busiest segment, and the other spaces' tables are not touched. No space grows
again within `out_cooldown_s` of its last growth. A space that spans every matcher grows
only after the cluster itself scales out (its demand counts every space's work). Time is an
argument.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bluedove.autoscaler.policy import ScalingConfig


@dataclass(frozen=True)
class SpaceLoad:
    """One named space at one sample, over the matchers that reported it."""

    busy: float    # Σ λ/μ over its dimensions and owners: matchers' worth of its work
    queued: int
    matchers: int  # the matchers its table spans
    fixed: bool    # its definition says `matchers`


@dataclass(frozen=True)
class SpacesSample:
    """The named spaces with work at one sample (a space missing had none)."""

    at: float
    spaces: Mapping[str, SpaceLoad]


@dataclass(frozen=True)
class Grow:
    """Space `space` is to span `to` matchers, and why."""

    space: str
    to: int
    reason: str


def spaces_to_grow(samples: Sequence[SpacesSample], cluster: int, now: float, grown_at: Mapping[str, float],
                   c: ScalingConfig) -> list[Grow]:
    """The spaces to grow now, given the samples (oldest first), the cluster's matchers, and when
    each space last grew."""
    inside = [s for s in samples if now - c.window_s <= s.at <= now]
    if len(inside) < 3 or inside[0].at - (now - c.window_s) > 0.2 * c.window_s:
        return []  # the window is not covered yet
    out = []
    for name, last in inside[-1].spaces.items():
        if last.fixed or last.matchers >= cluster or now - grown_at.get(name, -math.inf) < c.out_cooldown_s:
            continue
        seen = [s.spaces.get(name) for s in inside]
        per_owner = [x.busy / max(1, x.matchers) if x is not None else 0.0 for x in seen]
        if min(per_owner) <= c.out_busy:
            continue
        demand = sum(x.busy for x in seen if x is not None) / len(seen)
        to = min(cluster, last.matchers + c.max_step, max(last.matchers + 1, math.ceil(demand / c.target_busy)))
        out.append(Grow(name, to, f"busy {min(per_owner):.2f}-{max(per_owner):.2f} (λ/μ per owner) over "
                                  f"{c.window_s:.0f} s, above {c.out_busy}; demand {demand:.2f} matchers' worth"))
    return out
