"""`bluedove bench soak`: its judges on synthetic series and ledgers (each failure it must catch,
and each churn case it must not blame), and a 45-second run on a real cluster."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from bluedove.lab.bench.soak import FD_SLACK, judge
from bluedove.lab.bench.soak_judge import Ledger, failures, judge_series


def _flat(t0: float, t1: float, value: float, step: float = 1.0, noise: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [(t, value * (1 + noise * rng.uniform(-1, 1))) for t in np.arange(t0, t1 + 1e-9, step)]


# -- growth ------------------------------------------------------------------------------------
def test_a_flat_noisy_series_passes():
    v = judge_series("m1#0", "rss", _flat(0, 100, 200e6, noise=0.04), 0, 100)
    assert v.judged and not v.failed and abs(v.growth) < 0.05


def test_a_steady_leak_after_warmup_fails_and_says_which_process():
    samples = [(t, 100e6 * (1 + 0.004 * t)) for t in range(0, 101)]  # +0.4 %/s: ~+30 % over the judged span
    v = judge_series("d1#0", "rss", samples, 0, 100)
    assert v.judged and v.failed and v.growth > 0.10
    assert "d1#0 rss grew" in v.reason


def test_growth_during_warmup_only_is_not_blamed():
    samples = [(t, 50e6 + 150e6 * min(t, 15) / 15) for t in range(0, 101)]  # loads for 15 s, then flat
    assert not judge_series("m1#0", "rss", samples, 0, 100).failed


def test_a_spike_at_the_end_does_not_move_the_median():
    samples = _flat(0, 100, 100e6)
    samples[-1] = (100, 300e6)
    assert not judge_series("redis#0", "rss", samples, 0, 100).failed


def test_a_restarted_process_has_a_warmup_of_its_own():
    """Started at t=50 of a 100 s run: it loads for 10 s (more than 10 % growth), then is flat."""
    samples = [(t, 10e6 + 180e6 * min(t - 50, 10) / 10) for t in range(50, 101)]
    assert not judge_series("m1#1", "rss", samples, 0, 100).failed
    leaking = [(t, 190e6 * (1 + 0.01 * max(0, t - 70))) for t in range(50, 101)]
    assert judge_series("m1#1", "rss", leaking, 0, 100).failed


def test_a_series_too_short_is_reported_not_judged():
    v = judge_series("m2#1", "rss", [(t, t * 1e6) for t in range(60, 101, 5)], 0, 100)
    assert not v.judged and not v.failed and "too short" in v.reason
    late = judge_series("m2#2", "rss", [(95, 1e6), (99, 9e6)], 0, 100)  # all in its own warm-up
    assert not late.judged and "no sample after warm-up" in late.reason
    assert not judge_series("m2#3", "rss", [], 0, 100).judged


def test_fds_rise_within_the_slack_passes_beyond_it_fails():
    small = [(t, 20 + (FD_SLACK if t > 50 else 0)) for t in range(101)]
    big = [(t, 20 + (FD_SLACK + 2 if t > 50 else 0)) for t in range(101)]
    series = {"d1#0": [(t, 100e6, f) for t, f in small], "d2#0": [(t, 100e6, f) for t, f in big]}
    out = {(v.series, v.metric): v for v in judge(series, 100)}
    assert not out["d1#0", "fds"].failed and not out["d1#0", "rss"].failed
    assert out["d2#0", "fds"].failed


# -- deliveries --------------------------------------------------------------------------------
def _ledger() -> Ledger:
    led = Ledger(2)
    led.added("s1", "q1", [0, 0], [10, 10])
    led.added("s2", "q2", [5, 0], [20, 10])
    return led


def test_every_expected_delivery_seen_passes():
    led = _ledger()
    before = led.snapshot()
    led.published_batch(before, ["a", "b", "c"], np.array([[1.0, 1.0], [6.0, 2.0], [50.0, 50.0]]))
    assert led.expected == 3  # a->s1, b->s1, b->s2
    led.delivered("a", "q1", ["s1"])
    led.delivered("b", "q1", ["s1"])
    led.delivered("b", "q2", ["s2"])
    out = led.summary()
    assert out["lost"] == out["duplicates"] == out["wrong"] == 0 and not failures([], out)


def test_a_missing_delivery_is_lost_and_fails():
    led = _ledger()
    led.published_batch(led.snapshot(), ["b"], np.array([[6.0, 2.0]]))
    led.delivered("b", "q1", ["s1"])
    out = led.summary()
    assert out["lost"] == 1 and "1 expected deliveries lost" in failures([], out)[0]
    assert out["lost_sample"] == [{"message": "b", "subscription": "s2", "queue": "q2",  # which, to diagnose
                                   "subscribed_at_s": 0.0, "published_at_s": 0.0}]


def test_a_delivery_seen_before_its_publish_returned_counts():
    led = _ledger()
    before = led.snapshot()
    led.delivered("a", "q1", ["s1"])  # the poller was faster than the publish reply
    led.published_batch(before, ["a"], np.array([[1.0, 1.0]]))
    assert led.summary()["lost"] == 0


def test_duplicates_and_wrong_deliveries_fail():
    led = _ledger()
    led.published_batch(led.snapshot(), ["a", "z"], np.array([[1.0, 1.0], [50.0, 50.0]]))
    led.delivered("a", "q1", ["s1"])
    led.delivered("a", "q1", ["s1"])  # again
    led.delivered("z", "q2", ["s2"])  # z is outside s2's box
    out = led.summary()
    assert out["duplicates"] == 1 and out["wrong"] == 1
    assert len(failures([], out)) == 2
    assert out["duplicate_sample"] == [{"message": "a", "queue": "q1", "subscriptions": ["s1"]}]


def test_churn_window_subscriptions_are_not_expected():
    """Added during a publish, or removed before its publish returned: may or may not match."""
    led = _ledger()
    before = led.snapshot()
    led.added("s3", "q3", [0, 0], [10, 10])  # its add returned after the publish was sent
    led.removing("s2")  # its remove was sent before the publish returned
    led.published_batch(before, ["b"], np.array([[6.0, 2.0]]))
    assert led.expected == 1 and led.pending_in("q1") == 1 and led.pending_in("q2") == led.pending_in("q3") == 0
    led.delivered("b", "q1", ["s1"])
    led.delivered("b", "q3", ["s3"])  # allowed: it matches geometrically
    out = led.summary()
    assert out["lost"] == out["wrong"] == out["duplicates"] == 0


def test_a_failed_publish_expects_nothing_but_its_deliveries_are_checked():
    led = _ledger()
    led.failed_batch(["f"], np.array([[1.0, 1.0]]))
    led.delivered("f", "q1", ["s1"])
    led.delivered("unknown-id", "q1", ["s1"])
    out = led.summary()
    assert out["expected"] == out["lost"] == out["wrong"] == 0 and out["unknown"] == 1


# -- the real thing ----------------------------------------------------------------------------
@pytest.mark.integration
def test_a_45_second_soak_with_churn_and_restarts_loses_nothing(tmp_path):
    """A short run that still restarts a matcher twice (every 15 s), swaps queues every 4.5 s and
    judges each process's memory on ~48 samples after its warm-up (a run of any length samples
    60 times)."""
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "soak", "--minutes", "0.75", "--json",
                        "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.returncode == (0 if out["ok"] else 1), r.stderr[-3000:]
    d = out["deliveries"]
    assert d["published"] > 3000 and d["expected"] > 0  # 4,500 sent at 100/s, less those refused in restarts
    # the samples first: a long message is cut at its end
    assert d["lost"] == d["duplicates"] == d["wrong"] == 0, (d.get("lost_sample"), d.get("duplicate_sample"),
                                                           out["restarts"], out["failures"], out["errors"], d)
    assert [x["signal"] for x in out["restarts"]] == ["SIGKILL", "SIGTERM"]
    assert out["churn"]["queues_deleted"] > 0 and out["churn"]["unsubscribed"] > 0
    assert {"d1#0", "m1#0", "m1#1", "m2#0", "m2#1", "redis#0"} <= set(out["processes"])
    judged = [p["rss"] for p in out["processes"].values() if p["rss"]["judged"]]
    assert {"d1#0", "redis#0"} <= {v["series"] for v in judged}
    assert out["ok"], out["failures"]


def test_short_runs_scale_restarts_queue_swaps_and_samples():
    from bluedove.lab.bench import parse
    from bluedove.lab.bench.soak import plan_of

    long, short = plan_of(parse(["soak"])), plan_of(parse(["soak", "--minutes", "2"]))
    assert (long.seconds, long.restart_every, long.queue_every, long.sample_every) == (1800, 300, 30, 10)
    assert (short.seconds, short.restart_every, short.queue_every, short.sample_every) == (120, 40, 12, 2)
    assert plan_of(parse(["soak", "--minutes", "2", "--restart-every", "0"])).restart_every == 0
