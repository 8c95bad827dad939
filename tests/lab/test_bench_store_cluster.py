"""`bluedove bench delivery` on a local Redis Cluster: a tiny run on 2 primaries with a replica
each reports every node's figures, and the store flags refuse bad values with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.lab]

TINY = ["--workload", "sparse", "--subs", "1000", "--matchers", "2", "--duration", "1.5", "--warmup", "0.5",
        "--publishers", "1", "--feeders", "1", "--pollers", "1", "--connections", "2", "--rate", "300",
        "--poll-interval", "0.5", "--sample", "20", "--json"]


def _redis_servers() -> set[int]:
    """Every redis-server process of the machine. Not only our children: a node the bench's
    process left behind when it exited belongs to init, not to us."""
    return {p.pid for p in psutil.process_iter(["name", "status"])
            if "redis-server" in (p.info["name"] or "") and p.info["status"] != psutil.STATUS_ZOMBIE}


def _orphans(pids: set[int]) -> set[int]:
    """Those of `pids` no live process owns (reparented to init or a subreaper when their
    starter exited): what a bench that exited left behind, not another test's servers."""
    out = set()
    for pid in pids:
        try:
            parent = psutil.Process(pid).parent()
        except psutil.NoSuchProcess:
            continue
        if parent is None or parent.pid == 1 or parent.name() in ("init", "systemd", "tini", "dumb-init"):
            out.add(pid)
    return out


@pytest.mark.integration
def test_bench_delivery_on_a_two_primary_cluster_reports_each_node():
    # A run that fails (inexact deliveries, a cluster that does not start) exits non-zero: the
    # assertion shows its stderr. A JSON without per-node figures fails on the keys read below.
    before = _redis_servers()  # the session's own servers (fixtures) are there before and after
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "delivery", *TINY, "--store-cluster", "2"],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["store"] == "2x1" and out["exact"] is True and out["verify"]["expected"] > 0
    write = out["phases"]["write"]
    st = write["store"]
    assert (st["primaries"], st["replicas_each"]) == (2, 1)
    primaries = [n for n in st["nodes"] if n["role"] == "primary"]
    replicas = [n for n in st["nodes"] if n["role"] == "replica"]
    assert [n["name"] for n in primaries] == ["redis-p1", "redis-p2"]
    assert [n["name"] for n in replicas] == ["redis-r1", "redis-r2"]
    # Every queue lives on one primary; with 100 queues both hold some, and both were written to.
    assert sum(n["queues"] for n in primaries) == out["queues"] and all(n["queues"] > 0 for n in primaries)
    assert all(n["written_per_s"] > 0 for n in primaries)
    assert sum(n["share_written"] for n in primaries) == pytest.approx(1.0, abs=0.01)
    # The XADDs counted node by node are the deliveries the backlog grew by (nobody acks in write).
    assert sum(n["written_per_s"] for n in primaries) == pytest.approx(write["written_per_s"], rel=0.05, abs=5)
    assert st["redis_cpu_us_per_delivery"] > 0 and st["replica_cpu_us_per_delivery"] > 0
    assert write["cpu_pct"]["redis"] > 0 and "redis_replicas" in write["cpu_pct"]
    assert {"redis-p1", "redis-p2", "redis-r1", "redis-r2"} <= set(write["cpu_pct_by_process"])
    assert out["phases"]["drain"]["store"]["nodes"][0]["acked_per_s"] > 0
    assert not _orphans(_redis_servers() - before)  # the bench stopped its cluster


@pytest.mark.parametrize("flags,message", [
    (["--store-cluster", "0"], "--store-cluster"),
    (["--store-cluster", "2", "--store-replicas", "-1"], "--store-replicas"),
    (["--compare-stores", "single,2y1"], "--compare-stores"),
    (["--store-cluster", "2", "--compare-stores", "single"], "--compare-stores"),
])
def test_bench_delivery_store_flags_refuse_bad_values(flags, message, capsys):
    from bluedove.lab.bench import parse

    args = parse(["delivery", *flags])
    assert args.func(args) == 2  # before starting anything
    assert message in capsys.readouterr().err


def test_compare_stores_shapes():
    from bluedove.lab.bench.store_nodes import StoreShape, parse_shapes

    assert parse_shapes("single,3,1x0", replicas=1) == [StoreShape(), StoreShape(3, 1), StoreShape(1, 0)]
    assert [s.label for s in parse_shapes("single, 2x2", replicas=0)] == ["single", "2x2"]
