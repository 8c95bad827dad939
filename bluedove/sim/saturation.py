"""Saturation (seed 001 §IV-B): the highest message rate at which no matcher's queue grows without bound.

The paper raises the rate every five minutes until queue lengths and response times grow
monotonically. Here one run holds a rate for `horizon_s` of simulated time; the system is
saturated at that rate when some matcher's backlog (seconds of queued work) grows by more
than `growth` of the second half's length between the half-way point and the end — a
matcher overloaded by more than that fraction. A bisection on the rate finds the edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from bluedove.sim.costmodel import CostModel
from bluedove.sim.engine import Pool, RunResult, SimConfig, Simulator
from bluedove.sim.layouts import Layout


@dataclass(frozen=True)
class Budget:
    """How much simulation one run may cost: simulated seconds and simulated messages."""

    horizon_s: float = 12.0
    warmup_s: float = 3.0
    messages: int = 120_000  # per run; above this one simulated message stands for several
    growth: float = 0.05  # saturated when a backlog grows by more than 5 % of the second half
    steps: int = 7  # bisection steps (a bracket of 8x narrows to about 1.6 %)


def ideal_rate(layout: Layout, model: CostModel, pool: Pool) -> float:
    """An upper bound: every message on its cheapest candidate and the work spread perfectly
    over all matchers (no policy can do better)."""
    _, cost = pool.costs(layout, model)
    return layout.n / float(np.mean(cost.min(axis=1)))


def weight_for(rate: float, budget: Budget) -> float:
    return max(1.0, rate * budget.horizon_s / budget.messages)


def run_at(layout: Layout, model: CostModel, pool: Pool, cfg: SimConfig, rate: float, budget: Budget
           ) -> tuple[bool, RunResult]:
    """Hold `rate` for the budget's horizon; (saturated?, the run)."""
    sim = Simulator(layout, model, pool, cfg)
    mid = budget.warmup_s + (budget.horizon_s - budget.warmup_s) / 2
    seen: dict = {}

    def hook(s: Simulator, now: float) -> None:
        if "mid" not in seen and now >= mid:
            seen["mid"] = (now, np.maximum(np.array(s.free_at) - now, 0.0))

    res = sim.run(lambda t: rate, budget.horizon_s, weight_for(rate, budget), budget.warmup_s, hook)
    end = np.maximum(np.array(sim.free_at) - budget.horizon_s, 0.0)
    t_mid, mid_backlog = seen.get("mid", (budget.warmup_s, np.zeros_like(end)))
    for m in sim.dead:
        end[m] = 0.0
    growth = end[: len(mid_backlog)] - mid_backlog
    return bool(growth.max(initial=0.0) > budget.growth * (budget.horizon_s - t_mid)), res


def saturation_rate(layout: Layout, model: CostModel, pool: Pool, cfg: SimConfig, budget: Budget = Budget(),
                    hi: float | None = None, on_step: Callable[[float, bool], None] | None = None) -> float:
    """Bisection (in log space) between hi/8 and hi; hi defaults to `ideal_rate`."""
    hi = hi or ideal_rate(layout, model, pool)
    lo = hi / 8
    if run_at(layout, model, pool, cfg, hi, budget)[0] is False:
        return hi
    for _ in range(budget.steps):
        mid = float(np.sqrt(lo * hi))
        sat = run_at(layout, model, pool, cfg, mid, budget)[0]
        if on_step:
            on_step(mid, sat)
        if sat:
            hi = mid
        else:
            lo = mid
    return lo
