"""`bluedove sim calibrate`: time the real matcher's SubscriptionSet on the paper workload and fit the cost model."""

from __future__ import annotations

import datetime
import os
import platform
import time

import numpy as np

from bluedove.segments import equal_partition
from bluedove.sim.costmodel import CostModel, fit
from bluedove.sim.layouts import member_ranges
from bluedove.workloads import Workload
from bluedove.workloads.paper import get as get_workload
from matcher.index import SubscriptionSet

# (workload, variant, partitions): set sizes from ~1,000 to 40,000 and 1 to ~600 matches per
# message. Partitions 1 is one set of all subscriptions (full replication).
PLAN = (
    ("paper", {}, 1), ("paper", {"n_subs": 10_000}, 1), ("paper", {"sigma": 1000.0}, 1),
    ("paper", {}, 4), ("paper", {}, 10), ("paper", {}, 20),
    ("sparse", {"n_subs": 20_000}, 4), ("paper", {"sigma": 1000.0}, 6), ("paper", {"n_subs": 80_000}, 8),
)


def _machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{os.cpu_count()} cores {model} {platform.machine()}, Python {platform.python_version()}".strip()


def _sets(w: Workload, partitions: int) -> list[tuple[int, float, float, SubscriptionSet, float]]:
    """Every (dim, segment) set of an equal mPartition (one set for partitions=1) with its build time."""
    out = []
    sub_ids = [str(j) for j in range(w.n_subs)]
    queues = sub_ids
    if partitions == 1:
        s = SubscriptionSet(w.space.k)
        t0 = time.perf_counter()
        s.add_many(sub_ids, queues, w.lows, w.highs)
        return [(0, w.space.dimensions[0].min, w.space.dimensions[0].max, s, time.perf_counter() - t0)]
    members = tuple(f"m{j}" for j in range(partitions))
    table = equal_partition(w.space, {m: "" for m in members})
    for i in range(w.space.k):
        lo, hi = member_ranges(table, members, i)
        for a, b in zip(lo.tolist(), hi.tolist()):
            rows = np.nonzero((w.lows[:, i] < b) & (a < w.highs[:, i]))[0]
            s = SubscriptionSet(w.space.k)
            t0 = time.perf_counter()
            s.add_many([sub_ids[r] for r in rows], [queues[r] for r in rows], w.lows[rows], w.highs[rows])
            out.append((i, a, b, s, time.perf_counter() - t0))
    return out


def calibrate(seed: int = 1, per_set: int = 120, repeat: int = 3, budget_s: float = 20.0, say=print) -> CostModel:
    """Time `match_batch` (what a matcher's worker calls) per set on messages whose candidate it is."""
    rows = []  # (searched, matches per msg, seconds per msg, messages)
    loaded, load_s = 0, 0.0
    started = time.perf_counter()
    rng = np.random.default_rng([seed, 3])
    for name, variant, partitions in PLAN:
        if time.perf_counter() - started > budget_s:
            say(f"calibrate: time budget of {budget_s:.0f} s reached; fitting what was measured")
            break
        w = get_workload(name, seed=seed, **variant)
        pool = w.sample(max(4000, per_set * partitions * 2), rng)
        sets = _sets(w, partitions)
        for dim, a, b, s, build_s in sets:
            loaded, load_s = loaded + len(s), load_s + build_s
            pts = pool[(pool[:, dim] >= a) & (pool[:, dim] < b)][:per_set]
            if len(pts) < 10 or len(s) == 0:
                continue
            best = np.inf
            for _ in range(repeat):
                t0 = time.perf_counter()
                groups = s.match_batch(pts)
                best = min(best, time.perf_counter() - t0)
            matches = sum(len(v) for g in groups for v in g.values()) / len(pts)
            rows.append((len(s), matches, best / len(pts), len(pts)))
        say(f"calibrate: {w.name} x {partitions} partition(s): {len(sets)} sets timed")
    arr = np.array(rows)
    model, stats = fit(arr[:, 0], arr[:, 1], arr[:, 2], weights=arr[:, 3])
    meta = {
        "machine": _machine(), "date": datetime.date.today().isoformat(),
        "method": "match_batch on each set of an equal mPartition, best of "
                  f"{repeat}, up to {per_set} messages per set; weighted least squares on relative error",
        "fit": stats, "sets": len(rows), "calibration_s": round(time.perf_counter() - started, 1),
        "samples": [{"searched": int(r[0]), "matches": round(r[1], 1), "us_per_msg": round(r[2] * 1e6, 2)}
                    for r in rows[:: max(1, len(rows) // 40)]],
    }
    return CostModel(model.a, model.b, model.c, load_s_per_sub=load_s / max(loaded, 1), meta=meta)
