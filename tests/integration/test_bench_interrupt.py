"""An interrupted bench leaves nothing behind: SIGTERM (kill, a job's timeout) stops `bluedove bench`
as Ctrl-C does, so the cluster it started is stopped, its publisher processes ended and its matchers'
cgroups removed (before, the parent waited on its publishers for minutes and the cluster's processes
and cgroups outlived it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.lab]


def test_sigterm_stops_a_bench_with_its_cluster_and_publishers(tmp_path):
    err = tmp_path / "err"
    family: list[int] = []
    with open(err, "w") as f:
        bench = subprocess.Popen([sys.executable, "-m", "bluedove", "bench", "e2e", "--matchers", "1", "--subs", "200",
                                  "--deliver", "count", "--rounds", "1", "--step-s", "30", "--json"],
                                 stdout=subprocess.DEVNULL, stderr=f, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while "matchers up" not in err.read_text() and time.monotonic() < deadline:
            assert bench.poll() is None, err.read_text()
            time.sleep(0.2)
        time.sleep(4)  # its subscriptions made, its first rate step under way (30 s long)
        family += [bench.pid, *(c.pid for c in psutil.Process(bench.pid).children(recursive=True))]
        assert len(family) > 3, family  # the cluster's processes and the publishers are running
        os.kill(bench.pid, signal.SIGTERM)
        assert bench.wait(timeout=30) != 0
        left = _still_running(family, within_s=15)  # some are still exiting (multiprocessing's resource tracker
        assert left == [], [p.cmdline() for p in left]  # ends once the last of its users has): not minutes
    finally:  # whatever happened, nothing of it outlives the test
        for pid in [*family, bench.pid]:
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass


def _still_running(pids: list[int], within_s: float) -> list[psutil.Process]:
    """Those of `pids` still running (not ended, not a zombie) after waiting up to `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        left = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    left.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)
