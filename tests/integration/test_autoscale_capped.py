"""Matchers held at their CPU limit scale out: a LocalCluster of 2 matchers, each capped at 0.15
core (a cgroup quota, as a pod's CPU limit), publishers sending flat out, and the autoscaler
on. The matchers read their own cgroup's limit and throttling (bluedove/runtime/cpu_limit.py)
and report them; the policy counts a matcher throttled in most of its periods as saturated
(bluedove/autoscaler/policy.py `matcher_demand`), and a scale-out follows, its reason naming
the CPU limit. Skipped where the cpu cgroup controller is not writable."""

from __future__ import annotations

import random
import threading
import time

import httpx
import pytest

from bluedove.autoscaler.local import AutoscalerThread
from bluedove.autoscaler.policy import ScalingConfig
from tests.integration.cluster_checks import DIMS
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import new_queue
from tests.integration.test_matcher_cpu import writable_controller

pytestmark = pytest.mark.integration

CORES = 0.15
QUEUES, SUBS = 4, 400
BATCH = 400
FAST = dict(min_matchers=2, max_matchers=3, window_s=4.0, out_cooldown_s=4.0, in_window_s=600.0,
            check_settle_s=2.0, check_timeout_s=45.0, max_step=1)


def _subscribe(api: httpx.Client, rng: random.Random) -> None:
    """Wide subscriptions (half of one dimension each): a message matches about half of them,
    so each costs the matcher its walk and a delivery per queue with a long list of ids."""
    queues = dict(new_queue(api) for _ in range(QUEUES))
    names = list(queues)
    for i in range(SUBS):
        q = names[i % QUEUES]
        lo = rng.uniform(0, 500)
        r = api.post("/v1/subscriptions", json={"queue": q, "predicates": {rng.choice(DIMS): [lo, lo + 500]}},
                     headers=queues[q])
        assert r.status_code == 201, r.text


def _publish(url: str, seed: int, stop: threading.Event) -> None:
    """Batches of BATCH messages, one after the other, as fast as they are accepted."""
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=30) as api:
        while not stop.is_set():
            msgs = [{"attributes": {d: rng.uniform(0, 1000) for d in DIMS}} for _ in range(BATCH)]
            try:
                api.post("/v1/messages:batch", json={"messages": msgs})
            except httpx.TransportError:
                stop.wait(0.1)


def test_matchers_throttled_at_their_cpu_limit_scale_out(tmp_path):
    writable_controller()
    cluster = start_cluster(tmp_path, matchers=2, matcher_cpu=CORES, matcher_env={"BLUEDOVE_HANDOFF_GRACE_S": "1"})
    stop = threading.Event()
    publishers = [threading.Thread(target=_publish, args=(cluster.url, seed, stop), daemon=True) for seed in (1, 2)]
    scaler = None
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            _subscribe(api, random.Random(5))
        for p in publishers:
            p.start()
        scaler = AutoscalerThread(cluster, ScalingConfig(**FAST), interval_s=0.5).start()
        t0 = time.time()
        deadline = time.monotonic() + 45
        outs: list[dict] = []
        while not outs and time.monotonic() < deadline:
            time.sleep(0.5)
            outs = [e for e in cluster.cluster_state()["autoscaler"]["events"]
                    if e["t"] >= t0 and e["action"] == "scale_out"]
        a = scaler.autoscaler
        assert outs, f"no scale_out within 45 s; last samples {a.history[-4:] if a else None}"
        assert outs[0]["matchers"] == 3, outs[0]
        assert "saturated" in outs[0]["reason"] and "at their CPU limit" in outs[0]["reason"], outs[0]["reason"]
        assert a is not None and max(s.at_limit for s in a.history) >= 1, a.history[-4:]
    finally:
        stop.set()
        if scaler is not None:
            scaler.stop()
        for p in publishers:
            if p.is_alive():
                p.join(30)
        cluster.stop()
    assert_no_children(cluster)
