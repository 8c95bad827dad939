"""Seed 001 §IV figures 6a, 6b, 7, 8 and 11a–c as saturation experiments on the simulator; one dict per figure."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from bluedove.forwarding import POLICIES
from bluedove.sim import paper
from bluedove.sim.costmodel import CostModel
from bluedove.sim.engine import Pool, SimConfig
from bluedove.sim.layouts import Layout, build, expected_matches
from bluedove.sim.saturation import Budget, run_at, saturation_rate
from bluedove.workloads import Workload
from bluedove.workloads.paper import get as get_workload

SMALL = (5, 10, 15, 20)  # the paper's cluster sizes
LARGE = (50, 200, 1000)  # beyond the paper
SYSTEM_KEYS = {"mpartition": "bluedove", "p2p": "p2p", "full-replication": "full_replication"}


@dataclass
class Context:
    """What every figure needs: the fitted model, the seed, the run budget, and caches."""

    model: CostModel
    seed: int = 1
    budget: Budget = field(default_factory=Budget)
    say: Callable[[str], None] = lambda s: None
    sizes_small: tuple = SMALL
    sizes_large: tuple = LARGE
    _workloads: dict = field(default_factory=dict)
    _pools: dict = field(default_factory=dict)
    _sat: dict = field(default_factory=dict)

    def workload(self, **variant) -> Workload:
        key = tuple(sorted(variant.items()))
        if key not in self._workloads:
            self._workloads[key] = get_workload("paper", seed=self.seed, **variant)
        return self._workloads[key]

    def pool(self, w: Workload, n: int) -> Pool:
        """Sample messages (an independent stream of the seed), at least 100 per matcher."""
        size = max(4000, 100 * n)
        key = (w.name, size)
        if key not in self._pools:
            pts = w.sample(size, np.random.default_rng([self.seed, 1]))
            self._pools[key] = Pool(pts, expected_matches(w, pts))
        return self._pools[key]

    def budget_for(self, n: int) -> Budget:
        return replace(self.budget, messages=max(self.budget.messages, 200 * n))

    def saturation(self, system: str, n: int, policy: str = "adaptive", k: int | None = None, **variant) -> float:
        key = (system, n, policy, k, tuple(sorted(variant.items())))
        if key not in self._sat:
            w = self.workload(**variant)
            layout = build(system, w, n, k)
            cfg = SimConfig(policy=policy if system == "mpartition" else "random", seed=self.seed)
            rate = saturation_rate(layout, self.model, self.pool(w, n), cfg, self.budget_for(n))
            self.say(f"  {system:<16} {cfg.policy:<18} n={n:<5} {dict(variant) or ''} k={k or '-'}: {rate:,.0f} msg/s")
            self._sat[key] = rate
        return self._sat[key]


def _r(x: float) -> float:
    return round(float(x), 3)


def fig_6a(ctx: Context) -> dict:
    rows = []
    for n in ctx.sizes_small + ctx.sizes_large:
        row = {"matchers": n}
        for system, key in SYSTEM_KEYS.items():
            row[key] = round(ctx.saturation(system, n))
        row["bluedove_over_p2p"] = _r(row["bluedove"] / row["p2p"])
        row["bluedove_over_full_replication"] = _r(row["bluedove"] / row["full_replication"])
        rows.append(row)
    return {"figure": "6a", "unit": "msg/s at saturation", "rows": rows, "paper": paper.FIG_6A}


def _scaled(layout: Layout, pool: Pool, f: float) -> tuple[Layout, Pool]:
    """The same workload with f times the subscriptions: set sizes and matches scale by f in
    expectation (subscriptions are drawn independently)."""
    return replace(layout, sizes=np.round(layout.sizes * f).astype(np.int64)), Pool(pool.points, pool.matches * f)


def max_subscriptions(ctx: Context, system: str, n: int, rate: float, steps: int = 5) -> int:
    """Most subscriptions (40,000 x f) with which `system` on n matchers still keeps up with `rate`.
    Starts from 40,000 x saturation(40,000)/rate (exact if cost were proportional to f) and bisects."""
    w = ctx.workload()
    layout, pool = build(system, w, n), ctx.pool(w, n)
    cfg = SimConfig(policy="adaptive" if system == "mpartition" else "random", seed=ctx.seed)
    f0 = ctx.saturation(system, n) / rate
    lo, hi = f0 / 1.6, f0 * 1.6
    for _ in range(steps):
        f = float(np.sqrt(lo * hi))
        big_layout, big_pool = _scaled(layout, pool, f)
        sat, _ = run_at(big_layout, ctx.model, big_pool, cfg, rate, ctx.budget_for(n))
        lo, hi = (lo, f) if sat else (f, hi)
    return int(round(w.n_subs * lo))


def fig_6b(ctx: Context) -> dict:
    rate = paper.FIG_6B["rate_msgs_per_s"]
    rows = []
    for n in ctx.sizes_small:
        row = {"matchers": n}
        for system, key in SYSTEM_KEYS.items():
            row[key] = max_subscriptions(ctx, system, n, rate)
        row["bluedove_over_p2p"] = _r(row["bluedove"] / max(row["p2p"], 1))
        row["bluedove_over_full_replication"] = _r(row["bluedove"] / max(row["full_replication"], 1))
        rows.append(row)
        ctx.say(f"  6b n={n}: {row}")
    return {"figure": "6b", "unit": f"subscriptions at {rate:,} msg/s", "rows": rows, "paper": paper.FIG_6B}


def fig_7(ctx: Context) -> dict:
    rows = []
    for n in (20,) + ctx.sizes_large:
        row = {"matchers": n}
        for policy in POLICIES:
            row[policy.replace("-", "_")] = round(ctx.saturation("mpartition", n, policy))
        for other in ("response_time", "subscription_count", "random"):
            row[f"adaptive_over_{other}"] = _r(row["adaptive"] / row[other])
        rows.append(row)
    return {"figure": "7", "unit": "msg/s at saturation", "rows": rows, "paper": paper.FIG_7}


def fig_8(ctx: Context, n: int = 20, load: float = 0.95) -> dict:
    """Per-matcher CPU load (busy fraction) at `load` x each system's saturation rate."""
    w = ctx.workload()
    util = {}
    for system in ("mpartition", "p2p"):
        rate = load * ctx.saturation(system, n)
        layout = build(system, w, n)
        cfg = SimConfig(policy="adaptive" if system == "mpartition" else "random", seed=ctx.seed)
        _, res = run_at(layout, ctx.model, ctx.pool(w, n), cfg, rate, ctx.budget_for(n))
        util[SYSTEM_KEYS[system]] = res.busy_s[:n] / res.span_s
    rows = [{"matcher": j, "bluedove": _r(util["bluedove"][j]), "p2p": _r(util["p2p"][j])} for j in range(n)]
    som = {k: _r(np.std(v) / np.mean(v)) for k, v in util.items()}
    return {"figure": "8", "unit": f"busy fraction per matcher at {load:g} x saturation", "rows": rows,
            "std_over_mean": som, "paper": paper.FIG_8}


