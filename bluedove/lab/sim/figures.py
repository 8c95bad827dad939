"""The paper's §IV figures 6a, 6b, 7, 8 and 11a–c as saturation experiments under both cost regimes; a dict each."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from bluedove.core.forwarding import POLICIES
from bluedove.lab.sim import paper
from bluedove.lab.sim.costmodel import REGIMES, Models
from bluedove.lab.sim.engine import Pool, SimConfig
from bluedove.lab.sim.layouts import build
from bluedove.lab.sim.saturation import STATIC, Budget, Prepared, run_at, saturation
from bluedove.lab.workloads import Workload
from bluedove.lab.workloads.paper import get as get_workload

SMALL = (5, 10, 15, 20)  # the paper's cluster sizes
LARGE = (50, 200, 1000)  # beyond the paper
SYSTEM_KEYS = {"mpartition": "bluedove", "p2p": "p2p", "full-replication": "full_replication"}


@dataclass
class Context:
    """What every figure needs: both fitted models, the seed, the run budget, and caches."""

    models: Models
    seed: int = 1
    budget: Budget = field(default_factory=Budget)
    say: Callable[[str], None] = lambda s: None
    sizes_small: tuple = SMALL
    sizes_large: tuple = LARGE
    regimes: tuple = tuple(REGIMES)
    jobs: int = 1  # saturation searches run in this many processes (`prefetch`)
    _workloads: dict = field(default_factory=dict)
    _pools: dict = field(default_factory=dict)
    _prep: dict = field(default_factory=dict)
    _sat: dict = field(default_factory=dict)

    def workload(self, **variant) -> Workload:
        key = tuple(sorted(variant.items()))
        if key not in self._workloads:
            self._workloads[key] = get_workload("paper", seed=self.seed, **variant)
        return self._workloads[key]

    def pool(self, w: Workload, n: int) -> Pool:
        """Sample messages (an independent stream of the seed), 200 per matcher, at least 4,000."""
        size = max(4000, 200 * n)
        key = (w.name, size)
        if key not in self._pools:
            self._pools[key] = Pool.of(w, w.sample(size, np.random.default_rng([self.seed, 1])))
        return self._pools[key]

    def prepared(self, system: str, n: int, regime: str, k: int | None = None, scale: float = 1.0,
                 **variant) -> Prepared:
        key = (system, n, regime, k, scale, tuple(sorted(variant.items())))
        if key not in self._prep:
            w = self.workload(**variant)
            layout, pool = build(system, w, n, k), self.pool(w, n)
            if scale != 1.0:  # f x the subscriptions, drawn alike: sets, coverage and matches scale by f
                sizes = np.round(layout.sizes * scale).astype(np.int64)
                layout, pool = replace(layout, sizes=sizes), pool.scaled(scale)
            self._prep[key] = Prepared.of(layout, self.models.get(regime), pool)
        return self._prep[key]

    @staticmethod
    def key(system: str, n: int, policy: str = "adaptive", regime: str = "rtree", k: int | None = None,
            **variant) -> tuple:
        return (system, n, policy if system == "mpartition" else "random", regime, k, tuple(sorted(variant.items())))

    def prefetch(self, keys: list[tuple]) -> None:
        """Compute the missing saturations of `keys` (from `key`) in `jobs` processes, largest clusters first."""
        load_aware = [k for k in keys if k[0] == "mpartition" and k[2] not in STATIC and k[4] != 1]
        todo = sorted({k for k in load_aware if k not in self._sat}, key=lambda k: -k[1])
        if self.jobs <= 1 or len(todo) < 2:
            return
        with ProcessPoolExecutor(self.jobs) as ex:
            for key, rate in zip(todo, ex.map(_saturation_task,
                                              [(self.models, self.seed, self.budget, k) for k in todo])):
                self.say(f"  {key[3]:<13} {key[0]:<16} {key[2]:<18} n={key[1]:<5} {dict(key[5]) or ''}"
                         f" k={key[4] or '-'}: {rate:,.0f} msg/s")
                self._sat[key] = rate

    def saturation(self, system: str, n: int, policy: str = "adaptive", regime: str = "rtree", k: int | None = None,
                   **variant) -> float:
        key = self.key(system, n, policy, regime, k, **variant)
        policy = key[2]
        if key not in self._sat:
            rate = saturation(self.prepared(system, n, regime, k, **variant), SimConfig(policy=policy, seed=self.seed),
                              self.budget)
            self.say(f"  {regime:<13} {system:<16} {policy:<18} n={n:<5} {dict(variant) or ''} k={k or '-'}:"
                     f" {rate:,.0f} msg/s")
            self._sat[key] = rate
        return self._sat[key]


def _saturation_task(args: tuple) -> float:
    models, seed, budget, (system, n, policy, regime, k, variant) = args
    return Context(models=models, seed=seed, budget=budget).saturation(system, n, policy, regime, k, **dict(variant))


def _max_subscriptions_task(args: tuple) -> int:
    models, seed, budget, n, rate, regime, f0 = args
    return max_subscriptions(Context(models=models, seed=seed, budget=budget), "mpartition", n, rate, regime, f0)


def _r(x: float) -> float:
    return round(float(x), 3)


def _both(ctx: Context, one: Callable[[str], dict]) -> dict:
    """Our matcher's numbers at the top level, the paper's regime nested under `per_dimension`."""
    row = one(ctx.regimes[0])
    for regime in ctx.regimes[1:]:
        row[regime] = one(regime)
    return row


def _systems(ctx: Context, n: int, value: Callable[[str, str], float]) -> Callable[[str], dict]:
    def one(regime: str) -> dict:
        row = {key: round(value(system, regime)) for system, key in SYSTEM_KEYS.items()}
        row["bluedove_over_p2p"] = _r(row["bluedove"] / max(row["p2p"], 1))
        row["bluedove_over_full_replication"] = _r(row["bluedove"] / max(row["full_replication"], 1))
        return row
    return one


def fig_6a(ctx: Context) -> dict:
    sizes = ctx.sizes_small + ctx.sizes_large
    ctx.prefetch([ctx.key(s, n, regime=r) for n in sizes for s in SYSTEM_KEYS for r in ctx.regimes])
    rows = []
    for n in ctx.sizes_small + ctx.sizes_large:
        rows.append({"matchers": n, **_both(ctx, _systems(ctx, n, lambda s, r, n=n: ctx.saturation(s, n, regime=r)))})
    return {"figure": "6a", "unit": "msg/s at saturation (adaptive for BlueDove)", "rows": rows, "paper": paper.FIG_6A}


def _bisect(saturated: Callable[[float], bool], lo: float, hi: float, steps: int) -> float:
    """Largest x in [lo, hi] with saturated(x) False (log-space bisection); widens the bracket first."""
    while saturated(lo) and lo > 1e-6:
        lo, hi = lo / 2, lo
    while not saturated(hi):
        lo, hi = hi, hi * 2
    for _ in range(steps):
        mid = float(np.sqrt(lo * hi))
        lo, hi = (lo, mid) if saturated(mid) else (mid, hi)
    return lo


def max_subscriptions(ctx: Context, system: str, n: int, rate: float, regime: str, f0: float | None = None) -> int:
    """Most subscriptions (40,000 x f) with which `system` on n matchers keeps up with `rate`.
    Starts from 40,000 x saturation(40,000)/rate (exact if cost were proportional to f) and bisects."""
    w = ctx.workload()
    policy = "adaptive" if system == "mpartition" else "random"
    cfg = SimConfig(policy=policy, seed=ctx.seed)

    def saturated(f: float) -> bool:
        prep = ctx.prepared(system, n, regime, scale=f)
        if policy == "random":
            return rate * float(prep.work_per_message("random").max()) > 1.0
        return run_at(prep, cfg, rate, ctx.budget)[0]

    f0 = f0 or ctx.saturation(system, n, regime=regime) / rate
    f = _bisect(saturated, f0 / 1.5, f0 * 1.5, 5 if policy != "random" else 12)
    return int(round(w.n_subs * f))


def fig_6b(ctx: Context) -> dict:
    rate = paper.FIG_6B["rate_msgs_per_s"]
    ctx.prefetch([ctx.key(s, n, regime=r) for n in ctx.sizes_small for s in SYSTEM_KEYS for r in ctx.regimes])
    most: dict = {}
    if ctx.jobs > 1:  # BlueDove's searches are simulations: run them in parallel
        todo = [(n, r) for n in ctx.sizes_small for r in ctx.regimes]
        args = [(ctx.models, ctx.seed, ctx.budget, n, rate, r, ctx.saturation("mpartition", n, regime=r) / rate)
                for n, r in todo]
        with ProcessPoolExecutor(ctx.jobs) as ex:
            most = dict(zip(todo, ex.map(_max_subscriptions_task, args)))

    def value(system: str, regime: str, n: int) -> int:
        if system == "mpartition" and (n, regime) in most:
            return most[(n, regime)]
        return max_subscriptions(ctx, system, n, rate, regime)

    rows = []
    for n in ctx.sizes_small:
        row = {"matchers": n, **_both(ctx, _systems(ctx, n, lambda s, r, n=n: value(s, r, n)))}
        rows.append(row)
        ctx.say(f"  6b n={n}: {row}")
    return {"figure": "6b", "unit": f"subscriptions at {rate:,} msg/s", "rows": rows, "paper": paper.FIG_6B}


def fig_7(ctx: Context) -> dict:
    def one(n: int) -> Callable[[str], dict]:
        def at(regime: str) -> dict:
            row = {p.replace("-", "_"): round(ctx.saturation("mpartition", n, p, regime)) for p in POLICIES}
            for other in ("response_time", "subscription_count", "random"):
                row[f"adaptive_over_{other}"] = _r(row["adaptive"] / row[other])
            row["subscription_count_over_random"] = _r(row["subscription_count"] / row["random"])
            return row
        return at

    sizes = ctx.sizes_small + ctx.sizes_large
    ctx.prefetch([ctx.key("mpartition", n, p, r) for n in sizes for p in POLICIES for r in ctx.regimes])
    rows = [{"matchers": n, **_both(ctx, one(n))} for n in sizes]
    return {"figure": "7", "unit": "msg/s at saturation, BlueDove (mPartition) per policy", "rows": rows,
            "paper": paper.FIG_7}


def fig_8(ctx: Context, n: int = 20, load: float = 0.95) -> dict:
    """Per-matcher CPU load (busy fraction) at `load` x each system's saturation rate."""
    ctx.prefetch([ctx.key("mpartition", n, regime=r) for r in ctx.regimes])
    util: dict = {}
    for regime in ctx.regimes:
        rate = load * ctx.saturation("mpartition", n, regime=regime)
        _, res = run_at(ctx.prepared("mpartition", n, regime), SimConfig(policy="adaptive", seed=ctx.seed), rate,
                        ctx.budget)
        p2p = ctx.prepared("p2p", n, regime)
        util[regime] = {"bluedove": res["busy_s"] / res["span_s"],
                        "p2p": load * ctx.saturation("p2p", n, regime=regime) * p2p.work_per_message("random")}
    first, rest = ctx.regimes[0], ctx.regimes[1:]
    rows = []
    for j in range(n):
        row = {"matcher": j, **{s: _r(util[first][s][j]) for s in ("bluedove", "p2p")}}
        for regime in rest:
            row[regime] = {s: _r(util[regime][s][j]) for s in ("bluedove", "p2p")}
        rows.append(row)
    som = {regime: {s: _r(np.std(v) / np.mean(v)) for s, v in util[regime].items()} for regime in ctx.regimes}
    std_over_mean = {**som[first], **{r: som[r] for r in rest}}
    return {"figure": "8", "unit": f"busy fraction per matcher at {load:g} x saturation", "rows": rows,
            "std_over_mean": std_over_mean, "paper": paper.FIG_8}


