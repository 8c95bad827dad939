"""The whole job: `spark-submit bluedove/spark/skew_stats.py` on a generated skewed workload, its seed
checked against a numpy oracle of the load model; the job without a message sample; bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bluedove.lab.bench.seed import write_inputs  # the inputs exactly as the bench writes them
from bluedove.lab.workloads.paper import paper
from bluedove.spark.job import DEFAULT_COST, Job, read_space
from bluedove.spark.skew_stats import run

ROOT = Path(__file__).resolve().parents[2]
N = 4


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


@pytest.mark.integration
def test_spark_submit_writes_an_equal_load_seed_that_matches_a_numpy_oracle(tmp_path):
    w = paper(adverse=2, n_subs=3000, seed=5)
    points = w.messages(20_000, seed=6)
    subs, samples = write_inputs(tmp_path, w, points, np.arange(len(points)) * 0.03)
    out = tmp_path / "seed.json"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    run_ = subprocess.run([str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
                           "--conf", "spark.ui.enabled=false", str(ROOT / "bluedove" / "spark" / "skew_stats.py"),
                           "--subscriptions", str(subs), "--messages", str(samples), "--matchers", str(N),
                           "--window-s", "30", "--out", str(out)],
                          capture_output=True, text=True, timeout=400, env=env, cwd=tmp_path)
    assert run_.returncode == 0, run_.stderr[-3000:]
    seed = json.loads(out.read_text())
    assert seed["matchers"] == N and seed["inputs"]["subscription_count"] == 3000
    assert seed["inputs"]["message_count"] == 20_000 and seed["inputs"]["windows"] == 20
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
    # Adverse skew on x0 and x1: their cuts crowd around the hot spots (125 and 375), not 250/500/750.
    assert seed["dimensions"]["x0"]["boundaries"][1] < 200 and seed["dimensions"]["x1"]["boundaries"][2] < 450
    for row in seed["placement"]:
        assert set(row["segments"]) == set(w.space.names)
    for name in w.space.names:
        assert sorted(r["segments"][name] for r in seed["placement"]) == list(range(N))
    risk = seed["risk"]
    assert 0.0 <= risk["placement"] <= risk["round_robin"] <= 1.0 and risk["capacity"] > 0
    assert [r["headroom"] for r in risk["by_headroom"]] == [0.1, 0.25, 0.5, 1.0]
    assert all(r["placement"] <= r["round_robin"] for r in risk["by_headroom"])


def test_without_a_sample_messages_are_taken_as_uniform(spark, tmp_path):
    w = paper(adverse=0, n_subs=2000, seed=2, dims=2)
    subs, _ = write_inputs(tmp_path, w, w.messages(10, 1), np.zeros(10))
    seed = run(spark, Job(subscriptions=str(subs), space=read_space(str(tmp_path / "space.json")), matchers=3),
               say=lambda *_: None)
    assert seed["inputs"]["messages"] is None and seed["inputs"]["message_count"] == 0
    h = seed["dimensions"]["x0"]["histogram"]
    widths = np.diff(h["edges"])
    assert np.asarray(h["messages"]) / widths == pytest.approx(np.full(len(widths), 1e6 / 1000.0))
    # Uniform messages: the load follows the subscriptions, densest round x0's hot spot (125).
    b = seed["dimensions"]["x0"]["boundaries"]
    assert b[1] < 333 and seed["dimensions"]["x0"]["segment_load"] == pytest.approx([1 / 3] * 3, abs=0.01)
    assert seed["inputs"]["windows"] == 0  # no time: the risk rests on the mean loads alone


def test_bad_input_stops_before_spark_starts_with_the_flag_named(tmp_path):
    from bluedove.spark.skew_stats import main
    (tmp_path / "subscriptions").mkdir()
    assert main(["--subscriptions", str(tmp_path / "subscriptions"), "--matchers", "2"]) == 2  # no space.json
    (tmp_path / "space.json").write_text('{"dimensions": [{"name": "x", "min": 0, "max": 1}]}')
    assert main(["--subscriptions", str(tmp_path / "subscriptions"), "--matchers", "0"]) == 2
    (tmp_path / "bad.json").write_text('{"dimensions": [{"name": "x", "min": 1, "max": 0}]}')
    assert main(["--subscriptions", str(tmp_path / "subscriptions"), "--space", str(tmp_path / "bad.json"),
                 "--matchers", "2"]) == 2
