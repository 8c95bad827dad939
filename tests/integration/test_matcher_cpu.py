"""Matchers as pods on one machine: LocalCluster(matcher_cpu=…) puts every matcher it starts (at
start, added, restarted) in a cgroup of its own under a CFS quota, the kernel holds the quota,
and no group outlives its process or the cluster. Skipped where the cpu controller is not writable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from bluedove.local.child import Child
from bluedove.local.cpu_quota import PREFIX, Controller, CpuQuota, CpuQuotaError, detect
from tests.integration.conftest import start_cluster

pytestmark = pytest.mark.integration

BUSY = ("import sys, time\nsys.stdin.readline()\nt, c = time.monotonic(), time.process_time()\n"
        "while time.monotonic() - t < 1.5:\n    pass\nprint(time.process_time() - c)\n")


def writable_controller() -> Controller:
    """The cpu controller, or a skip saying why it cannot be used here."""
    try:
        controller = detect()
    except CpuQuotaError as exc:
        pytest.skip(str(exc))
    probe = controller.root / f"{PREFIX}-{os.getpid()}-probe"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        pytest.skip(f"{controller.root}: the cpu cgroup controller is not writable here ({exc})")
    return controller


def mine(controller: Controller) -> list[str]:
    return sorted(p.name for p in controller.root.iterdir() if p.name.startswith(f"{PREFIX}-{os.getpid()}-"))


def kill(child: Child) -> None:
    """SIGKILL a child and reap it (the supervisor's next check sees it died)."""
    assert child.proc is not None
    child.proc.send_signal(signal.SIGKILL)
    child.proc.wait(60)


def test_each_matcher_gets_its_own_group_for_its_life(tmp_path):
    controller = writable_controller()
    cluster = start_cluster(tmp_path, matchers=2, matcher_cpu=0.2)
    try:
        quota = cluster.cpu["matcher"]
        assert "dispatcher" not in cluster.cpu  # dispatchers run uncapped unless asked
        for c in cluster.matchers():
            assert quota.groups[c.name].name == f"{PREFIX}-{os.getpid()}-{c.name}"
            assert quota.pids(c.name) == [c.pid]
            assert quota.limit(c.name) == (20_000, 100_000)
        # Each matcher reads its limit from its cgroup and reports it; /v1/cluster shows it.
        deadline = time.monotonic() + 30
        while True:
            members = httpx.get(f"{cluster.url}/v1/cluster", timeout=10).json()["members"]
            limits = {m["id"]: m["cpu_limit"] for m in members}
            if all(limits.get(c.name) for c in cluster.matchers()) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        for c in cluster.matchers():
            got = limits[c.name]
            assert got and got["cores"] == pytest.approx(0.2), limits
            assert got["used"] >= 0 and 0 <= got["throttled"] <= 1, limits
        added = cluster.add_matcher()  # scale-out: the new process gets a group of its own too
        assert quota.pids(added.name) == [added.pid] and quota.limit(added.name) == (20_000, 100_000)
        assert mine(controller) == [f"{PREFIX}-{os.getpid()}-{m}" for m in ("m1", "m2", "m3")]

        cluster.restart = True  # a restarted matcher goes back into its group
        old = cluster.child("m1").pid
        kill(cluster.child("m1"))
        assert any("m1 died" in e for e in cluster.check())
        assert quota.pids("m1") == [cluster.child("m1").pid] != [old]

        cluster.restart = False  # one gone for good loses its group
        kill(added)
        assert any("m3 died" in e for e in cluster.check())
        assert "m3" not in quota.groups and not (controller.root / f"{PREFIX}-{os.getpid()}-m3").exists()
    finally:
        cluster.stop()
    assert mine(controller) == []  # every group gone with the cluster


def test_the_kernel_holds_the_quota(tmp_path):
    """A busy loop of 1.5 s under 0.2 core gets about 0.3 s of CPU, and cpu.stat counts throttled periods."""
    writable_controller()
    quota = CpuQuota(0.2)
    proc = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        path = quota.cap(proc.pid, "busy")
        out, _ = proc.communicate("go\n", timeout=60)  # the loop starts once it is in its group
        throttling = quota.throttling("busy")
    finally:
        proc.kill()
        proc.wait()
        quota.release_all()
    assert float(out) <= 0.45, f"{out} s of CPU in 1.5 s under a 0.2-core quota"
    assert throttling.throttled > 0 and throttling.throttled_s > 0, throttling
    assert not path.exists()
