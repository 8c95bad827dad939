"""`bluedove seed` running the job itself: on a running cluster of a typed space (the `orders`
workload: strings, a number, a boolean, an optional string), `--subscriptions … --messages …
--store URL --apply` takes N from the cluster, runs the job on a local SparkSession, cuts the
string dimensions round their hot values, reports and recommends the partition attributes, and
re-lays out the cluster with no restart, delivery staying exact; and the flags it refuses."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys

import httpx
import pytest

from bluedove.core.attributes import encode
from bluedove.lab.workloads import orders
from tests.integration.cluster_checks import EXACT
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import compare, drain, new_queue, oracle


def bluedove(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bluedove", *args], capture_output=True, text=True, timeout=timeout)


def typed_subscribe(api: httpx.Client, w, queues: dict) -> dict:
    """Every subscription of a typed workload into its queue: {id: (queue, predicates)}."""
    subs, qids = {}, list(queues)
    for j, preds in enumerate(w.predicates):
        q = qids[int(w.queue_of[j]) % len(qids)]
        r = api.post("/v1/subscriptions", json={"queue": q, "predicates": preds}, headers=queues[q])
        assert r.status_code == 201, r.text
        subs[r.json()["id"]] = (q, preds)
    return subs


def typed_publish(api: httpx.Client, messages: list[dict]) -> dict:
    """Orders in batches of 200: {message id: attributes}."""
    out = {}
    for i in range(0, len(messages), 200):
        chunk = messages[i:i + 200]
        r = api.post("/v1/messages:batch", json={"messages": [{"attributes": a} for a in chunk]})
        assert r.status_code == 202, r.text
        out.update(zip(r.json()["ids"], chunk))
    return out


@pytest.mark.integration
def test_seed_runs_the_job_on_a_typed_space_and_applies_it_to_the_running_cluster(tmp_path):
    w = orders.get(seed=3, n_subs=300, n_queues=30)
    (tmp_path / "space.json").write_text(json.dumps(w.space.to_json()))
    cluster = start_cluster(tmp_path / "c", matchers=2, space_file=str(tmp_path / "space.json"))
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            queues = dict(new_queue(api) for _ in range(8))
            subs = typed_subscribe(api, w, queues)
            epoch = api.get("/v1/cluster").json()["epoch"]
        store = cluster.store_url
        assert bluedove("export", "catalogue", "--store", store, "--out", str(tmp_path / "x")).returncode == 0
        # A message sample as the dispatchers' sampler writes it: skewed orders, their partition coordinates.
        (tmp_path / "samples").mkdir()
        with open(tmp_path / "samples" / "messages-0.jsonl", "w") as f:
            for t, m in enumerate(w.messages(3000, seed=7)):
                f.write(json.dumps({"ts": t * 0.01, "point": [w.space.by_name[d].coordinate(m.get(d))
                                                              for d in w.space.names]}) + "\n")
        seed_file = tmp_path / "seed.json"
        run = bluedove("seed", "--subscriptions", str(tmp_path / "x" / "subscriptions"), "--out", str(seed_file),
                       "--messages", str(tmp_path / "samples"), "--window-s", "5", "--store", store, "--apply")
        assert run.returncode == 0, run.stderr[-3000:]
        assert "applied: epoch" in run.stdout, run.stdout
        seed = json.loads(seed_file.read_text())
        assert seed["matchers"] == 2 and seed["inputs"]["message_count"] == 3000  # N from the cluster
        # us-east-1 and us-east-2 (one coordinate, "us-eas") carry over 40 % of the orders: an atom
        # of that one coordinate, which a boundary meets, and the report names it as text.
        hot = encode("us-east-1")
        region = seed["dimensions"]["region"]
        atom = [u for u in region["unsplittable"] if u["low"] == hot]
        assert atom and atom[0]["high"] == hot + 1 and atom[0]["value"] == '"us-eas"'
        assert hot in region["boundaries"] or hot + 1 in region["boundaries"]
        assert all(float(b).is_integer() for b in region["boundaries"]) and region["labels"][-1] == "end"
        assert re.search(r'^seed: region cut at .*"us-eas"', run.stdout, re.M), run.stdout
        assert re.search(r'm1: region \[""', run.stdout), run.stdout  # the ranges applied, as prefixes
        # The partition recommended: the attributes the orders constrain most, region then status.
        report = seed["attributes"]
        assert report["recommended"][:2] == ["region", "status"] and len(report["recommended"]) == 3
        assert not {"coupon", "express"} & set(report["recommended"])
        assert f"recommended partition: {', '.join(report['recommended'])} (now: region, status, amount)" in run.stdout
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            view = api.get("/v1/cluster").json()
            assert view["epoch"] > epoch
            members = {m["id"]: m["segments"] for m in view["members"]}
            for row in seed["placement"]:
                for name, index in row["segments"].items():
                    b = seed["dimensions"][name]["boundaries"]
                    assert members[f"m{row['matcher'] + 1}"][name] == pytest.approx([b[index], b[index + 1]])
            messages = typed_publish(api, w.messages(1500, seed=4))

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
