"""bluedove/lab/sim/refit.py: the service model fitted from capped bench results (the walk's scale,
a cost per message and one per Forward call), read from the bench's JSON, and a simulated
saturation that scales with the matchers' cores net of their background."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from bluedove.lab.sim.costmodel import CostModel, Models
from bluedove.lab.sim.refit import Observed, ServiceFit, compare, fit_service, read_runs, simulate
from bluedove.lab.sim.saturation import Budget

KERNEL = Models(CostModel({"one": 2e-6, "searched": 2e-9, "matches": 5e-8}, "rtree"),
                CostModel({"one": 4e-6, "searched": 4e-8, "matches": 4e-7}, "per_dimension"))
QUICK = Budget(horizon_s=2.0, warmup_s=0.5, steps=3)


def row(system: str, per_call: float, rest: float, cores: float = 0.15, background: float = 0.0,
        matchers: int = 4) -> Observed:
    return Observed(system, matchers, cores, 1000.0, 20.0, rest, per_call, 16.0, background)


def test_the_fit_recovers_a_cost_per_message_and_per_call():
    rows = [row(s, m, 12.0 + 400.0 / m) for s, m in (("mpartition", 50), ("p2p", 80), ("full-replication", 250))]
    fit = fit_service(rows)
    assert fit.c0_us == pytest.approx(12.0, abs=1e-3) and fit.c_call_us == pytest.approx(400.0, abs=0.1)
    assert fit.rel_rms < 1e-6
    model = fit.model(KERNEL.rtree, per_call=100, a=1.25)
    assert model.terms["searched"] == pytest.approx(1.25 * 2e-9)
    assert model.terms["one"] == pytest.approx(1.25 * 2e-6 + (12.0 + 4.0) * 1e-6)


def test_one_call_size_cannot_separate_the_two_costs():
    with pytest.raises(ValueError, match="calls of different sizes"):
        fit_service([row("mpartition", 50, 20.0), row("p2p", 50, 21.0), row("full-replication", 50, 19.0)])


def test_a_run_is_read_per_system_and_one_without_a_cpu_limit_is_refused(tmp_path):
    cpu = {"matcher_walk_us_per_msg": 18.0, "matcher_outside_walk_net_us_per_matched": 15.0,
           "messages_per_forward_call": 75.0, "kernel_us_per_msg": 15.0}
    run = {"matchers": 4, "matcher_cpu": 0.15, "workload": "paper", "subscriptions": 40_000, "systems": {
        "mpartition": {"msgs_per_s": 13000, "cpu": cpu, "idle_cpu_pct": {"m1": 2.0, "m2": 3.0, "d1": 9.0}}}}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    [got] = read_runs([str(path)])
    assert got == Observed("mpartition", 4, 0.15, 13000.0, 18.0, 15.0, 75.0, 15.0, 0.025)
    path.write_text(json.dumps({**run, "matcher_cpu": None}))
    with pytest.raises(ValueError, match="--matcher-cpu"):
        read_runs([str(path)])
    path.write_text(json.dumps({**run, "workload": "paper(adverse=2)"}))
    with pytest.raises(ValueError, match="paper at 40,000"):
        read_runs([str(path)])


def test_the_simulated_rate_is_that_of_the_cores_left_after_the_background():
    fit = ServiceFit(10.0, 500.0, 3, 0.0)
    full = simulate(KERNEL, fit, row("p2p", 100, 0.0, cores=0.2), budget=QUICK)
    half = simulate(KERNEL, fit, row("p2p", 100, 0.0, cores=0.2, background=0.1), budget=QUICK)
    assert half == pytest.approx(full / 2)


def test_compare_gives_each_rate_and_the_ratios_of_bluedove():
    rows = [row(s, m, 12.0 + 400.0 / m, matchers=2) for s, m in (("mpartition", 50), ("p2p", 80),
                                                                  ("full-replication", 250))]
    out = compare(KERNEL, rows)
    assert [r["system"] for r in out["rows"]] == ["mpartition", "p2p", "full-replication"]
    assert all(r["simulated"] > 0 and r["sim_over_real"] == pytest.approx(r["simulated"] / 1000, abs=1e-3)
               for r in out["rows"])
    assert [(r["matchers"], r["over"]) for r in out["ratios"]] == [(2, "p2p"), (2, "full-replication")]
    assert all(r["real"] == 1.0 for r in out["ratios"])


def test_the_simulated_walk_costs_what_the_run_measured():
    """The kernel model is scaled to the measured walk: twice the walk, with nothing else, half the rate."""
    fit = ServiceFit(0.0, 0.0, 3, 0.0)
    one = simulate(KERNEL, fit, replace(row("p2p", 100, 0.0), walk_us=20.0), budget=QUICK)
    two = simulate(KERNEL, fit, replace(row("p2p", 100, 0.0), walk_us=40.0), budget=QUICK)
    assert two == pytest.approx(one / 2, rel=1e-6)
    assert 0 < one <= 4 * 0.15 / 20e-6 * 1.001  # no better than the mean walk spread perfectly
