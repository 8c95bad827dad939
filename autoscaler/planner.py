"""Where a joining matcher takes its segments (seed 001 §III-C: a new matcher takes half of a
loaded matcher's segments). Pure: loads in, cut points out."""

from __future__ import annotations

import math
from dataclasses import dataclass

from bluedove.segments import SegmentTable


@dataclass(frozen=True)
class SetLoad:
    """One matcher's subscription set along one dimension, as its Report tells it."""

    lam: float = 0.0       # messages/s arriving
    mu: float = 0.0        # messages/s of matching work
    q: int = 0             # queued now
    subs: int = 0
    split_at: float = math.nan  # the value halving its recent work inside its segment

    @property
    def busy(self) -> float:
        """Busy fraction λ/μ (seed 003's congestion element in/out); 0 while nothing arrives."""
        return self.lam / self.mu if self.mu > 0 else (1.0 if self.q else 0.0)


def hottest(table: SegmentTable, dim: int, loads: dict[str, list[SetLoad]]) -> str:
    """The owner whose dim set carries the most load: processing (λ/μ, then queue), then size."""
    owners = list(dict.fromkeys(table.owners[dim]))

    def key(m: str) -> tuple[float, int, int]:
        ld = loads.get(m, [])[dim] if dim < len(loads.get(m, [])) else SetLoad()
        return (ld.busy, ld.q, ld.subs)

    return max(owners, key=key)


def plan_split(table: SegmentTable, loads: dict[str, list[SetLoad]]) -> tuple[dict[int, tuple[str, float]], str]:
    """For every dimension: (owner to split, value to cut at), and a sentence saying why.

    The hottest segment is cut where its load halves (the owner's `split_at`), not blindly
    at the midpoint; the midpoint only when the owner saw too few messages to tell."""
    at: dict[int, tuple[str, float]] = {}
    why = []
    names = table.space.names
    for i in range(table.space.k):
        owner = hottest(table, i, loads)
        lo, hi = table.segments_of(owner)[i]
        ld = loads.get(owner, [SetLoad()] * table.space.k)[i]
        cut, how = ld.split_at, "load median"
        if not (lo < cut < hi):
            cut, how = lo + (hi - lo) / 2, "midpoint"
        at[i] = (owner, cut)
        why.append(f"{names[i]}: {owner} (busy {ld.busy:.2f}) at {cut:.6g} ({how})")
    return at, "; ".join(why)
