"""Fixtures that start real clusters: redis-server, matcher and dispatcher processes."""

from __future__ import annotations

import os
import subprocess

import httpx
import pytest

from bluedove.local.cluster import LocalCluster


def start_cluster(tmp_path, **kw) -> LocalCluster:
    kw.setdefault("matchers", 4)
    return LocalCluster(http_port=0, data_dir=tmp_path, quiet=True, restart=False, **kw).start()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """One 4-matcher cluster shared by the read-mostly API tests."""
    c = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield c
    c.stop()
    assert_no_children(c)


@pytest.fixture
def api(cluster):
    with httpx.Client(base_url=cluster.url, timeout=30) as client:
        yield client


def assert_no_children(c: LocalCluster) -> None:
    """Nothing the cluster started may outlive it."""
    out = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True).stdout
    mine = [line for line in out.splitlines() if str(c.data_dir) in line and str(os.getpid()) not in line.split()[0]]
    assert not mine, f"left running: {mine}"
