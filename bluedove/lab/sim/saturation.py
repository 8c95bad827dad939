"""Saturation (the paper's §IV-B): the highest message rate at which no matcher's queue grows without bound.

The paper raises the rate every five minutes until queue lengths and response times grow
monotonically. Load-aware policies (adaptive, response-time) are simulated: one run holds a
rate for `horizon_s` of simulated time in the time-stepped simulator; the system is saturated
at that rate when some matcher's backlog (seconds of queued work) grows by more than `growth`
of the second half's length between the half-way point and the end — a matcher overloaded by
more than that fraction; a bisection on the rate finds the edge. Static policies are solved in
closed form (`analytic`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from bluedove.lab.sim import analytic
from bluedove.lab.sim.costmodel import CostModel
from bluedove.lab.sim.engine import Pool, SimConfig
from bluedove.lab.sim.fluid import FluidSim, Step
from bluedove.lab.sim.layouts import Layout

STATIC = ("random", "subscription-count")


@dataclass(frozen=True)
class Budget:
    """How much simulation one run may cost."""

    horizon_s: float = 8.0
    warmup_s: float = 2.0
    growth: float = 0.05  # saturated when a backlog grows by more than 5 % of the second half
    steps: int = 6  # bisection steps (a bracket of 4x narrows to about 2.2 %)
    dt_s: float = 0.002  # time step of the stepped simulator
    per_step: int = 256  # sampled messages per step, at least 4 per matcher (lumps stay small)
    messages: int = 120_000  # discrete-event runs (Fig. 9, 10): above this a message stands for several


@dataclass(frozen=True)
class Prepared:
    """A layout with its pool's candidates and per-candidate costs under one cost model."""

    layout: Layout
    cand: np.ndarray
    cost: np.ndarray

    @classmethod
    def of(cls, layout: Layout, model: CostModel, pool: Pool) -> "Prepared":
        cand, cost = pool.costs(layout, model)
        return cls(layout, cand, np.asarray(cost, dtype=np.float64))

    @property
    def subs(self) -> np.ndarray:
        return self.layout.sizes

    def ideal_rate(self) -> float:
        """An upper bound: every message on its cheapest candidate, the work spread perfectly."""
        return self.layout.n / float(np.mean(self.cost.min(axis=1)))

    def work_per_message(self, policy: str) -> np.ndarray:
        return analytic.work_per_message(policy, self.cand, self.cost, self.subs, self.layout.n)


def run_at(prep: Prepared, cfg: SimConfig, rate: float, budget: Budget) -> tuple[bool, dict]:
    """Hold `rate` for the budget's horizon in the stepped simulator; (saturated?, the run)."""
    n = prep.layout.n
    dt = budget.dt_s * (2 if n >= 200 else 1)  # large clusters: 4 ms steps, as many messages per step
    # at least 4 sampled messages per matcher and step: with fewer, each stands for so many real
    # ones that a load-aware policy's choices come in lumps and saturate it early (1,000 matchers)
    sim = FluidSim(prep.cand, prep.cost, prep.subs, n, cfg, Step(dt, max(budget.per_step, 4 * n)))
    mid = budget.warmup_s + (budget.horizon_s - budget.warmup_s) / 2
    out = sim.run(rate, budget.horizon_s, marks=(budget.warmup_s, mid))
    _, at_mid, end = out["backlog"]
    growth = float((end - at_mid).max(initial=0.0))
    out["span_s"] = budget.horizon_s - budget.warmup_s
    return growth > budget.growth * (budget.horizon_s - mid), out


def saturation(prep: Prepared, cfg: SimConfig, budget: Budget = Budget(),
               on_step: Callable[[float, bool], None] | None = None, load_aware_replicas: bool = False) -> float:
    """Static policies, and layouts where a message has one candidate or any matcher (P2P, full
    replication, the latter forwarded randomly as in the paper unless `load_aware_replicas`):
    closed form. Load-aware ones: bisection in log space between ideal/4 and the ideal rate (no
    policy beats it); the bracket widens downwards if ideal/4 is saturated too."""
    replicas = prep.layout.table is None and not load_aware_replicas
    if cfg.policy in STATIC or replicas or prep.cand.shape[1] == 1:
        return 1.0 / float(prep.work_per_message(cfg.policy if cfg.policy in STATIC else "random").max())
    hi = prep.ideal_rate()
    if not run_at(prep, cfg, hi, budget)[0]:
        return hi
    lo = hi / 4
    while run_at(prep, cfg, lo, budget)[0] and lo > 1.0:
        lo, hi = lo / 4, lo
    for _ in range(budget.steps):
        mid = float(np.sqrt(lo * hi))
        sat = run_at(prep, cfg, mid, budget)[0]
        if on_step:
            on_step(mid, sat)
        hi, lo = (mid, lo) if sat else (hi, mid)
    return lo
