"""The simulator's cost model refitted to real matchers under a CPU limit, and the two compared
(`bluedove sim refit`; the figures are in docs/benchmarks.md).

The kernel model (`sim calibrate`) prices the index walk alone. A matcher process pays more for
each message: the Forward call, decoding, its input queue, the count or the delivery writes,
and, under a CPU limit, the background work (gossip, load reports) that takes its share of the
quota whatever the load. `bench e2e --matcher-cpu` measures each at every system's saturated
step: the walk (the index thread's time in it), the rest net of the background, the messages
per Forward call, and the background itself. The service model is:

    seconds per message = a · kernel(message, set) + c0 + c_call / m

with `m` the system's messages per Forward call, `c0` and `c_call` fitted by least squares over
every system and run given, and `a` scaling the kernel model so that its mean cost per message
on the system's layout is the walk measured in that run (the kernel model prices the walk as
`sim calibrate` times it, with the matches gathered; a matcher that counts gathers none, so
only the model's spread over messages and sets is kept, not its level). A matcher of `cores`
serves `cores − background` of it. The simulator then searches each
system's saturation on n such matchers (its own `m`; every system forwarding as the real runs
did, adaptively), and the agreement is simulated over real: of each rate, and of the ratios
BlueDove / P2P and BlueDove / full replication.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from bluedove.lab.sim.costmodel import CostModel, Models
from bluedove.lab.sim.engine import SimConfig
from bluedove.lab.sim.figures import Context
from bluedove.lab.sim.saturation import Budget, saturation

SYSTEMS = ("mpartition", "p2p", "full-replication")


@dataclass(frozen=True)
class Observed:
    """One system's saturated step in one capped `bench e2e` run (µs per published message)."""

    system: str
    matchers: int
    cores: float  # each matcher's CPU limit
    rate: float  # msg/s, its best round
    walk_us: float
    rest_net_us: float  # outside the walk, net of the background
    per_call: float  # messages per Forward call
    kernel_us: float
    background_cores: float  # each matcher's idle CPU, in cores


def read_runs(paths: list[str]) -> list[Observed]:
    """Every system of every capped run (a run without `matcher_cpu` is refused: the model is of
    matchers at a known size)."""
    out = []
    for path in paths:
        d = json.loads(Path(path).read_text())
        if not d.get("matcher_cpu"):
            raise ValueError(f"{path}: not a run with --matcher-cpu")
        if d.get("workload") != "paper" or d.get("subscriptions") != 40_000:
            raise ValueError(f"{path}: the simulator's workload is paper at 40,000 subscriptions, not "
                             f"{d.get('workload')} at {d.get('subscriptions')}")
        for system, v in d["systems"].items():
            cpu = v["cpu"]
            idle = v.get("idle_cpu_pct", {})
            matchers = [k for k in idle if k.startswith("m")]
            background = float(np.mean([idle[k] for k in matchers])) / 100 if matchers else 0.0
            out.append(Observed(system, int(d["matchers"]), float(d["matcher_cpu"]), float(v["msgs_per_s"]),
                                cpu["matcher_walk_us_per_msg"], cpu["matcher_outside_walk_net_us_per_matched"],
                                cpu["messages_per_forward_call"], cpu["kernel_us_per_msg"], background))
    return out


@dataclass(frozen=True)
class ServiceFit:
    """The fitted terms: `c0_us` per message and `c_call_us` per Forward call, outside the walk."""

    c0_us: float
    c_call_us: float
    rows: int
    rel_rms: float  # of the rest per message, over the rows fitted

    def model(self, kernel: CostModel, per_call: float, a: float = 1.0) -> CostModel:
        """The kernel model, scaled by `a`, as a matcher process serves it for a system of
        `per_call` messages a call."""
        terms = {f: a * v for f, v in kernel.terms.items()}
        terms["one"] = terms.get("one", 0.0) + (self.c0_us + self.c_call_us / per_call) * 1e-6
        return replace(kernel, terms=terms, meta={"refit": "service", "a": a, **self.__dict__})


def fit_service(rows: list[Observed]) -> ServiceFit:
    """c0 and c_call by least squares of the rest on 1 / messages per call."""
    x = np.array([1.0 / r.per_call for r in rows])
    y = np.array([r.rest_net_us for r in rows])
    if len(rows) < 3 or np.ptp(x) == 0:
        raise ValueError("refit: need runs whose systems make calls of different sizes (3 rows or more)")
    c_call, c0 = np.polyfit(x, y, 1)
    pred = c0 + c_call * x
    rel = float(np.sqrt(np.mean(((pred - y) / np.maximum(np.abs(y), 1.0)) ** 2)))  # (a rest near 0 µs: per µs)
    return ServiceFit(round(float(c0), 3), round(float(c_call), 2), len(rows), round(rel, 4))


def simulate(kernel: Models, fit: ServiceFit, row: Observed, seed: int = 1, budget: Budget = Budget()) -> float:
    """The simulated saturation of `row`'s system on its matchers, each `cores − background`."""
    walk = Context(models=kernel, seed=seed, budget=budget, regimes=("rtree",)).prepared(row.system, row.matchers,
                                                                                          "rtree")
    a = row.walk_us * 1e-6 / float(walk.cost.mean())
    ctx = Context(models=Models(rtree=fit.model(kernel.rtree, row.per_call, a), per_dimension=kernel.per_dimension),
                  seed=seed, budget=budget, regimes=("rtree",))
    prep = ctx.prepared(row.system, row.matchers, "rtree")
    one_core = saturation(prep, SimConfig(policy="adaptive", seed=seed), budget, load_aware_replicas=True)
    return one_core * (row.cores - row.background_cores)


def compare(kernel: Models, rows: list[Observed], seed: int = 1, say=lambda s: None) -> dict:
    """The fit, then each row simulated beside its real rate, and the ratios per cluster size."""
    fit = fit_service(rows)
    table = []
    for r in rows:
        sim = simulate(kernel, fit, r, seed)
        say(f"  {r.system:<16} n={r.matchers}: real {r.rate:,.0f} msg/s, simulated {sim:,.0f}")
        table.append({"system": r.system, "matchers": r.matchers, "cores": r.cores, "real": round(r.rate),
                      "simulated": round(sim), "sim_over_real": round(sim / r.rate, 3)})
    ratios = []
    for n in sorted({r["matchers"] for r in table}):
        by = {r["system"]: r for r in table if r["matchers"] == n}
        for other in ("p2p", "full-replication"):
            if "mpartition" in by and other in by:
                real = by["mpartition"]["real"] / by[other]["real"]
                sim = by["mpartition"]["simulated"] / by[other]["simulated"]
                ratios.append({"matchers": n, "over": other, "real": round(real, 3), "simulated": round(sim, 3),
                               "agreement": round(sim / real, 3)})
    return {"fit": fit.__dict__, "rows": table, "ratios": ratios}
