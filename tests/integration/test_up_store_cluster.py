"""`bluedove up --store-cluster N`: a private Redis Cluster of N primaries with a replica each,
under DATA_DIR/redis-cluster, started before the matchers and stopped with the rest; `--store`
beside it is a usage error (exit 2) told before anything starts."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import httpx
import pytest

from bluedove.local.cluster import LocalCluster
from bluedove.store.server import free_port
from tests.integration.helpers import output_until_ready, stop_up
from tests.integration.test_store_cluster_server import running_on

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("command,flags,told", [
    ("up", ["--store", "redis://127.0.0.1:1/0", "--store-cluster", "3"], "--store and --store-cluster"),
    ("up", ["--store-cluster", "0"], "--store-cluster 0: expected 1 or more primaries"),
    ("demo", ["--store", "redis://127.0.0.1:1/0", "--store-cluster", "3"], "--store and --store-cluster"),
])
def test_bad_store_flags_exit_2_before_anything_starts(tmp_path, command, flags, told):
    run = subprocess.run([sys.executable, "-m", "bluedove", command, *flags, "--data-dir", str(tmp_path / "data"),
                          "--http-port", "0"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"bluedove {command}: {told}" in run.stderr, run.stderr
    assert not (tmp_path / "data" / "redis-cluster").exists(), "a refused command started a store"


def test_the_cluster_starts_and_stops_its_store_cluster(tmp_path):
    with pytest.raises(ValueError, match="store and store_cluster"):
        LocalCluster(matchers=1, http_port=0, data_dir=tmp_path, store="redis://127.0.0.1:1/0", store_cluster=3)
    cluster = LocalCluster(matchers=1, http_port=0, data_dir=tmp_path, quiet=True, restart=False, store_cluster=3)
    try:
        url = cluster.start_store()
        rc = cluster.redis_cluster
        assert cluster.redis is None, "a cluster store and a single redis-server both started"
        primaries, replicas = rc.primaries(), rc.replicas()
        assert len(primaries) == 3 and len(replicas) == 3, (primaries, replicas)
        assert url == cluster.store_url == "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in primaries)
        assert rc.data_dir == tmp_path / "redis-cluster"
        assert sorted(d.name for d in rc.data_dir.glob("node-*")) == sorted(f"node-{p}" for p in rc.nodes)
        assert cluster.start_store() == url and cluster.redis_cluster is rc, "a second call started another"
        ports = list(rc.nodes)
    finally:
        cluster.stop()
    assert cluster.redis_cluster is None
    assert not running_on(ports), running_on(ports)


def test_up_with_a_store_cluster_serves_and_stops(tmp_path):
    # Until the Store reads redis+cluster:// URLs (bluedove/store/client.py), the matchers cannot
    # start on a cluster; this runs as soon as it does.
    pytest.importorskip("bluedove.store.client", reason="the Store does not read redis+cluster:// URLs yet")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bluedove", "up", "--matchers", "1", "--store-cluster", "3",
                             "--http-port", str(port), "--grpc-port", "0", "--data-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ports: list[int] = []
    try:
        out = output_until_ready(proc)
        found = re.search(r"^store +redis\+cluster://(\S+)$", out, re.M)
        assert found, out
        startup = [int(a.rsplit(":", 1)[1]) for a in found[1].split(",")]
        assert len(startup) == 3, out
        shown = re.search(r"primaries \[([\d, ]+)\], their replicas \[([\d, ]+)\]", out)
        assert shown, out
        ports = [int(p) for group in shown.groups() for p in group.split(", ")]
        assert sorted(startup) == sorted(ports[:3]) and len(ports) == 6, out
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as api:
            made = api.post("/v1/subscriptions", json={"predicates": {}})
            assert made.status_code == 201, made.text
            sub = made.json()
            auth = {"Authorization": f"Bearer {sub['token']}"}
            msg = {"attributes": {"x0": 1, "x1": 2, "x2": 3, "x3": 4}, "payload": "hi", "id": "m1"}
            published = api.post("/v1/messages", json=msg)
            assert published.status_code == 202, published.text
            got, deadline = [], time.monotonic() + 20
            while not got and time.monotonic() < deadline:
                got = api.get(f"/v1/queues/{sub['queue']}/messages", params={"wait": 2},
                              headers=auth).json()["messages"]
            assert [m["id"] for m in got] == ["m1"], "a message published through the cluster store never arrived"
    finally:
        if proc.poll() is None:
            stop_up(proc, tmp_path)
    assert proc.returncode == 0
    assert not running_on(ports), f"the store cluster outlived `bluedove up`: {running_on(ports)}"
