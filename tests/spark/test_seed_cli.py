"""`bluedove seed` running the job itself: on a running cluster, `--subscriptions … --store URL
--apply` takes N from the cluster, runs the job on a local SparkSession, and re-lays out the
cluster with no restart, delivery staying exact; and the flags it refuses."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import pytest

from bluedove.lab.workloads.paper import paper
from tests.integration.cluster_checks import EXACT
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import compare, drain, new_queue, oracle
from tests.spark.test_pipeline import publish, subscribe


def bluedove(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bluedove", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.integration
def test_seed_runs_the_job_and_applies_it_to_the_running_cluster(tmp_path):
    w = paper(adverse=2, n_subs=300, seed=3)
    cluster = start_cluster(tmp_path / "c", matchers=2)
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            queues = dict(new_queue(api) for _ in range(8))
            subs = subscribe(api, w, queues)
            epoch = api.get("/v1/cluster").json()["epoch"]
        store = cluster.store_url
        assert bluedove("export", "catalogue", "--store", store, "--out", str(tmp_path / "x")).returncode == 0
        seed_file = tmp_path / "seed.json"
        run = bluedove("seed", "--subscriptions", str(tmp_path / "x" / "subscriptions"), "--out", str(seed_file),
                       "--store", store, "--apply")
        assert run.returncode == 0, run.stderr[-3000:]
        assert "applied: epoch" in run.stdout, run.stdout
        seed = json.loads(seed_file.read_text())
        assert seed["matchers"] == 2 and seed["inputs"]["messages"] is None  # N from the cluster; uniform messages
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            view = api.get("/v1/cluster").json()
            assert view["epoch"] > epoch
            members = {m["id"]: m["segments"] for m in view["members"]}
            for row in seed["placement"]:
                for name, index in row["segments"].items():
                    b = seed["dimensions"][name]["boundaries"]
                    assert members[f"m{row['matcher'] + 1}"][name] == pytest.approx([b[index], b[index + 1]])
            messages = publish(api, w, w.messages(1500, seed=4))

        async def received():
            async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
                return await drain(client, queues)

        expected = oracle(w.space, subs, messages)
        assert len(expected) > 300
        assert compare(expected, asyncio.run(received())) == EXACT
    finally:
        cluster.stop()
    assert_no_children(cluster)


def test_seed_refuses_contradictory_or_missing_flags_before_spark_starts(tmp_path):
    both = bluedove("seed", "--from", "s.json", "--subscriptions", "x", timeout=60)
    assert both.returncode == 2 and "--from and --subscriptions" in both.stderr
    no_n = bluedove("seed", "--subscriptions", str(tmp_path), timeout=60)
    assert no_n.returncode == 2 and "--matchers N is required" in no_n.stderr
    apply_without_store = bluedove("seed", "--subscriptions", str(tmp_path), "--matchers", "2", "--apply", timeout=60)
    assert apply_without_store.returncode == 2 and "--apply needs --store" in apply_without_store.stderr
    no_space = bluedove("seed", "--subscriptions", str(tmp_path / "subs"), "--matchers", "2", timeout=60)
    assert no_space.returncode == 2 and "--space" in no_space.stderr and "Traceback" not in no_space.stderr
