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
from bluedove.core.spaces import parse_space_spec
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


@pytest.mark.integration
def test_a_named_space_is_exported_and_seeded_on_its_own(tmp_path):
    """`export catalogue --space-name fleet` then `seed --space-name fleet --subscriptions … --apply`:
    N is the matchers fleet spans (2 of the cluster's 3); its messages (the sample) and
    subscriptions crowd the north, so the job cuts lat there; fleet's table is laid out by the
    seed and the default space's is not touched; fleet's deliveries stay exact."""
    cluster = start_cluster(tmp_path / "c", matchers=3)
    fleet = {"name": "fleet", "attributes": [{"name": "lat", "min": -90, "max": 90},
                                             {"name": "lon", "min": -180, "max": 180}], "matchers": 2}
    space = parse_space_spec(fleet).space
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            assert api.post("/v1/spaces", json=fleet).status_code == 201
            default_epoch = api.get("/v1/cluster").json()["epoch"]
            queues = dict(new_queue(api) for _ in range(4))
            subs = {}
            for j, q in enumerate(list(queues) * 50):
                preds = {"lat": [60 + j % 25, 62 + j % 25], "lon": [-180 + j, -170 + j]}
                r = api.post("/v1/spaces/fleet/subscriptions", json={"queue": q, "predicates": preds},
                             headers=queues[q])
                assert r.status_code == 201, r.text
                subs[r.json()["id"]] = (q, preds)
        store, out = cluster.store_url, tmp_path / "x"
        assert bluedove("export", "catalogue", "--store", store, "--out", str(out), "--space-name",
                        "fleet").returncode == 0
        points = [{"lat": 55 + (i % 35), "lon": -180 + (i * 7) % 360} for i in range(400)]
        (tmp_path / "samples").mkdir()
        with open(tmp_path / "samples" / "messages-0.jsonl", "w") as f:
            for t, p in enumerate(points * 5):
                f.write(json.dumps({"ts": t * 0.01, "point": [p["lat"], p["lon"]]}) + "\n")
        seed_file = tmp_path / "seed.json"
        run = bluedove("seed", "--space-name", "fleet", "--subscriptions", str(out / "subscriptions"), "--out",
                       str(seed_file), "--messages", str(tmp_path / "samples"), "--window-s", "5", "--store", store,
                       "--apply")
        assert run.returncode == 0 and "applied: epoch 2" in run.stdout, run.stderr[-3000:]
        seed = json.loads(seed_file.read_text())
        assert seed["matchers"] == 2 and seed["space"] == space.to_json()
        lat = seed["dimensions"]["lat"]["boundaries"]
        assert 55 <= lat[1] <= 90, lat  # the cut where the messages are, not at the equator
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            assert api.get("/v1/cluster").json()["epoch"] == default_epoch
            view = api.get("/v1/cluster", params={"space": "fleet"}).json()
            assert view["epoch"] == 2
            cuts = sorted(m["segments"]["lat"][0] for m in view["members"] if m["segments"])
            assert cuts == pytest.approx([-90, lat[1]])
            messages = {}
            for i in range(0, len(points), 200):
                r = api.post("/v1/spaces/fleet/messages:batch",
                             json={"messages": [{"attributes": p} for p in points[i:i + 200]]})
                assert r.status_code == 202, r.text
                messages.update(zip(r.json()["ids"], (tuple(p[d] for d in space.names) for p in points[i:i + 200])))

        async def received():
            async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
                return await drain(client, queues)

        expected = oracle(space, subs, messages)
        assert len(expected) > 100
        assert compare(expected, asyncio.run(received())) == EXACT
    finally:
        cluster.stop()
    assert_no_children(cluster)
