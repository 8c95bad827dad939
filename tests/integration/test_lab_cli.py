"""The lab's commands as a user runs them (`bluedove bench kernel`, `bluedove sim figure`): subprocesses,
each on a small workload, checking itself exactly."""

import json
import subprocess
import sys

import pytest

from bluedove.lab.sim.costmodel import CostModel, Models

pytestmark = pytest.mark.integration


def test_bench_kernel_json_smoke():
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "kernel", "--workload", "paper", "--subs", "2000",
                        "--messages", "500", "--partitions", "5", "--repeat", "1", "--verify", "50", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["workload"].startswith("paper") and out["exact"] is True
    assert out["msgs_per_s"] > 0 and out["full_msgs_per_s"] > 0
    assert out["matches_per_msg"] > 0 and out["subscriptions"] == 2000


def test_sim_figure_cli_json(tmp_path):
    model = tmp_path / "model.json"
    Models(CostModel({"one": 1e-5, "size": 2e-9, "matches": 6e-7}, meta={"fit": {}}),
           CostModel({"one": 4e-6, "searched": 4e-8, "matches": 4e-7}, "per_dimension", meta={"fit": {}})).save(model)
    r = subprocess.run([sys.executable, "-m", "bluedove", "sim", "figure", "8", "--model", str(model), "--json",
                        "--horizon", "2", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    fig = json.loads(r.stdout.strip().splitlines()[-1])
    assert fig["figure"] == "8" and {"bluedove", "p2p", "per_dimension"} <= set(fig["std_over_mean"])
    assert len(fig["rows"]) == 20 and (tmp_path / "fig8.png").exists()
    assert set(fig["rows"][0]["per_dimension"]) == {"bluedove", "p2p"}
    assert fig["paper"]["std_over_mean"]["bluedove"] == 0.14
