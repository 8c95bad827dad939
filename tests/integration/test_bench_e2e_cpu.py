"""`bluedove bench e2e` accounts for the CPU of every process per published message, publishing
through PublishStream, and profiles a dispatcher and a matcher with `--profile`: the report lists
every process, CPU per message is positive, and the matchers' index-walk CPU (their Report's
walk_cpu_s) is within their CPU. Structure and sanity only: speed is the bench's to measure."""

from __future__ import annotations

import json
import subprocess
import sys

import grpc
import httpx
import pytest

from bluedove.lab.bench.cpu import cpu_seconds
from bluedove.lab.bench.profile import CATEGORIES, py_spy
from bluedove.local.cluster import LocalCluster
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.integration, pytest.mark.lab]


def test_bench_e2e_cpu_per_message_over_publish_stream_with_profiles(tmp_path):
    if py_spy() is None:
        pytest.skip("py-spy is part of the lab extra")
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "e2e", "--workload", "sparse", "--subs", "400",
                        "--matchers", "2", "--transport", "grpc", "--step-s", "3", "--max-steps", "1",
                        "--subscribe", "catalogue",
                        "--publishers", "1", "--batch", "50", "--start-rate", "400", "--profile", str(tmp_path),
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["transport"] == "grpc" and out["goals"] == {"service_over_kernel": 3.0,
                                                            "matcher_outside_walk_us_per_matched": 5.0}
    s = out["systems"]["mpartition"]
    for step in s["steps"]:
        cpu = step["cpu"]
        assert set(cpu["us_per_msg"]) == {"m1", "m2", "d1", "redis", "P1"}
        assert all(v >= 0 for v in cpu["us_per_msg"].values()) and cpu["us_per_msg"]["d1"] > 0
        assert cpu["roles_us_per_msg"]["matchers"] > 0 and cpu["roles_us_per_msg"]["publishers"] > 0
        assert cpu["service_us_per_msg"] == pytest.approx(sum(cpu["roles_us_per_msg"][k] for k in
                                                              ("dispatchers", "matchers", "redis")), abs=0.05)
        # every message goes to one matcher under mPartition; the walk is inside the matchers' CPU
        # (a call that timed out on a busy machine may still have been matched: >=)
        assert cpu["matcher_messages"] >= cpu["messages"] and cpu["matcher_messages"] == sum(
            cpu["matcher_messages_by"].values())
        assert 0 < cpu["matcher_walk_us_per_msg"] <= cpu["roles_us_per_msg"]["matchers"]
        assert cpu["matcher_outside_walk_us_per_msg"] == pytest.approx(
            cpu["roles_us_per_msg"]["matchers"] - cpu["matcher_walk_us_per_msg"], abs=0.05)
        # the dispatcher's Forward calls over the step (its /metrics): at most one call per
        # message, each of at most forward_batch_max (512)
        assert cpu["forward_calls_per_s"] > 0 and 1 <= cpu["messages_per_forward_call"] <= 512
    # the reported step's account, or the saturated one's when even the first step saturated
    reported = s["cpu"] or s["cpu_saturated"]
    assert reported["service_over_kernel"] == pytest.approx(
        reported["service_us_per_msg"] / out["kernel_cpu_us_per_msg"], rel=0.02)
    assert out["service_cpu_us_per_msg"] == (s["cpu"] or {}).get("service_us_per_msg")
    assert set(s["idle_cpu_pct"]) == {"m1", "m2", "d1", "redis"}
    procs = s["profile"]["processes"]
    assert set(procs) == {"d1", "m1"}
    for name, p in procs.items():
        assert "error" not in p, p
        assert (tmp_path / f"mpartition-grpc-{name}.txt").stat().st_size > 0 and p["raw"].endswith(f"{name}.txt")
        assert list(p["by_category"]) == list(CATEGORIES) and p["samples"] > 0 and p["process_us_per_msg"] > 0
        assert sum(p["us_per_msg"].values()) == pytest.approx(p["process_us_per_msg"], rel=0.01)


def test_the_matcher_reports_its_index_walk_cpu(tmp_path):
    """The Report's walk_cpu_s grows as a matcher matches, and stays within its thread's CPU."""
    cluster = LocalCluster(matchers=1, http_port=0, data_dir=tmp_path, quiet=True, restart=False, deliver="count")
    cluster.start(timeout_s=120)
    try:
        names = cluster.space.names
        with httpx.Client(base_url=cluster.url, timeout=30) as c:
            first = c.post("/v1/subscriptions", json={"predicates": {names[0]: [0, 500]}})
            first.raise_for_status()
            queue, token = first.json()["queue"], first.json()["token"]
            for j in range(1, 20):
                c.post("/v1/subscriptions", json={"queue": queue, "predicates": {names[0]: [j * 10, j * 10 + 500]}},
                       headers={"Authorization": f"Bearer {token}"}).raise_for_status()
            with grpc.insecure_channel(cluster.addresses["m1"]) as ch:
                stub = pb_grpc.MatcherStub(ch)
                before = stub.Report(pb.ReportRequest(), timeout=10)
                for _ in range(5):
                    msgs = [{"attributes": {n: 100.0 + i for n in names}} for i in range(200)]
                    c.post("/v1/messages:batch", json={"messages": msgs}).raise_for_status()
                after = stub.Report(pb.ReportRequest(), timeout=10)
        cpu = cpu_seconds(cluster.pids()["m1"])
        assert len(after.dims) == len(names)
        walked = sum(d.walk_cpu_s for d in after.dims) - sum(d.walk_cpu_s for d in before.dims)
        matched = sum(d.matched_total for d in after.dims) - sum(d.matched_total for d in before.dims)
        assert matched == 1000 and walked > 0
        assert all(d.walk_cpu_s >= 0 for d in after.dims) and sum(d.walk_cpu_s for d in after.dims) <= cpu
    finally:
        cluster.stop()
