"""The scaling policy as tables of load histories and the decisions they must give."""

import random
import re
from dataclasses import fields
from pathlib import Path

import pytest

from bluedove.autoscaler.policy import Decision, LoadSample, ScalingConfig, matcher_demand, plan

C = ScalingConfig(min_matchers=2, max_matchers=8, window_s=10, in_window_s=60, out_cooldown_s=15,
                  in_cooldown_s=60)


def history(busy, matchers=2, queued=None, end=100.0, step=1.0):
    """Samples ending at `end`, one per `step` s, oldest first; busy/queued: value or per-sample list."""
    n = len(busy) if isinstance(busy, list) else int(70 / step)
    busy = busy if isinstance(busy, list) else [busy] * n
    queued = queued if isinstance(queued, list) else [queued or 0] * n
    return [LoadSample(end - (n - 1 - i) * step, matchers, b * matchers, q)
            for i, (b, q) in enumerate(zip(busy, queued))]


@pytest.mark.parametrize("name,loads,members,last_change,expect_action,expect_target", [
    ("saturated: busy over 0.8 the whole window", history(0.95), 2, None, "scale_out", 4),
    ("far over: more than one at once", history(2.5), 2, None, "scale_out", 6),
    ("far over, capped by max_step", history(5.0), 3, None, "scale_out", 7),
    ("queues growing even at moderate busy", history(0.7, queued=[i * 50 for i in range(70)]), 2, None, "scale_out", 3),
    ("at the maximum: hold", history(0.95, matchers=8), 8, None, "hold", 8),
    ("out cooldown respected", history(0.95), 2, 95.0, "hold", 2),
    ("a short burst is absorbed", history([0.3] * 65 + [0.99] * 5), 2, None, "hold", 2),
    ("one dip in the window: not saturated", history([0.9] * 64 + [0.5] + [0.9] * 5), 2, None, "hold", 2),
    ("idle for a long window: in by one", history(0.05, matchers=4), 4, None, "scale_in", 3),
    ("idle but in cooldown", history(0.05, matchers=4), 4, 60.0, "hold", 4),
    ("idle at the minimum: hold", history(0.05), 2, None, "hold", 2),
    ("below the minimum: out to it", history(0.1, matchers=1), 1, None, "scale_out", 2),
    ("above the maximum: in to it", history(0.1, matchers=9), 9, None, "scale_in", 8),
    ("no history yet", history([0.9, 0.9]), 2, None, "hold", 2),
])
def test_plan(name, loads, members, last_change, expect_action, expect_target):
    d = plan(loads, members, now=100.0, last_change_at=last_change, config=C)
    assert (d.action, d.target) == (expect_action, expect_target), (name, d)
    assert d.reason


def test_scale_in_only_if_the_rest_stay_under_the_target():
    loose = ScalingConfig(min_matchers=2, in_busy=0.5, target_busy=0.6)
    d = plan(history(0.45, matchers=3), 3, now=100.0, config=loose)  # 1.35 / 2 = 0.675 > 0.6
    assert d.action == "hold"
    assert plan(history(0.35, matchers=3), 3, now=100.0, config=loose).action == "scale_in"  # 0.525


def test_noise_around_a_steady_load_never_flaps():
    rng = random.Random(3)
    loads, members, last, decisions = [], 4, None, []
    for t in range(600):
        busy = min(max(rng.gauss(0.5, 0.12), 0), 2)  # steady, noisy, between the bounds
        loads.append(LoadSample(float(t), members, busy * members, rng.choice([0, 0, 3, 10])))
        d = plan(loads, members, float(t), last, C)
        if d.action != "hold":
            decisions.append((t, d))
            members, last = d.target, float(t)
    assert decisions == []


def test_a_rise_then_a_fall_scales_out_then_back_in_one_at_a_time():
    loads, members, last, actions = [], 2, None, []
    for t in range(400):
        demand = 3.0 if 20 <= t < 150 else 0.2  # matchers' worth of work
        loads.append(LoadSample(float(t), members, demand, 0))
        d = plan(loads, members, float(t), last, C)
        if d.action != "hold":
            actions.append((t, d.action, d.target))
            members, last = d.target, float(t)
    assert actions[0][1:] == ("scale_out", 5)  # 3.0 / 0.6 = 5 matchers, in one step
    ins = [a for a in actions if a[1] == "scale_in"]
    assert ins and all(b[0] - a[0] >= C.in_cooldown_s for a, b in zip(ins, ins[1:]))
    assert [a[2] for a in ins] == list(range(4, 4 - len(ins), -1))
    assert isinstance(plan(loads, members, 400.0, last, C), Decision)


@pytest.mark.parametrize("name,busy,cores,used,throttled,expect", [
    ("no limit known (an older matcher's report): its λ/μ", 0.1, 0.0, 0.0, 0.0, (0.1, False)),
    ("throttled in most periods: a whole matcher's worth", 0.12, 0.2, 0.9, 0.69, (1.0, True)),
    ("at 95 % of its quota: the same", 0.3, 0.2, 0.95, 0.1, (1.0, True)),
    ("at its limit and λ/μ above 1: λ/μ", 1.4, 0.2, 1.0, 0.8, (1.4, True)),
    ("a few throttled periods under the limit: its λ/μ", 0.4, 0.2, 0.6, 0.2, (0.4, False)),
    ("exactly the throttled share: not over it", 0.4, 0.2, 0.6, 0.5, (0.4, False)),
])
def test_a_matcher_at_its_cpu_limit_counts_as_saturated(name, busy, cores, used, throttled, expect):
    assert matcher_demand(busy, cores, used, throttled, ScalingConfig()) == expect, name


def test_matchers_held_at_their_cpu_limit_scale_out_and_say_so():
    """λ/μ reads 0.1 per matcher (μ measured on CPU the quota does not give), yet both are
    throttled: each counts 1, and the reason names the limit."""
    loads = [LoadSample(float(t), 2, sum(matcher_demand(0.1, 0.2, 0.97, 0.7, C)[0] for _ in range(2)), 0, at_limit=2)
             for t in range(31, 101)]
    d = plan(loads, 2, now=100.0, config=C)
    assert (d.action, d.target) == ("scale_out", 4), d
    assert "2 at their CPU limit (throttled in over 50% of their periods, or using 95% of it)" in d.reason
    unheld = [LoadSample(s.at, 2, 0.2, 0) for s in loads]  # the same λ/μ without the limit: idle
    assert plan(unheld, 2, now=100.0, config=C).action == "hold"


def test_every_setting_is_in_the_operations_table_with_its_default():
    """docs/operations.md, "The autoscaler": one row per ScalingConfig field (BLUEDOVE_<FIELD>)."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "operations.md").read_text()
    for f in fields(ScalingConfig):
        row = re.search(rf"^\| `BLUEDOVE_{f.name.upper()}` \| ([^|]+) \|", text, re.M)
        assert row, f"docs/operations.md: no row for BLUEDOVE_{f.name.upper()}"
        assert float(row.group(1)) == float(f.default), (f.name, row.group(1), f.default)
