"""`bluedove bench delivery` and `bluedove bench publish` run end to end on a small workload:
the JSON has its documented shape, rates are positive, and the delivery bench checked its
sample of deliveries against brute force."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.lab]

SMALL = ["--workload", "sparse", "--subs", "2000", "--matchers", "2", "--duration", "1", "--warmup", "0.5",
         "--publishers", "1", "--connections", "2", "--json"]


def bench(kind: str, *extra: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", kind, *SMALL, *extra],
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_bench_delivery_smoke():
    out = bench("delivery", "--feeders", "1", "--pollers", "1", "--rate", "500", "--sample", "30",
                "--poll-interval", "0.5")
    assert out["kind"] == "delivery" and out["workload"] == "sparse(n_subs=2000)"
    assert out["subscriptions"] == 2000 and out["queues"] == 200 and out["poll_max"] == 100
    assert list(out["phases"]) == ["publish_api", "write", "drain", "sustain"] and out["poll_interval_s"] == 0.5
    for name, ph in out["phases"].items():
        assert {"seconds", "published_per_s", "written_per_s", "acked_per_s", "polls_per_s", "deliveries_per_poll",
                "backlog_start", "backlog_end", "backlog_growth_per_s", "cpu_pct", "cpu_pct_by_process",
                "redis_commands"} <= set(ph), name
        assert {"redis", "matchers", "dispatchers", "publishers", "feeders", "pollers"} <= set(ph["cpu_pct"])
        assert 0 < ph["machine_busy_pct"] <= 100 * out["cpus"]
    assert out["write_per_s"] > 0 and out["api_write_per_s"] > 0 and out["drain_per_s"] > 0
    # Nobody polls while writing; the paced pollers poll each of the 200 queues at most twice a
    # second (a poller late after a slow poll catches up, so a short window may count a little
    # more), and sustain starts from an almost empty backlog (the drain phase came first).
    assert out["phases"]["write"]["polls_per_s"] == 0 and out["phases"]["write"]["deliveries_per_poll"] is None
    sustain = out["phases"]["sustain"]
    assert 0 < sustain["polls_per_s"] <= 200 / 0.5 * 1.25 and sustain["deliveries_per_poll"] > 0
    assert out["deliveries_per_poll"] == sustain["deliveries_per_poll"]
    assert out["sustain_attempts"][0]["backlog_start"] < out["phases"]["write"]["backlog_end"] / 2
    assert out["phases"]["write"]["cpu_pct"]["matchers"] > 0 and out["phases"]["write"]["cpu_pct"]["redis"] > 0
    assert 0 < out["deliveries_per_msg"] < 10
    v = out["verify"]
    assert v["expected"] > 0 and v["received"] == v["expected"]
    assert v["missing"] == v["unexpected"] == v["duplicates"] == v["wrong_subscriptions"] == 0
    assert v["backlog_after_drain"] == 0 and v["acked"] > 0 and v["published"] > 0
    # The write phase (the feeders' only one at full speed) sent mostly messages prepared before
    # it: the pool covers 150,000 msg/s, more than this small set of subscriptions takes.
    write = out["phases"]["write"]
    assert 0 <= v["feeders_built_live"] < 0.5 * write["published_per_s"] * write["seconds"]
    assert out["exact"] is True and out["errors"] == []


def test_bench_publish_smoke():
    out = bench("publish", "--batch", "20")
    assert out["kind"] == "publish" and set(out["modes"]) == {"grpc_stream", "rest_batch", "rest_single"}
    for mode, m in out["modes"].items():
        assert m["msgs_per_s"] > 0 and m["messages"] > 0, mode
        assert m["ids"] >= m["messages"] and m["errors"] == []
        assert {"redis", "matchers", "dispatchers"} <= set(m["cpu_pct"])
        assert set(m["cpu_us_per_msg"]) == set(m["cpu_pct"]) and m["cpu_us_per_msg"]["dispatchers"] > 0, mode
    assert out["ratio_vs_single"]["rest_single"] == 1.0 and out["ok"] is True


def test_bench_publish_compares_sample_rates_smoke():
    """Two rates, one round, one mode: a cluster each, medians and ratios to the first rate."""
    out = bench("publish", "--modes", "rest_batch", "--batch", "20", "--compare-sample-rates", "0,1", "--repeat", "1")
    assert out["compare"] == "sample_rate" and out["repeat"] == 1 and out["ok"] is True
    assert set(out["runs"]) == {"0.0", "1.0"} and all(len(r) == 1 for r in out["runs"].values())
    assert out["median_msgs_per_s"]["1.0"]["rest_batch"] == out["runs"]["1.0"][0]["rest_batch"] > 0
    assert out["ratio"]["0.0"]["rest_batch"] == 1.0 and out["ratio"]["1.0"]["rest_batch"] > 0


# A first step every system serves unsaturated on a slow, shared machine (a saturated first step
# reports no rate: `msgs_per_s` 0); the smoke tests check the report's shape, not the speed.
LOW_START = ["--start-rate", "200"]


def test_bench_e2e_runs_every_system_on_the_same_subscriptions_smoke():
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "e2e", "--workload", "sparse", "--subs", "400",
                        "--matchers", "2", "--partition", "mpartition,p2p", "--partition", "full-replication",
                        "--baseline-policy", "random", "--step-s", "1", "--max-steps", "2", "--publishers", "1",
                        "--batch", "50", *LOW_START, "--json"], capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["kind"] == "e2e" and out["workload"] == "sparse(n_subs=400)" and out["queues"] == 40
    assert out["partitions"] == ["mpartition", "p2p", "full-replication"] == list(out["systems"])
    assert set(out["ratios"]) == {"bluedove_over_p2p", "bluedove_over_full_replication"}
    assert out["partition"] == "mpartition" and out["msgs_per_s"] == out["systems"]["mpartition"]["msgs_per_s"]
    assert out["subscribe_s"] > 0 and out["kernel_msgs_per_s"] > 0
    for name, s in out["systems"].items():
        assert s["msgs_per_s"] > 0 and s["steps"] and {"offered", "achieved", "saturated"} <= set(s["steps"][0])
        assert s["policy"] == ("adaptive" if name == "mpartition" else "random")
        assert isinstance(s["reached_saturation"], bool) and s["start_s"] > 0
    stored = {name: s["stored"] for name, s in out["systems"].items()}
    # mPartition keeps >= k copies, p2p >= 1, full replication exactly one per matcher
    assert stored["full-replication"] == 2 * 400 and 400 <= stored["p2p"] < 800 <= stored["mpartition"]
    assert all(len(s["rounds_msgs_per_s"]) == 1 for s in out["systems"].values()) and out["rounds"] == 1
    # CPU per message: every process of the cluster, the store and the load generator, per system
    assert out["transport"] == "rest" and out["kernel_cpu_us_per_msg"] > 0
    assert out["service_over_kernel"] == (out["systems"]["mpartition"]["cpu"] or {}).get("service_over_kernel")
    for name, s in out["systems"].items():
        cpu = s["cpu"] or s["cpu_saturated"]  # the saturated step's when even the first saturated
        assert set(cpu["us_per_msg"]) == {"m1", "m2", "d1", "redis", "P1"}, name
        assert set(cpu["roles_us_per_msg"]) == {"matchers", "dispatchers", "redis", "publishers"}
        assert cpu["service_us_per_msg"] > 0 and cpu["kernel_us_per_msg"] == out["kernel_cpu_us_per_msg"]
        assert 0 <= cpu["matcher_walk_us_per_msg"] <= cpu["roles_us_per_msg"]["matchers"]


def test_bench_e2e_serves_the_typed_orders_workload_smoke():
    """`--workload orders`: a cluster on the typed space, typed JSON published over REST, the
    kernel beside it on the matcher's whole path."""
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "e2e", "--workload", "orders", "--subs", "200",
                        "--matchers", "2", "--step-s", "1", "--max-steps", "1", "--publishers", "1", "--batch", "50",
                        *LOW_START, "--json"], capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["workload"] == "orders(n_subs=200,n_queues=20)" and out["queues"] == 20
    assert out["msgs_per_s"] > 0 or out["systems"]["mpartition"]["steps"][0]["achieved"] > 0
    assert out["kernel_msgs_per_s"] > 0 and out["systems"]["mpartition"]["steps"][0]["errors"] == 0
