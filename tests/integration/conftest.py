"""Fixtures that start real clusters (redis-server, matcher and dispatcher processes), and Stores
on the test Redis."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from bluedove.local.cluster import LocalCluster
from bluedove.store.client import sync_client
from bluedove.store.store import Store, StoreLimits
from tests.conftest import STORE_KIND_ENV


def start_cluster(tmp_path, **kw) -> LocalCluster:
    """A LocalCluster (4 matchers unless told) on a private store: one redis-server, or with
    `pytest --store-kind cluster` a Redis Cluster of 3 primaries with a replica each
    (`store_cluster=None`: one redis-server either way, for tests of its own failures)."""
    kw.setdefault("matchers", 4)
    if os.environ.get(STORE_KIND_ENV) == "cluster" and kw.get("store") is None:
        kw.setdefault("store_cluster", 3)
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


@pytest.fixture
async def make_store(redis_clean_url: str) -> AsyncIterator[Callable[..., Store]]:
    """Build Stores on the clean test Redis (optionally with limits); all closed afterwards."""
    made: list[Store] = []

    def make(limits: StoreLimits | None = None) -> Store:
        made.append(Store(redis_clean_url, limits))
        return made[-1]

    yield make
    for s in made:
        await s.close()


@pytest.fixture
def store(make_store) -> Store:
    """A Store with the default limits on an empty Redis."""
    return make_store()


@pytest.fixture
def raw(redis_clean_url: str):
    """A client of the test Redis that writes bytes as they are (a delivery as an older
    version stored it)."""
    r = sync_client(redis_clean_url, decode_responses=False)
    yield r
    r.close()
