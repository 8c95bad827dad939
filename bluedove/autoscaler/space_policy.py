"""When to give a hot named space more matchers, and an idle one back fewer: a pure policy over
the spaces' load samples.

A named space spans the matchers its first table was laid out over (its `spans`), or its
definition's `matchers` (`fixed`: the autoscaler leaves it). Matchers the cluster adds later
join the default space; a named space gets more only when it is hot: over a whole window
(`window_s`) its owners' mean busy, Σλ/μ of its dimensions per owner (μ of the matchers' whole
work on them), stays above `out_busy`. It is then given enough matchers for `target_busy`, at
least one more and at most `max_step` more, never more than the cluster has; the matcher that
coordinates its changes joins them one by one (bluedove/matcher/space_changes.py), each joiner
splitting its busiest segment, and the other spaces' tables are not touched. No space grows
again within `out_cooldown_s` of its last change. A space that spans every matcher grows
only after the cluster itself scales out (its demand counts every space's work).

A space the autoscaler grew shrinks back, one matcher at a time, towards what it spanned before
(`base`) when over a whole `in_window_s` its owners' busy stayed under `in_busy`, nothing was
queued, and one matcher fewer would stay under `target_busy`, `in_cooldown_s` after its last
change: its coordinating owner merges its heaviest owner out. Time is an argument.
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
    spans: int = 0  # the matchers it is to span (above `matchers` while growing); 0: as many
    base: int = 0   # what it spanned before it was grown; 0: as many as `spans`


@dataclass(frozen=True)
class SpacesSample:
    """The named spaces with work at one sample (a space missing had none)."""

    at: float
    spaces: Mapping[str, SpaceLoad]


@dataclass(frozen=True)
class Resize:
    """Space `space` is to span `to` matchers, and why."""

    space: str
    to: int
    reason: str


def _covering(samples: Sequence[SpacesSample], now: float, span: float) -> list[SpacesSample]:
    """The samples of the last `span` seconds, or none if they do not cover it."""
    inside = [s for s in samples if now - span <= s.at <= now]
    return inside if len(inside) >= 3 and inside[0].at - (now - span) <= 0.2 * span else []


def spaces_to_grow(samples: Sequence[SpacesSample], cluster: int, now: float, grown_at: Mapping[str, float],
                   c: ScalingConfig) -> list[Resize]:
    """The spaces to grow now, given the samples (oldest first), the cluster's matchers, and when
    each space last changed."""
    inside = _covering(samples, now, c.window_s)
    if not inside:
        return []
    out = []
    for name, last in inside[-1].spaces.items():
        if last.fixed or last.matchers >= cluster or last.spans > last.matchers \
                or now - grown_at.get(name, -math.inf) < c.out_cooldown_s:
            continue  # at the cluster's size, growing already, or too soon
        seen = [s.spaces.get(name) for s in inside]
        per_owner = [x.busy / max(1, x.matchers) if x is not None else 0.0 for x in seen]
        if min(per_owner) <= c.out_busy:
            continue
        demand = sum(x.busy for x in seen if x is not None) / len(seen)
        to = min(cluster, last.matchers + c.max_step, max(last.matchers + 1, math.ceil(demand / c.target_busy)))
        out.append(Resize(name, to, f"busy {min(per_owner):.2f}-{max(per_owner):.2f} (λ/μ per owner) over "
                                  f"{c.window_s:.0f} s, above {c.out_busy}; demand {demand:.2f} matchers' worth"))
    return out


def spaces_to_shrink(samples: Sequence[SpacesSample], now: float, changed_at: Mapping[str, float],
                     c: ScalingConfig) -> list[Resize]:
    """The grown spaces to shrink by one now, given the samples (oldest first) and when each
    space last changed."""
    inside = _covering(samples, now, c.in_window_s)
    if not inside:
        return []
    out = []
    for name, last in inside[-1].spaces.items():
        base = last.base or last.spans
        if last.fixed or last.spans <= base or last.matchers != last.spans \
                or now - changed_at.get(name, -math.inf) < c.in_cooldown_s:
            continue  # never grown, or a change under way, or too soon
        seen = [s.spaces.get(name) for s in inside]
        if any(x is None for x in seen):
            continue  # not reported at every sample: nothing to go by
        busy = [x.busy / max(1, x.matchers) for x in seen if x is not None]
        peak = max(x.busy for x in seen if x is not None)
        if max(busy) < c.in_busy and last.queued == 0 and peak / (last.spans - 1) < c.target_busy:
            out.append(Resize(name, last.spans - 1, f"idle: busy below {c.in_busy} per owner for "
                                                    f"{c.in_window_s:.0f} s (peak demand {peak:.2f})"))
    return out
