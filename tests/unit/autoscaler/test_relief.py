"""The check after a scale-out (bluedove/autoscaler/relief.py) and the policy's saturation gate, driven
through `relief.step` (what the autoscaler's loop runs) by small simulated clusters: what the
samples show as a function of the matchers running."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.autoscaler.policy import LoadSample, ScalingConfig, plan
from bluedove.autoscaler.relief import LIMITS, Stop, Trial, bottleneck, name_limit, step

C = ScalingConfig(min_matchers=2, max_matchers=8, window_s=10, in_window_s=60, out_cooldown_s=15,
                  in_cooldown_s=60, check_settle_s=5, check_timeout_s=60, retry_s=300)


def drive(world, seconds: int, c: ScalingConfig = C, members: int = 2, join_s: int = 3):
    """Run the loop once a second for `seconds`: `world(t, matchers)` gives the sample's fields
    besides time and matchers; a new matcher serves `join_s` after it is started. Returns
    [(t, kind, detail)] for every decision that acted and every verdict, and the matchers."""
    loads, check, last, log = [], None, None, []
    serving, started = members, []
    for t in range(seconds):
        serving = members - sum(1 for at in started if t - at < join_s)
        loads.append(LoadSample(float(t), serving, **world(t, serving)))
        d, check, v = step(check, loads, members, float(t), last, c)
        if v is not None:
            log.append((t, v.outcome, v))
        if d.action != "hold":
            log.append((t, d.action, d.target))
            started += [t] * max(0, d.target - members)
            members, last = d.target, float(t)
    return log, members


def cpu_bound(busy: float = 0.95, **readings):
    """Matchers that stay busy whatever their number (they share a CPU with what limits the
    rate); the accepted rate and p50 do not move."""
    def world(t, n):
        return {"demand": busy * n, "queued": 50, "accepted": 3500.0, "p50_s": 1.0, **readings}
    return world


def matcher_bound(offered=lambda t: 2000.0, capacity: float = 1000.0):
    """Matchers are the limit: each matches `capacity` msg/s; what they cannot take waits
    (p50 1 s), what they can is accepted."""
    def world(t, n):
        accepted = min(offered(t), capacity * n)
        busy = accepted / (capacity * n)
        return {"demand": busy * n, "queued": 0, "accepted": accepted, "p50_s": 1.0 if busy >= 0.95 else 0.05}
    return world


def actions(log, kind):
    return [e for e in log if e[1] == kind]


# -- never scales out when the matchers are not saturated -------------------------------------
@settings(max_examples=150, deadline=None)
@given(busy=st.lists(st.floats(0, 3), min_size=25, max_size=25), dip=st.integers(15, 24),
       queued=st.lists(st.integers(0, 150), min_size=25, max_size=25), members=st.integers(2, 7),
       p50=st.floats(0, 30), disp=st.floats(0, 2), store=st.floats(0, 2), accepted=st.floats(0, 1e5))
def test_never_scales_out_when_the_matchers_are_not_saturated(busy, dip, queued, members, p50, disp, store, accepted):
    """Whatever the latency, the rate and the other components' CPU: one sample of the window
    at or under out_busy and queues that do not grow by queue_growth is no saturation."""
    busy[dip] = min(busy[dip], C.out_busy)
    while busy[dip] * members / members > C.out_busy:  # the sample's busy is demand / matchers: at most out_busy
        busy[dip] = math.nextafter(busy[dip], 0.0)
    loads = [LoadSample(float(t), members, b * members, q, accepted=accepted, p50_s=p50, dispatcher_cpu=disp,
                        store_cpu=store, host_cpu=1.0) for t, (b, q) in enumerate(zip(busy, queued))]
    assert plan(loads, members, 24.0, None, C).action != "scale_out"


@settings(max_examples=100, deadline=None)
@given(busy=st.floats(0, C.in_busy - 0.01), members=st.integers(2, 7), step_q=st.integers(20, 500))
def test_growing_queues_at_idle_matchers_are_not_their_saturation(busy, members, step_q):
    loads = [LoadSample(float(t), members, busy * members, t * step_q) for t in range(25)]
    d = plan(loads, members, 24.0, None, C)
    assert d.action == "hold" and "store" in d.reason


# -- a scale-out that relieved nothing stops the next, and names the limit ---------------------
@pytest.mark.parametrize("readings,limit", [
    ({"dispatcher_cpu": 0.97, "store_cpu": 0.3, "host_cpu": 0.99}, "dispatchers"),
    ({"dispatcher_cpu": 0.5, "store_cpu": 0.95, "host_cpu": 0.99}, "store"),
    ({"dispatcher_cpu": 0.5, "store_cpu": 0.3, "store_errors": 1}, "store"),
    ({"dispatcher_cpu": 0.5, "store_cpu": 0.3, "host_cpu": 0.98}, "host"),
    ({"dispatcher_cpu": 0.5, "store_cpu": 0.3, "host_cpu": 0.5}, "unknown"),
    ({}, "unknown"),
])
def test_an_unrelieving_scale_out_stops_further_ones_and_names_the_limit(readings, limit):
    log, members = drive(cpu_bound(**readings), 250)
    outs = actions(log, "scale_out")
    assert len(outs) == 1 and outs[0][2] == members == 4, log  # 0.95 × 2 / 0.6 → 4
    [(t, _, v)] = actions(log, "not_relieved")
    assert v.limit == limit and v.limit in LIMITS
    named = {"dispatchers": "the dispatchers", "store": "the store", "host": "this host", "unknown": "unknown"}
    assert f"The limit is {named[limit]}" in v.reason, v.reason
    assert "did not relieve" in v.reason and "busy 0.95" in v.reason
    # Not before the new matchers served (3 s), settled (5 s) and were watched a window (10 s).
    assert t - outs[0][0] >= 3 + 5 + 10
    assert not actions(log, "resumed")


def test_a_scale_out_that_relieved_the_matchers_is_followed_by_more_when_needed():
    log, members = drive(matcher_bound(), 120)
    [(t0, _, first)] = actions(log, "scale_out")
    assert first == 4 and members == 4  # busy 1.0 × 2 / 0.6 in one step: relieved, no more needed
    [(_, _, v)] = actions(log, "relieved")
    assert "p50 fell: 1,000 → 50 ms" in v.reason
    # Offered twice as much once relieved: another scale-out, and more accepted.
    log, members = drive(matcher_bound(lambda t: 2000.0 if t < 60 else 4000.0), 200)
    outs = actions(log, "scale_out")
    assert [o[2] for o in outs] == [4, 7] and len(actions(log, "relieved")) == 2, log
    assert "accepted rate rose: 4,000" not in actions(log, "relieved")[1][2].reason


def test_matchers_merely_less_busy_is_no_relief_the_publishers_are_named_and_resume_when_they_send_more():
    """The work spread over more matchers makes each less busy, but the rate did not rise:
    the publishers send no more. When they do, scale-outs resume."""
    def world(t, n):
        rate = 2000.0 if t < 120 else 3000.0
        return {"demand": rate / 1000.0, "queued": 0, "accepted": rate, "p50_s": 0.01}
    log, members = drive(world, 200)
    [(t, _, v)] = actions(log, "not_relieved")
    assert v.limit == "publishers" and "not saturated (busy 0.50)" in v.reason, v.reason
    [(tr, _, r)] = actions(log, "resumed")
    assert 120 < tr <= 135 and "the publishers send more: accepted 2,000 → " in r.reason, log


@pytest.mark.parametrize("before,after,how", [
    ({"accepted": 3000.0}, {"accepted": 3400.0}, "accepted rate rose"),
    ({"p50_s": 1.0}, {"p50_s": 0.7}, "p50 fell"),
    ({"queued": "rising"}, {"queued": "flat"}, "queues stopped growing"),
])
def test_each_measure_of_relief(before, after, how):
    """Matchers that stay busy, but the scale-out did some good another way."""
    def world(t, n):
        now = after if n >= 4 and t > 5 else before
        q = {"rising": 100 * t, "flat": 3000}.get(now.get("queued"), 0)
        return {"demand": 0.95 * n, "queued": q, "accepted": now.get("accepted", 3000.0),
                "p50_s": now.get("p50_s", 1.0)}
    log, _ = drive(world, 60)
    [(_, _, v)] = actions(log, "relieved")
    assert how in v.reason, v.reason


def test_less_accepted_is_no_relief_though_the_backlog_and_p50_fell():
    def world(t, n):
        return {"demand": 0.95 * n, "queued": 100 * t if n < 4 else 0, "accepted": 3000.0 if n < 4 else 1500.0,
                "p50_s": 1.0 if n < 4 else 0.3}
    log, _ = drive(world, 60)
    assert actions(log, "not_relieved") and not actions(log, "relieved"), log


def test_a_low_p50_falling_is_no_relief():
    """Under relief_latency_floor_s a p50 that fell is noise, not a symptom that went."""
    def world(t, n):
        return {"demand": 0.95 * n, "queued": 0, "accepted": 500.0, "p50_s": 0.01 if n < 4 else 0.005}
    log, _ = drive(world, 60)
    assert actions(log, "not_relieved") and not actions(log, "relieved")


def test_a_scale_out_whose_matchers_never_serve_is_not_checked_and_does_not_stop_the_next():
    log, _ = drive(cpu_bound(dispatcher_cpu=0.99), 200, join_s=10_000)
    [(t, _, v)] = actions(log, "unchecked")[:1]
    assert "not checked" in v.reason and t - actions(log, "scale_out")[0][0] > C.check_timeout_s
    assert not actions(log, "not_relieved") and len(actions(log, "scale_out")) >= 2


# -- and resumes by the documented rule -------------------------------------------------------
def test_resumes_when_the_load_drops_then_scales_out_again_when_it_returns():
    def world(t, n):
        busy = 0.95 if t < 100 or t >= 200 else 0.1
        return {"demand": busy * n, "queued": 0, "dispatcher_cpu": 0.97, "host_cpu": 0.99}
    log, _ = drive(world, 260)
    kinds = [e[1] for e in log if e[1] != "scale_in"]
    assert kinds[:4] == ["scale_out", "not_relieved", "resumed", "scale_out"], log
    [(t, _, v)] = actions(log, "resumed")
    assert 100 < t <= 115 and "load dropped" in v.reason


def test_resumes_when_the_named_limit_goes_away():
    """The dispatchers were the limit; their CPU falls (an HPA added dispatchers) while the
    matchers stay saturated: one more scale-out is tried and checked."""
    log, _ = drive(lambda t, n: {"demand": 0.95 * n, "queued": 0, "dispatcher_cpu": 0.97 if t < 100 else 0.4}, 200)
    kinds = [e[1] for e in log]
    assert kinds[:5] == ["scale_out", "not_relieved", "resumed", "scale_out", "not_relieved"], log
    [(t, _, v)] = actions(log, "resumed")
    assert 100 < t <= 115 and "dispatchers CPU reading stayed under 0.75" in v.reason
    assert actions(log, "not_relieved")[1][2].limit == "unknown"


def test_resumes_after_retry_s_even_if_nothing_it_sees_changed():
    log, members = drive(cpu_bound(dispatcher_cpu=0.97), 700)
    outs = actions(log, "scale_out")
    stops = actions(log, "not_relieved")
    resumed = actions(log, "resumed")
    assert [o[2] for o in outs] == [4, 5, 6], log  # one try per retry_s, of one matcher, each checked
    assert [r[0] - s[0] for s, r in zip(stops, resumed)] == [C.retry_s, C.retry_s]
    assert all("300 s since the stop" in r[2].reason for r in resumed)


def test_resumes_when_fewer_matchers_run_than_at_the_stop():
    stop = Stop(at=100.0, matchers=4, limit="host", reason="")
    loads = [LoadSample(float(t), 3, 0.95 * 3, 0) for t in range(100, 120)]
    d, check, v = step(stop, loads, 3, 119.0, 100.0, C)
    assert v is not None and v.outcome == "resumed" and "fewer than the 4" in v.reason
    assert d.action == "scale_out" and isinstance(check, Trial)


@settings(max_examples=40, deadline=None)
@given(plan_=st.lists(st.tuples(st.floats(0, 2), st.floats(0, 1.2)), min_size=8, max_size=8))
def test_no_scale_out_while_a_check_runs_or_after_a_stop_until_resumed(plan_):
    """Random load and dispatcher CPU, 30 s each: a scale-out never follows a stop without a
    verdict that resumed in between, and never comes while a scale-out is being checked."""
    def world(t, n):
        busy, cpu = plan_[min(t // 30, len(plan_) - 1)]
        return {"demand": busy * n, "queued": 0, "dispatcher_cpu": cpu}
    log, _ = drive(world, 240)
    stopped = checking = False
    for t, kind, _ in log:
        if kind == "scale_out":
            assert not stopped and not checking, log
            checking = True
        elif kind in ("relieved", "unchecked"):
            checking = False
        elif kind == "not_relieved":
            stopped, checking = True, False
        elif kind == "resumed":
            stopped = False
        elif kind == "scale_in":
            stopped = checking = False


def test_below_the_minimum_is_not_checked():
    loads = [LoadSample(float(t), 1, 0.1, 0) for t in range(20)]
    d, check, _ = step(None, loads, 1, 19.0, None, C)
    assert (d.action, d.target, check) == ("scale_out", 2, None)


def test_the_bottleneck_now():
    base = [LoadSample(float(t), 2, 0.2, 0, accepted=100.0, dispatcher_cpu=0.1, store_cpu=0.05, host_cpu=0.2)
            for t in range(12)]
    assert bottleneck(base, C) == "publishers"
    assert name_limit(base, C)[1].startswith("the publishers")
    assert bottleneck([replace(s, demand=2.0) for s in base], C) == "matchers"
    assert bottleneck([replace(s, dispatcher_cpu=0.9) for s in base], C) == "dispatchers"
    assert bottleneck([replace(s, store_cpu=0.9) for s in base], C) == "store"
    assert bottleneck([replace(s, host_cpu=0.9) for s in base], C) == "host"
