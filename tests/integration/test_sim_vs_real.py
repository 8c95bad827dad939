"""The simulator against a small real cluster: where adaptive and random forwarding put the load, and its saturation.

On 2 shared cores the real cluster saturates in the HTTP/dispatch tier long before its
matchers do (docs/benchmarks.md, e2e / kernel), and the simulator models only the matcher
tier; worse, a matcher's own μ is wall time, stretched by every other process on the two
cores (publisher, dispatchers, three matchers, Redis, other test runs). So this compares
the part both model, at a rate well inside the dispatcher's capacity: three matchers with
`--deliver count`, the `paper` workload with 20,000 subscriptions, one steady rate per
policy (two dispatchers on the same matchers, one adaptive, one random). The real routing is
read from the matchers' reports (`/v1/cluster` loads: arrival rate λ per matcher and
dimension over the last 5 s); the simulator routes the same rate through its own
dispatchers (reports as bluedove/dispatcher/view.py fetches them). Per-message costs come from a
model fitted here (`bluedove sim calibrate`'s method on a small plan, thread CPU time), each
set's scaled by how much slower that real set ran: (1/μ it reported in the random run, which
feeds every set) / (the model's mean cost on it). At this rate the real matchers run small
batches on two overloaded cores, and their wall time per message is 5–20× the model's and
nearly the same on every set (the model's costs differ 16× between sets): the per-set
factors give the simulator the per-set processing rates the real dispatcher saw in
`/v1/cluster`, so what is compared is routing, reports and queueing. Both routings, costed
alike, give the matcher tier's projected saturation:
rate / the busiest matcher's busy fraction Σ_i λ_i · cost_i.

Checked: adaptive forwarding beats random on the real cluster. At this rate the matchers are
~1 % busy, so adaptive sends each message to the candidate set that costs least (the backlog
terms are near zero) while `sent` keeps the matchers' work level: it does less work per
message, by more than a run's noise (WORK_TIE), and its busiest matcher carries no more than
random's, within the noise. Since the matchers' paths around the walk got cheap, the real costs are close to
the model's (factors ~0.6–2.5, one small set ~5) and the busiest-matcher projection alone no
longer tells the two apart by much: adaptive/random 1.05–1.58 in nine runs on 2026-11-24 (it was ~2.2 when
the costs were 2.6–7.5× the model's, 2026-11-23), while the work per message is 1.47–1.66×
lower under adaptive (1.47–1.66). The check fails if adaptive is no cheaper than random, or cheaper only
within the noise, or if it herds the load onto one matcher. And random's projected saturation
is within 25 % between the simulator and the real cluster.

Not checked: whether the simulator ranks adaptive ahead of random as the real cluster does. Its
adaptive/random ratio swings from run to run with the per-set cost factors (the machine's load):
0.93–1.08 in earlier runs, 1.22 and 2.37 in two runs on 2026-11-23, against a steady ~2.2 real.
A tie band wide enough for that swing (as the 30 % one this check had) can never fail, and one
narrow enough to mean something fails at random, so the simulator's projections are printed,
not bounded: it lacks that a real set that receives more messages runs larger batches and gets
cheaper per message, and that its reported μ wobbles from report to report
(docs/reproduction.md, "Simulator against a real run").
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import numpy as np
import pytest

from bluedove.core.model import build_subscription
from bluedove.lab.bench.e2e import batch_bodies, step
from bluedove.lab.sim.calibrate import calibrate
from bluedove.lab.sim.engine import Pool, SimConfig
from bluedove.lab.sim.layouts import build
from bluedove.lab.sim.saturation import Budget, Prepared, run_at
from bluedove.lab.workloads.paper import get as get_workload
from bluedove.store.server import RedisServer
from bluedove.store.store import Store
from tests.integration.conftest import start_cluster
from tests.integration.helpers import extra_dispatcher

pytestmark = [pytest.mark.integration, pytest.mark.lab]

MATCHERS = 3
WORKLOAD = dict(n_subs=20_000)
RATE = 800.0  # msg/s: well inside one dispatcher's capacity on the loaded 2 cores
STEP_S = 16.0  # reads start after 7 s: the matchers' 5 s window then covers one policy only
READS = 6
TIE = 0.30  # run-to-run noise: real adaptive/random ratios of identical runs here, 0.80–1.28 (2026-11-22)
# Adaptive's work per message is lower than random's by more than this: 1.47–1.66× on an idle
# machine (2026-11-24), 1.30 on one loaded ~4× (2026-11-28), where every set's μ is stretched alike.
WORK_TIE = 0.15
PLAN = (("paper", {"n_subs": 20_000}, 3, 12), ("paper", {"n_subs": 20_000}, 1, 1), ("paper", {"n_subs": 5_000}, 3, 12))


def populate(url: str, w) -> None:
    """Write the subscriptions straight into the catalogue (what POST /v1/subscriptions does
    first), pipelined; matchers started afterwards load them from it. 20,000 REST calls would
    take minutes."""
    async def main() -> None:
        store = Store(url)
        try:
            queues = [(await store.create_queue())[0] for _ in range(w.n_subs // 5000 + 1)]
            await store.add_subscriptions([build_subscription(f"s{j}", queues[j // 5000], w.predicates(j),
                                                              w.space).to_json() for j in range(w.n_subs)])
        finally:
            await store.close()

    asyncio.run(main())


def add_dispatcher(cluster, policy: str) -> str:
    """A second dispatcher on the same matchers and store, with its own policy; returns its URL."""
    return extra_dispatcher(cluster, f"d-{policy}", ["--policy", policy])[0]


def real_loads(cluster, url: str, w) -> tuple[np.ndarray, np.ndarray]:
    """Hold RATE through `url`; (matchers, k) arrival rates λ and matching rates μ from the
    matchers' reports, averaged over READS reads in the step's second half (one 5 s window
    alone swings with where the dispatcher herded in it)."""
    pub = threading.Thread(target=step, args=(url, RATE, STEP_S, batch_bodies(w, 20, 100, 1), 100, 1))
    pub.start()
    lam, mu = [], []
    try:
        time.sleep(STEP_S - READS * 1.5)
        for _ in range(READS):
            members = sorted(cluster.cluster_state()["members"], key=lambda m: int(m["id"][1:]))  # m1.. = the table's
            lam.append([[m["load"][d.name]["lambda"] for d in w.space.dimensions] for m in members])
            mu.append([[m["load"][d.name]["mu"] for d in w.space.dimensions] for m in members])
            time.sleep(1.5)
    finally:
        pub.join()
    return np.mean(lam, axis=0), np.max(mu, axis=0)


def set_factors(lam: np.ndarray, mu: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """(matchers, k) how much slower each real set ran than the model says (wall time of the real
    matcher's batches over the model's CPU time), from the random run, which feeds every set."""
    fed = (lam > 1.0) & (mu > 0)
    assert fed.all(), f"random forwarding left sets unfed: {lam}"
    return (1.0 / mu) / unit


def projected(lam: np.ndarray, unit_cost: np.ndarray) -> float:
    """Rate / the busiest matcher's busy fraction, with busy = Σ_i λ_i · cost_i."""
    return float(lam.sum() / (lam * unit_cost).sum(axis=1).max())


