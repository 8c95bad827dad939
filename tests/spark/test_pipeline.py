"""The pipeline end to end on real processes: a skewed workload through a running cluster whose
dispatcher samples what it accepts, `bluedove export catalogue` of its store, the real job by
`spark-submit` (its seed checked against a numpy oracle of the load model on the rows it read),
then `bluedove up --seed` on a new store, where the same subscriptions and fresh skewed messages
are delivered exactly (a brute-force oracle)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from bluedove.lab.workloads.paper import paper
from bluedove.spark.job import DEFAULT_COST
from bluedove.store.server import free_port
from tests.integration.cluster_checks import EXACT
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import compare, drain, new_queue, oracle, stop_up

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
N = 3


def subscribe(api: httpx.Client, w, queues: dict) -> dict:
    """Every subscription of the workload into one of `queues`: {id: (queue, predicates)}."""
    subs, qids = {}, list(queues)
    for j in range(w.n_subs):
        q = qids[j % len(qids)]
        preds = w.predicates(j)
        r = api.post("/v1/subscriptions", json={"queue": q, "predicates": preds}, headers=queues[q])
        assert r.status_code == 201, r.text
        subs[r.json()["id"]] = (q, preds)
    return subs


def publish(api: httpx.Client, w, points) -> dict:
    """The points in batches of 200: {message id: point}."""
    out = {}
    for i in range(0, len(points), 200):
        chunk = [dict(zip(w.space.names, p)) for p in points[i:i + 200].tolist()]
        r = api.post("/v1/messages:batch", json={"messages": [{"attributes": a} for a in chunk]})
        assert r.status_code == 202, r.text
        out.update({mid: tuple(a[d] for d in w.space.names) for mid, a in zip(r.json()["ids"], chunk)})
    return out


def _hist(seed: dict, w, points: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    e = np.asarray(seed["dimensions"][w.space.names[dim]]["histogram"]["edges"])
    msgs = np.histogram(points[:, dim], bins=np.r_[e[:-1], np.inf])[0].astype(float)
    cover = np.array([np.sum((w.lows[:, dim] < e[b + 1]) & (w.highs[:, dim] > e[b])) for b in range(len(e) - 1)])
    return msgs, cover


def oracle_load(seed: dict, w, points: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The load model computed by numpy from the raw rows, on the seed's own bucket edges."""
    hists = [_hist(seed, w, points, d) for d in range(w.space.k)]
    p = [float(np.sum(m * c)) / (len(points) * w.n_subs) for m, c in hists]  # fraction passed per dimension
    others = np.prod([p[d] for d in range(w.space.k) if d != dim])
    msgs, cover = hists[dim]
    unit = DEFAULT_COST["one"] + DEFAULT_COST["searched"] * cover + DEFAULT_COST["matches"] * cover * others
    return msgs * unit, msgs, cover


def check_seed(seed: dict, w, samples: Path, window_s: float) -> None:
    """The job's seed against numpy on the sampled rows it read (`w`'s subscriptions, exported):
    counts and time windows, each dimension's histograms and load model, equal-load cuts, a
    placement of every segment, and its risk beside round robin's."""
    rows = [json.loads(line) for f in sorted(samples.glob("*/*.jsonl")) for line in f.read_text().splitlines()]
    points, ts = np.array([r["point"] for r in rows]), np.array([r["ts"] for r in rows])
    assert seed["matchers"] == N and seed["inputs"]["subscription_count"] == w.n_subs
    assert seed["inputs"]["message_count"] == len(rows)
    windows = int(np.floor((ts.max() - ts.min()) / window_s)) + 1
    assert seed["inputs"]["windows"] == windows >= 2  # several: the risk rests on the loads' covariance
    for i, d in enumerate(w.space.dimensions):
        dim = seed["dimensions"][d.name]
        b = dim["boundaries"]
        assert len(b) == N + 1 and b[0] == d.min and b[-1] == d.max and all(x < y for x, y in zip(b, b[1:]))
        load, msgs, cover = oracle_load(seed, w, points, i)
        assert dim["histogram"]["messages"] == pytest.approx(msgs.tolist())
        assert dim["histogram"]["subscriptions"] == cover.tolist()
        assert np.asarray(dim["histogram"]["load"]) == pytest.approx(load, rel=1e-9)
        worst_bucket = load.max() / load.sum()
        assert max(dim["segment_load"]) <= 1 / N + worst_bucket + 1e-9
    for row in seed["placement"]:
        assert set(row["segments"]) == set(w.space.names)
    for name in w.space.names:
        assert sorted(r["segments"][name] for r in seed["placement"]) == list(range(N))
    risk = seed["risk"]
    assert 0.0 <= risk["placement"] <= risk["round_robin"] <= 1.0 and risk["capacity"] > 0
    assert [r["headroom"] for r in risk["by_headroom"]] == [0.1, 0.25, 0.5, 1.0]
    assert all(r["placement"] <= r["round_robin"] for r in risk["by_headroom"])


