"""`bluedove bench replay`, a tiny run: both spaces accept messages in every phase, the ratios of
the logged space to the plain one are reported per role, the log's bytes per message are
counted, and the replay of the whole log finishes having read every message the logged space
accepted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.lab]


@pytest.mark.integration
def test_bench_replay_reports_the_logs_cost_and_a_replays_rate():
    out = subprocess.run([sys.executable, "-m", "bluedove", "bench", "replay", "--subs", "200", "--duration", "1.5",
                          "--rounds", "2", "--history-s", "1", "--publishers", "1", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.splitlines()[-1])
    assert r["ok"] and len(r["runs"]["plain"]) == len(r["runs"]["logged"]) == 2
    assert set(r["cpu_ratio_logged_vs_plain"]) == {"redis", "matchers", "dispatchers", "all"}
    assert all(v > 0 for v in r["cpu_ratio_logged_vs_plain"].values())
    replay = r["replay"]
    assert replay["messages"] >= sum(p["messages"] for p in r["runs"]["logged"]) > 0
    assert replay["per_s"] > 0 and replay["log_bytes_per_message"] > 32  # a point of 4 doubles at least
