"""The autoscaler on a real LocalCluster acts on the real bottleneck (bluedove/autoscaler/relief.py):
with the publishers the limit (matchers idle) it adds no matcher; and a scale-out that relieves
nothing stops the next, with an event naming the limit and the Prometheus metrics saying so.

One cluster (2 matchers), one steady publisher at a fixed pace (it does not catch up when
late: the publishers are the limit by construction). In the second test the thresholds are
lowered so that this light load reads as saturated matchers and a hot dispatcher: that is the
only way to make a 2-core test machine show a scale-out that cannot help, whatever else runs
on it. What it exercises is real: the matchers' load reports, the dispatchers' CPU in their
heartbeats, the series' accepted rate, a matcher process started and joined by a split."""

from __future__ import annotations

import random
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bluedove.autoscaler.local import AutoscalerThread
from bluedove.autoscaler.policy import ScalingConfig
from tests.integration.cluster_checks import DIMS, subscribe_random
from tests.integration.conftest import assert_no_children, start_cluster

pytestmark = pytest.mark.integration

RATE_BATCHES = 10  # batches of BATCH per second
BATCH = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("limit"), matchers=2, matcher_env={"BLUEDOVE_HANDOFF_GRACE_S": "1"})
    with httpx.Client(base_url=c.url, timeout=30) as api:
        subscribe_random(api, random.Random(5), 5, 100)
    stop = threading.Event()
    pub = threading.Thread(target=_publish, args=(c.url, stop), daemon=True)
    pub.start()
    yield c
    stop.set()
    pub.join(30)
    c.stop()
    assert_no_children(c)


def _publish(url: str, stop: threading.Event) -> None:
    """BATCH messages every 1/RATE_BATCHES s; a late tick is skipped, not made up."""
    rng = random.Random(9)
    with httpx.Client(base_url=url, timeout=30) as api:
        nxt = time.monotonic()
        while not stop.is_set():
            msgs = [{"attributes": {d: rng.uniform(0, 1000) for d in DIMS}} for _ in range(BATCH)]
            try:
                api.post("/v1/messages:batch", json={"messages": msgs})
            except httpx.TransportError:
                pass
            nxt = max(nxt + 1 / RATE_BATCHES, time.monotonic())
            stop.wait(nxt - time.monotonic())


def _events(cluster, since: float) -> list[dict]:
    return [e for e in cluster.cluster_state()["autoscaler"]["events"] if e["t"] >= since]


def _wait(cond, limit_s: float, what: str):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"not within {limit_s} s: {what}")


FAST = dict(min_matchers=2, max_matchers=4, window_s=4.0, out_cooldown_s=4.0, in_window_s=600.0, check_settle_s=2.0,
            check_timeout_s=45.0, max_step=1)


def test_with_the_publishers_the_limit_no_matcher_is_added(cluster):
    scaler = AutoscalerThread(cluster, ScalingConfig(**FAST), interval_s=0.5).start()
    t0 = time.time()
    try:
        a = scaler.autoscaler
        _wait(lambda: a.decisions.get("hold", 0) >= 20 and a.limit is not None, 60, "20 steps")
        assert "scale_out" not in a.decisions, a.decisions
        assert not [e for e in _events(cluster, t0) if e["action"].startswith("scale_out")]
        assert len(cluster.matchers()) == 2
        # Matchers idle: every sample far under the scale-out threshold; the dispatchers'
        # CPU and the accepted rate were read.
        assert max(s.busy for s in a.history) < a.config.out_busy
        assert any(s.accepted for s in a.history) and any(s.dispatcher_cpu is not None for s in a.history)
        # The limit it reports: the publishers, or this host's CPU if the machine is that busy.
        assert a.limit in ("publishers", "host"), a.limit
    finally:
        scaler.stop()


def test_a_scale_out_that_relieves_nothing_stops_the_next_with_an_event_naming_the_limit(cluster):
    """Thresholds: the light load is 'saturated' (out_busy 0.001); a rate rise of half or a
    p50 fall from a minute would be needed to count as relief, which a fixed-pace publisher
    cannot give; a dispatcher counts as at its limit from 1 % of a core."""
    config = ScalingConfig(**FAST, out_busy=0.001, in_busy=0.0005, target_busy=0.0009, relief_rate=0.5,
                           relief_latency_floor_s=60.0, limit_cpu=0.01)
    scaler = AutoscalerThread(cluster, config, interval_s=0.5, metrics_port=0).start()
    t0 = time.time()
    try:
        def stopped():
            return [e for e in _events(cluster, t0) if e["action"] == "scale_out_stopped"]

        [stop] = _wait(stopped, 75, "a scale_out_stopped event")
        events = _events(cluster, t0)
        outs = [e for e in events if e["action"] == "scale_out"]
        assert len(outs) == 1 and outs[0]["matchers"] == 3, events
        assert "saturated" in outs[0]["reason"]
        assert any(e["action"] == "split" for e in events), events  # the new matcher served
        assert stop["limit"] == "dispatchers" and stop["matchers"] == 3, stop
        assert "the scale-out 2 → 3 did not relieve the load" in stop["reason"], stop["reason"]
        assert "The limit is the dispatchers: the busiest uses" in stop["reason"], stop["reason"]
        assert "accepted" in stop["reason"]
        # Saturated still (by these thresholds), yet no matcher more: the stop holds.
        a = scaler.autoscaler
        holds = a.decisions.get("hold", 0)
        _wait(lambda: a.decisions.get("hold", 0) >= holds + 10, 30, "10 more steps")
        assert [e["action"] for e in _events(cluster, t0)].count("scale_out") == 1
        assert len(cluster.matchers()) == 3
        text = httpx.get(f"http://{cluster.host}:{scaler.metrics_port}/metrics", timeout=10).text
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        limits = {s.labels["limit"]: s.value for s in fams["bluedove_autoscaler_limit"].samples}
        assert limits["dispatchers"] == 1 and sum(limits.values()) == 1, limits
        assert fams["bluedove_autoscaler_scale_out_stopped"].samples[0].value == 1
        checks = {s.labels["outcome"]: s.value for s in fams["bluedove_autoscaler_scale_out_checks"].samples
                  if s.name.endswith("_total")}
        assert checks["not_relieved"] == 1 and checks["relieved"] == 0, checks
        assert fams["bluedove_autoscaler_dispatcher_cpu_ratio"].samples[0].value >= 0.0
    finally:
        scaler.stop()
