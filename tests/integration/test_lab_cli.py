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


def _kernel_json(*flags: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "kernel", *flags, "--repeat", "1", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_bench_kernel_typed_vs_paper_and_boxes_vs_subs_smoke():
    """`--workload orders --vs paper`: both on the matcher's whole path, exact against the core's
    check; `--boxes-vs-subs`: one filter of N boxes and N subscriptions match alike."""
    out = _kernel_json("--workload", "orders", "--vs", "paper", "--subs", "300", "--messages", "100",
                       "--partitions", "3", "--verify", "20")
    assert out["workload"].startswith("orders") and out["exact"] is True and out["filters"] > 0
    assert [r["workload"] for r in out["runs"]] == [out["workload"], "paper(n_subs=300)"]
    assert all(r["msgs_per_s"] > 0 and r["matches_per_msg"] > 0 for r in out["runs"])
    assert out["matches_per_msg"] <= out["index_hits_per_msg"] and set(out["vs"]) == {"paper(n_subs=300)"}
    # shared filters: the walk meets each distinct box once, fewer than the entries holding them
    assert 0 < out["boxes_walked_per_msg"] < out["index_hits_per_msg"]
    boxes = _kernel_json("--boxes-vs-subs", "200", "--messages", "200")
    assert boxes["boxes_vs_subs"] == 200 and boxes["exact"] is True and set(boxes["pairs"]) == {"exact", "checked"}
    assert all(x["matches_per_msg"] > 0 and x["filter_cost_over_subs_median"] > 0 for x in boxes["pairs"].values())


def test_bench_kernel_adds_smoke():
    """`--adds`: a set's adds and removals timed, matching exact with them pending; a bad count is
    refused with exit 2."""
    out = _kernel_json("--workload", "sparse", "--subs", "2000", "--adds", "600", "--messages", "300", "--verify", "50")
    assert out["adds"] == 600 and out["add_batch"] == 16 and out["exact"] is True
    assert out["us_per_add"] > 0 and out["us_per_remove"] > 0 and out["pending_over_packed"] > 0
    assert out["pending_over_same"] > 0 and out["held_over_same"] > 0 and out["msgs_per_s_held"] > 0
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "kernel", "--adds", "0"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--adds" in r.stderr


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
