"""The simulator against a small real cluster: matcher-tier saturation within 25 % and the same policy ranking."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from bluedove.cli.bench_e2e import _bodies, _subscribe, step
from bluedove.cli.calibrate import calibrate
from bluedove.sim.engine import Pool, SimConfig
from bluedove.sim.layouts import build, expected_matches
from bluedove.sim.saturation import Budget, saturation_rate
from bluedove.workloads.paper import get as get_workload
from tests.integration.conftest import start_cluster

pytestmark = pytest.mark.integration

MATCHERS = 3
# Messages skewed like the subscriptions on all four dimensions (seed 001 §IV-F): with three
# matchers the middle one is the candidate of two hot dimensions, so a random choice
# overloads it and a load-aware one does not.
WORKLOAD = dict(n_subs=3000, adverse=4)
RATE = 1500.0


def real_saturation(tmp_path, policy: str, w) -> float:
    """Matcher-tier saturation from the matchers' own reports at a steady rate: the rate at
    which the busiest matcher would be busy all the time, 1 / max_m Σ_i (λ_mi / μ_mi) / Λ."""
    cluster = start_cluster(tmp_path / policy, matchers=MATCHERS, policy=policy, deliver="count")
    try:
        asyncio.run(_subscribe(cluster.url, w))
        time.sleep(1.5)
        step(cluster.url, RATE, 8.0, _bodies(w, 20, 100, 1), 100, 1)
        members = cluster.cluster_state()["members"]
    finally:
        cluster.stop()
    busy, total = [], 0.0
    for m in members:
        loads = m["load"].values()
        total += sum(d["lambda"] for d in loads)
        busy.append(sum(d["lambda"] / d["mu"] for d in loads if d["mu"] > 0))
    return total / max(busy)


@pytest.mark.xfail(strict=False, reason="not met yet (docs/reproduction.md, 'Simulator against a real run'): the "
                   "simulator ranks adaptive below random on this 3-matcher adverse case")
def test_simulator_matches_a_real_cluster(tmp_path):
    w = get_workload("paper", seed=1, **WORKLOAD)
    model = calibrate(seed=1, per_set=60, repeat=2, budget_s=6.0, say=lambda s: None)
    pts = w.sample(4000, np.random.default_rng([1, 1]))
    pool = Pool(pts, expected_matches(w, pts))
    layout = build("mpartition", w, MATCHERS)
    budget = Budget(horizon_s=8.0, warmup_s=2.0, messages=30_000, steps=6)
    sim = {p: saturation_rate(layout, model, pool, SimConfig(policy=p), budget) for p in ("adaptive", "random")}
    real = {p: real_saturation(tmp_path, p, w) for p in ("adaptive", "random")}
    print(f"simulated {sim}, real (matcher tier) {real}")
    assert sim["adaptive"] > sim["random"] and real["adaptive"] > real["random"]
    assert abs(real["random"] - sim["random"]) / sim["random"] < 0.25
