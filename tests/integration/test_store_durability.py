"""Redis as production runs it: with AOF (appendfsync everysec) a restart of redis-server,
even a SIGKILL, loses no delivery that was queued and not yet acked; acked ones stay gone."""

from __future__ import annotations

import time

import httpx
import pytest
import redis

from bluedove.store.server import RedisServer
from tests.integration.conftest import assert_no_children, start_cluster

pytestmark = pytest.mark.integration


def test_settings_of_the_embedded_redis(tmp_path):
    server = RedisServer(tmp_path).start()
    try:
        r = redis.Redis.from_url(server.url, decode_responses=True)
        conf = {k: v for key in ("appendonly", "appendfsync", "maxmemory-policy") for k, v in r.config_get(key).items()}
        assert conf == {"appendonly": "yes", "appendfsync": "everysec", "maxmemory-policy": "noeviction"}
        r.close()
    finally:
        server.stop()


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_restart_of_redis_loses_no_unacked_delivery(tmp_path, monkeypatch, how):
    monkeypatch.setenv("BLUEDOVE_VISIBILITY_TIMEOUT_S", "1")
    cluster = start_cluster(tmp_path, matchers=2, store_cluster=None)  # one redis-server, killed here
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            sub = api.post("/v1/subscriptions", json={"predicates": {}}).json()
            q, auth = sub["queue"], {"Authorization": f"Bearer {sub['token']}"}
            msgs = [{"attributes": {"x0": i, "x1": 1, "x2": 2, "x3": 3}, "payload": i, "id": f"m{i}"}
                    for i in range(300)]
            assert api.post("/v1/messages:batch", json={"messages": msgs}).status_code == 202
            # 100 handed out and acked, 100 handed out and not acked (pending), 100 never polled.
            acked, pending = [], []
            while len(acked) < 100:
                acked += api.get(f"/v1/queues/{q}/messages", params={"max": 100 - len(acked), "wait": 2},
                                 headers=auth).json()["messages"]
            assert api.post(f"/v1/queues/{q}/ack", json={"receipts": [m["receipt"] for m in acked]},
                            headers=auth).status_code == 204
            while len(pending) < 100:
                pending += api.get(f"/v1/queues/{q}/messages", params={"max": 100 - len(pending), "wait": 2},
                                   headers=auth).json()["messages"]

            port = cluster.redis.port
            if how == "kill":
                cluster.redis.kill()  # SIGKILL: what was answered is in the AOF (in the OS's page cache)
            else:
                cluster.redis.stop()  # SIGTERM: redis flushes and fsyncs the AOF
            cluster.redis = RedisServer(cluster.data_dir / "redis", port=port).start()

            time.sleep(1.2)  # the pending ones' visibility timeout passes
            got: dict[str, dict] = {}
            deadline = time.monotonic() + 20
            while len(got) < 200 and time.monotonic() < deadline:
                r = api.get(f"/v1/queues/{q}/messages", params={"max": 1000, "wait": 1}, headers=auth)
                if r.status_code != 200:  # the dispatcher reconnects to the store
                    time.sleep(0.2)
                    continue
                for m in r.json()["messages"]:
                    got[m["id"]] = m
            expected = {f"m{i}" for i in range(300)} - {m["id"] for m in acked}
            assert set(got) == expected
            assert {m["id"] for m in pending} <= set(got)
            assert all(got[f"m{i}"]["payload"] == i for i in range(300) if f"m{i}" in got)
    finally:
        cluster.stop()
    assert_no_children(cluster)