def fig_11(ctx: Context, n: int = 20) -> list[dict]:
    """11a: searchable dimensions 1..4 (all four predicates kept); 11b: subscription skew; 11c: adverse messages."""
    a = [{"dims": k, "bluedove": round(ctx.saturation("mpartition", n, k=k))} for k in (1, 2, 3, 4)]
    for row in a:
        row["over_one_dim"] = _r(row["bluedove"] / a[0]["bluedove"])
    b = []
    for sigma in (250.0, 500.0, 750.0, 1000.0):
        w = ctx.workload(**({"sigma": sigma} if sigma != 250.0 else {}))
        sizes = build("mpartition", w, n).sizes
        b.append({"sigma": int(sigma), "bluedove": round(ctx.saturation("mpartition", n, **(
            {"sigma": sigma} if sigma != 250.0 else {}))),
                  "max_over_mean_subs": _r(sizes.max() / sizes.mean())})
    for row in b:
        row["over_sigma_250"] = _r(row["bluedove"] / b[0]["bluedove"])
    p2p = round(ctx.saturation("p2p", n))
    c = []
    for j in (0, 1, 2, 3, 4):
        c.append({"adverse_dims": j, "bluedove": round(ctx.saturation("mpartition", n, **({"adverse": j} if j else {}))),
                  "p2p_uniform": p2p})
    for row in c:
        row["over_uniform"] = _r(row["bluedove"] / c[0]["bluedove"])
    unit = f"msg/s at saturation, {n} matchers, adaptive"
    return [{"figure": "11a", "unit": unit, "rows": a, "paper": paper.FIG_11A},
            {"figure": "11b", "unit": unit, "rows": b, "paper": paper.FIG_11B},
            {"figure": "11c", "unit": unit, "rows": c, "paper": paper.FIG_11C}]