def test_sample_export_spark_submit_and_a_seeded_cluster_deliver_exactly(tmp_path):
    w = paper(adverse=2, n_subs=400, seed=9)
    # 1. A running cluster samples every accepted message; its catalogue holds the subscriptions.
    first = start_cluster(tmp_path / "a", matchers=2, sample_rate=1.0)
    try:
        with httpx.Client(base_url=first.url, timeout=30) as api:
            queues = dict(new_queue(api) for _ in range(10))
            subscribe(api, w, queues)
            sent = publish(api, w, w.messages(3000, seed=1))
        assert len(sent) == 3000
    finally:
        first.stop()  # the dispatcher closes its sample file on the way out
    assert_no_children(first)
    samples = tmp_path / "a" / "samples"
    lines = sum(len(f.read_text().splitlines()) for f in samples.glob("*/*.jsonl"))
    assert lines == 3000 and not list(samples.glob("*/*.part"))

    # 2. The catalogue, exported from the stopped cluster's data dir.
    export = subprocess.run([sys.executable, "-m", "bluedove", "export", "catalogue", "--data-dir",
                             str(tmp_path / "a"), "--out", str(tmp_path / "export")],
                            capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr

    # 3. The real script, by spark-submit.
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    seed_file = tmp_path / "seed.json"
    job = subprocess.run([str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
                          "--conf", "spark.ui.enabled=false", str(ROOT / "bluedove" / "spark" / "skew_stats.py"),
                          "--subscriptions", str(tmp_path / "export" / "subscriptions"),
                          "--messages", str(samples), "--matchers", str(N), "--window-s", "0.01",
                          "--out", str(seed_file)],
                         capture_output=True, text=True, timeout=400, env=env)
    assert job.returncode == 0, job.stderr[-3000:]
    seed = json.loads(seed_file.read_text())
    assert seed["inputs"]["subscription_count"] == 400 and seed["inputs"]["message_count"] == 3000
    check_seed(seed, w, samples, 0.01)
    # Adverse skew on x0 and x1: their cuts crowd around the hot spots (125 and 375), not 333/667.
    assert seed["dimensions"]["x0"]["boundaries"][1] < 250 and seed["dimensions"]["x1"]["boundaries"][2] < 550

    # 4. `bluedove up --seed` on a new store: the table is the seed's; delivery is exact.
    port = free_port()
    up = subprocess.Popen([sys.executable, "-m", "bluedove", "up", "--matchers", str(N), "--seed", str(seed_file),
                           "--http-port", str(port), "--grpc-port", str(free_port()),
                           "--data-dir", str(tmp_path / "b")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        said = []
        for line in up.stdout:
            said.append(line)
            if line.startswith("ready") or line.startswith("bluedove up:"):
                break
        assert re.search(r"store\s+redis://", "".join(said)), "".join(said)
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=url, timeout=30) as api:
            members = {m["id"]: m["segments"] for m in api.get("/v1/cluster").json()["members"]}
            for row in seed["placement"]:
                mine = members[f"m{row['matcher'] + 1}"]
                for name, index in row["segments"].items():
                    b = seed["dimensions"][name]["boundaries"]
                    assert mine[name] == pytest.approx([b[index], b[index + 1]])
            queues = dict(new_queue(api) for _ in range(10))
            subs = subscribe(api, w, queues)
            messages = publish(api, w, w.messages(2000, seed=2))

        async def received():
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                return await drain(client, queues)

        got = asyncio.run(received())
        expected = oracle(w.space, subs, messages)
        assert len(expected) > 1000  # skewed messages meet skewed subscriptions: many matches
        assert compare(expected, got) == EXACT
    finally:
        stop_up(up, tmp_path)
