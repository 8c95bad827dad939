"""Redis goes away: publishes and API calls fail fast with 503 (not hang, not 500), matchers
are not blamed for it, and the service recovers by itself when Redis returns."""

from __future__ import annotations

import time

import httpx
import pytest

from bluedove.store.server import RedisServer
from tests.integration.conftest import assert_no_children, start_cluster

pytestmark = pytest.mark.integration
GOOD = {"attributes": {"x0": 1, "x1": 2, "x2": 3, "x3": 4}}


def test_publish_fails_fast_while_redis_is_down_and_recovers(tmp_path):
    cluster = start_cluster(tmp_path, matchers=2)
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            sub = api.post("/v1/subscriptions", json={"predicates": {}}).json()
            auth = {"Authorization": f"Bearer {sub['token']}"}
            assert api.post("/v1/messages", json={**GOOD, "id": "before"}).status_code == 202

            port = cluster.redis.port
            cluster.redis.kill()
            for path, body in (("/v1/messages", {**GOOD, "id": "during"}), ("/v1/queues", None)):
                t0 = time.monotonic()
                r = api.post(path, json=body)
                assert r.status_code == 503, r.text
                assert r.json()["error"]["code"] == "unavailable"
                assert time.monotonic() - t0 < 5
            assert api.get("/readyz").status_code == 503

            cluster.redis = RedisServer(cluster.data_dir / "redis", port=port).start()  # AOF reloads
            deadline = time.monotonic() + 15
            while api.post("/v1/messages", json={**GOOD, "id": "during"}).status_code != 202:
                assert time.monotonic() < deadline, "no recovery after Redis came back"
                time.sleep(0.2)
            members = api.get("/v1/cluster").json()["members"]
            assert all(m["status"] == "alive" for m in members), members
            got = api.get(f"/v1/queues/{sub['queue']}/messages", params={"max": 10, "wait": 2},
                          headers=auth).json()["messages"]
            assert sorted(m["id"] for m in got) == ["before", "during"]
    finally:
        cluster.stop()
    assert_no_children(cluster)
