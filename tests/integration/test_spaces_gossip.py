"""A named space's table change reaches the dispatchers by gossip within a round or two: with
the dispatcher's periodic store read of a space's table pushed out of the way (600 s), and no
publish to the space (no matcher refuses anything), a matcher leaving moves the space's table to
a new epoch and the dispatcher's view of the space (`GET /v1/cluster?space=`) shows it within
seconds. Without the epochs on the gossip it kept the old table until a refusal."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from bluedove.store.store import Store
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.test_spaces_exact import FLEET

pytestmark = pytest.mark.integration


async def _epoch(url: str, space: str) -> int:
    store = Store(url)
    try:
        return int((await store.get_table(space))["epoch"])
    finally:
        await store.close()


def test_a_named_spaces_new_table_reaches_the_dispatcher_by_gossip(tmp_path, monkeypatch):
    monkeypatch.setenv("BLUEDOVE_STORE_FALLBACK_S", "600")
    cluster = start_cluster(tmp_path, matchers=3)
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            assert api.post("/v1/spaces", json=FLEET).status_code == 201
            view = api.get("/v1/cluster", params={"space": "fleet"}).json()  # its path made, at epoch 1
            assert view["epoch"] == 1 and sum(1 for m in view["members"] if m["segments"]) == 3
            cluster.remove_matcher("m3")  # hands fleet's segments (and the default's) off, then exits
            stored = asyncio.run(_epoch(cluster.store_url, "fleet"))
            assert stored > 1
            deadline = time.monotonic() + 5
            while (seen := api.get("/v1/cluster", params={"space": "fleet"}).json())["epoch"] != stored:
                assert time.monotonic() < deadline, f"the dispatcher still holds epoch {seen['epoch']}, not {stored}"
                time.sleep(0.1)
            assert {m["id"] for m in seen["members"] if m["segments"]} == {"m1", "m2"}
    finally:
        cluster.stop()
    assert_no_children(cluster)