def work_per_message(lam: np.ndarray, unit_cost: np.ndarray) -> float:
    """The matcher tier's cost of an average message: Σ λ_i · cost_i / Σ λ_i."""
    return float((lam * unit_cost).sum() / lam.sum())


def simulated(prep: Prepared, factors: np.ndarray) -> dict:
    """Projected saturation of both policies at RATE, each set's costs scaled by its factor."""
    cols = np.arange(prep.cand.shape[1])
    scaled = replace(prep, cost=prep.cost * factors[prep.cand, cols])
    # the adaptive phase goes through one dispatcher, after the random phase fed every set (μ known)
    cfg = SimConfig(policy="adaptive", dispatchers=1, warm=True)
    _, res = run_at(scaled, cfg, RATE, Budget(horizon_s=STEP_S, warmup_s=STEP_S - READS * 1.5 - 5.0))
    return {"adaptive": RATE / (res["busy_s"] / res["span_s"]).max(),
            "random": 1.0 / scaled.work_per_message("random").max()}


def unit_costs(prep: Prepared) -> np.ndarray:
    """(matchers, k) mean cost of a message on matcher m's dim-i set, over the messages whose candidate it is."""
    n, k = prep.layout.n, prep.cand.shape[1]
    out = np.zeros((n, k))
    for i in range(k):
        total = np.bincount(prep.cand[:, i], weights=prep.cost[:, i], minlength=n)
        out[:, i] = total / np.maximum(np.bincount(prep.cand[:, i], minlength=n), 1)
    return out


@pytest.fixture(scope="module")
def projections(tmp_path_factory) -> tuple[dict, dict, dict]:
    """(simulated, real) projected saturation per policy and the real work per message (s):
    one real run shared by the checks."""
    tmp_path = tmp_path_factory.mktemp("sim_vs_real")
    t0 = time.monotonic()
    w = get_workload("paper", seed=1, **WORKLOAD)
    model = calibrate(seed=1, budget_s=10.0, say=lambda s: None, plan=PLAN, repeat=3).rtree
    pool = Pool.of(w, w.sample(8000, np.random.default_rng([1, 1])))
    prep = Prepared.of(build("mpartition", w, MATCHERS), model, pool)
    unit = unit_costs(prep)
    redis = RedisServer(tmp_path / "redis").start()
    try:
        populate(redis.url, w)
        cluster = start_cluster(tmp_path / "c", matchers=MATCHERS, policy="adaptive", deliver="count",
                                store=redis.url)
        try:
            random_url = add_dispatcher(cluster, "random")
            loads = {"random": real_loads(cluster, random_url, w), "adaptive": real_loads(cluster, cluster.url, w)}
        finally:
            cluster.stop()
    finally:
        redis.stop()
    factors = set_factors(*loads["random"], unit)
    sim = simulated(prep, factors)
    real = {p: projected(lam, unit * factors) for p, (lam, _) in loads.items()}
    work = {p: work_per_message(lam, unit * factors) for p, (lam, _) in loads.items()}
    print(f"projected matcher-tier saturation at {RATE:g} msg/s: simulated {sim}, real {real};"
          f" real work per message (µs) { {p: round(v * 1e6, 1) for p, v in work.items()} };"
          f" real/model cost per set {factors.round(1).tolist()};"
          f" real λ {({p: v[0].round(1).tolist() for p, v in loads.items()})}; {time.monotonic() - t0:.0f} s")
    return sim, real, work


def test_random_forwarding_saturates_alike_in_the_simulator_and_the_real_cluster(projections):
    # Within 25 %: random forwarding is load-blind, so its projection is exact on both sides.
    sim, real, _ = projections
    assert abs(real["random"] - sim["random"]) / sim["random"] < 0.25, (sim, real)


def test_adaptive_forwarding_beats_random_on_the_real_cluster(projections):
    # less work per message by more than a run's noise (WORK_TIE), and no hot spot
    _, real, work = projections
    assert work["random"] > (1 + WORK_TIE) * work["adaptive"], work
    assert real["adaptive"] * (1 + TIE) >= real["random"], real
