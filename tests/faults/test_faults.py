"""Each fault of `bluedove bench faults`, short, on a fresh cluster of real processes, under a
steady publisher that retries with its own ids; every delivery checked against brute force.

What each must show, besides no accepted message lost, duplicated or misdelivered:
- matcher-kill: declared dead, taken over (a new epoch), and it rejoins when started again;
- dispatcher-kill: the other dispatcher serves the retries; nothing refused for long;
- matcher-stop: suspected while stopped, and it rejoins after SIGCONT;
- store-kill: publishes refused (503), none acknowledged while redis-server is down; the
  restarted server has every acknowledged delivery (its AOF);
- disk-full: the same while the store's disk is full;
- partition: the matchers cut in two halves while the dispatchers reach all of them.
"""

from __future__ import annotations

import pytest

from bluedove.lab.faults import netns
from bluedove.lab.faults.run import run_fault

pytestmark = pytest.mark.integration

SHORT = {"before_s": 1.0, "after_s": 1.0, "subs": 200, "queues": 6, "rate": 30.0}


def _run(name: str, tmp_path, **kw):
    r = run_fault(name, tmp_path / name, **{**SHORT, **kw})
    print(r.as_json())  # the figures, with -s
    assert r.accepted > 0 and r.expected > 0
    assert (r.lost, r.duplicates, r.wrong, r.given_up) == (0, 0, 0, 0), r
    return r


def test_matcher_sigkill(tmp_path):
    r = _run("matcher-kill", tmp_path)
    assert "m2 dead" in r.notes["statuses_seen"]
    assert len(r.notes["epochs_seen"]) >= 2  # taken over (and given segments again on rejoin)
    assert r.notes["rejoined_s"] > r.notes["taken_over_s"] > 0
    assert r.whole_s >= r.notes["taken_over_s"] - 0.5  # not whole before the takeover (sampled every 0.2 s)


def test_dispatcher_sigkill(tmp_path):
    r = _run("dispatcher-kill", tmp_path)
    assert r.notes["restarted_after_s"] >= 2


def test_matcher_sigstop(tmp_path):
    r = _run("matcher-stop", tmp_path, stop_s=6.0)
    assert r.notes["suspected_s"] is not None and r.notes["suspected_s"] < 6.0
    assert r.notes["rejoined_after_cont_s"] > 0


def test_store_sigkill_and_restart(tmp_path):
    r = _run("store-kill", tmp_path)
    assert r.refusals > 0 and r.refused_s > 0  # refused while it was down, not acknowledged unwritten
    assert r.notes["accepted_while_store_down"] == 0


def _root_only(what: str) -> None:
    import os
    if os.geteuid() != 0:
        pytest.skip(f"{what} needs root")


def test_store_disk_full(tmp_path):
    _root_only("a tmpfs mount")
    r = _run("disk-full", tmp_path, disk_full_s=3.0)
    assert r.refusals > 0
    assert r.notes["accepted_while_store_down"] == 0


def test_partition_between_matchers(tmp_path):
    _root_only("network namespaces")
    if (why := netns.available()) is not None:
        pytest.skip(f"network namespaces: {why}")
    r = _run("partition", tmp_path, partition_s=5.0)
    assert r.notes["sides"] == "m1,m2 | m3,m4"
