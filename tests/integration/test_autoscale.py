"""`bluedove up --autoscale`: the local backend starts and stops matcher processes, and each
change is a split or a merge the cluster shows (the policy itself is tested in unit tests)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from bluedove.store.server import free_port

pytestmark = pytest.mark.integration


def cluster_state(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/cluster", timeout=5) as r:
        return json.loads(r.read())


def run_up(tmp_path, *flags: str):
    port = free_port()
    env = {**os.environ, "BLUEDOVE_HANDOFF_GRACE_S": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "bluedove", "up", "--http-port", str(port), "--grpc-port", "0",
                             "--data-dir", str(tmp_path), "--autoscale", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for line in proc.stdout:
        if line.startswith("ready"):
            break
    return proc, port


def wait_for(port: int, cond, limit_s: float = 60.0) -> dict:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        state = cluster_state(port)
        if cond(state):
            return state
        time.sleep(0.3)
    raise AssertionError(f"not within {limit_s} s: {state}")


def owners(state: dict) -> list[str]:
    return sorted(m["id"] for m in state["members"] if m["segments"])


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return out


def test_below_the_minimum_a_matcher_is_started_and_joins_by_a_split(tmp_path):
    proc, port = run_up(tmp_path, "--matchers", "1", "--min-matchers", "2", "--max-matchers", "3")
    try:
        state = wait_for(port, lambda s: owners(s) == ["m1", "m2"])
        assert state["autoscaler"]["enabled"] and state["autoscaler"]["min"] == 2
        assert state["autoscaler"]["max"] == 3 and state["autoscaler"]["backend"] == "local"
        actions = [e["action"] for e in state["autoscaler"]["events"]]
        assert actions == ["scale_out", "split"], state["autoscaler"]["events"]
        assert "below the minimum 2" in state["autoscaler"]["events"][0]["reason"]
    finally:
        stop(proc)


def test_above_the_maximum_the_newest_leaves_by_a_merge_and_is_not_restarted(tmp_path):
    proc, port = run_up(tmp_path, "--matchers", "3", "--min-matchers", "1", "--max-matchers", "2")
    try:
        state = wait_for(port, lambda s: owners(s) == ["m1", "m2"])
        actions = [e["action"] for e in state["autoscaler"]["events"]]
        assert actions[:2] in (["merge", "scale_in"], ["scale_in", "merge"]), state["autoscaler"]["events"]
        time.sleep(3)  # the leaver serves out its grace (1 s) and exits 0; up must not restart it
        assert owners(cluster_state(port)) == ["m1", "m2"]
    finally:
        out = stop(proc)
    assert "matcher m3 left the cluster" in out
    assert "restarted" not in out