def fig_11(ctx: Context, n: int = 20) -> list[dict]:
    """11a: searchable dimensions 1..4 (all four predicates kept); 11b: subscription skew; 11c: adverse messages."""
    def sat(regime: str, **kw) -> int:
        return round(ctx.saturation("mpartition", n, regime=regime, **kw))

    variants = [{}, {"sigma": 500.0}, {"sigma": 750.0}, {"sigma": 1000.0}] + [{"adverse": j} for j in (1, 2, 3, 4)]
    ctx.prefetch([ctx.key("mpartition", n, regime=r, k=k) for k in (1, 2, 3) for r in ctx.regimes]
                 + [ctx.key("mpartition", n, regime=r, **v) for v in variants for r in ctx.regimes]
                 + [ctx.key("p2p", n, regime=r) for r in ctx.regimes])
    a = [{"dims": k, **_both(ctx, lambda r, k=k: {"bluedove": sat(r, k=k)})} for k in (1, 2, 3, 4)]
    b = []
    for sigma in (250.0, 500.0, 750.0, 1000.0):
        var = {"sigma": sigma} if sigma != 250.0 else {}
        sizes = build("mpartition", ctx.workload(**var), n).sizes
        b.append({"sigma": int(sigma), "max_over_mean_subs": _r(sizes.max() / sizes.mean()),
                  **_both(ctx, lambda r, var=var: {"bluedove": sat(r, **var)})})
    c = [{"adverse_dims": j, **_both(ctx, lambda r, j=j: {"bluedove": sat(r, **({"adverse": j} if j else {})),
                                                          "p2p_uniform": round(ctx.saturation("p2p", n, regime=r))})}
         for j in (0, 1, 2, 3, 4)]
    for rows, key, base in ((a, "over_one_dim", a[0]), (b, "over_sigma_250", b[0]), (c, "over_uniform", c[0])):
        for row in rows:
            row[key] = _r(row["bluedove"] / base["bluedove"])
            for regime in ctx.regimes[1:]:
                row[regime][key] = _r(row[regime]["bluedove"] / base[regime]["bluedove"])
    unit = f"msg/s at saturation, {n} matchers, adaptive"
    return [{"figure": "11a", "unit": unit, "rows": a, "paper": paper.FIG_11A},
            {"figure": "11b", "unit": unit, "rows": b, "paper": paper.FIG_11B},
            {"figure": "11c", "unit": unit, "rows": c, "paper": paper.FIG_11C}]
