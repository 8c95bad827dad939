"""Redis goes away: publishes and API calls fail fast with 503 / UNAVAILABLE (not hang, not 500),
over REST and gRPC, matchers are not blamed for it, and the service recovers by itself."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import pytest

from bluedove.store.server import RedisServer
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.conftest import assert_no_children, start_cluster

pytestmark = pytest.mark.integration
GOOD = {"attributes": {"x0": 1, "x1": 2, "x2": 3, "x3": 4}}


def test_publish_fails_fast_while_redis_is_down_and_recovers(tmp_path):
    cluster = start_cluster(tmp_path, matchers=2, store_cluster=None)  # one redis-server, killed here
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            subs = [api.post("/v1/subscriptions", json={"predicates": {}}).json() for _ in range(3)]
            auths = [{"Authorization": f"Bearer {sub['token']}"} for sub in subs]
            with ThreadPoolExecutor(30) as pool:  # looks at once: the dispatcher's pool keeps many connections
                list(pool.map(lambda _: api.get(f"/v1/queues/{subs[0]['queue']}/messages", params={"wait": 1},
                                                headers=auths[0]), range(30)))
            assert api.post("/v1/messages", json={**GOOD, "id": "before"}).status_code == 202
            # Redis (appendfsync everysec) may hold an answered write out of its AOF file for up to
            # 2 s while a slow fsync is under way (a loaded disk): a SIGKILL then loses it. Past
            # that, the write is in the file (docs/operations.md, "Failures and what happens").
            time.sleep(2.5)

            port = cluster.redis.port
            cluster.redis.kill()
            for path, body in (("/v1/messages", {**GOOD, "id": "during"}), ("/v1/queues", None)):
                t0 = time.monotonic()
                r = api.post(path, json=body)
                assert r.status_code == 503, r.text
                assert r.json()["error"]["code"] == "unavailable"
                assert r.headers["retry-after"] == "1"  # when to try again (RFC 9110 §10.2.3)
                assert time.monotonic() - t0 < 5
            assert api.get("/readyz").status_code == 503

            cluster.redis = RedisServer(cluster.data_dir / "redis", port=port).start()  # AOF reloads
            deadline = time.monotonic() + 15
            while api.post("/v1/messages", json={**GOOD, "id": "during"}).status_code != 202:
                assert time.monotonic() < deadline, "no recovery after Redis came back"
                time.sleep(0.2)
            members = api.get("/v1/cluster").json()["members"]
            assert all(m["status"] == "alive" for m in members), members
            with ThreadPoolExecutor(len(subs)) as pool:  # at once: most on connections kept from before Redis died
                polls = list(pool.map(lambda s: api.get(f"/v1/queues/{s[0]['queue']}/messages",
                                                        params={"max": 10, "wait": 2}, headers=s[1]), zip(subs, auths)))
            for r in polls:  # a broken connection is replaced and the command sent again: no 503 once Redis is back
                assert r.status_code == 200, r.text
                assert sorted(m["id"] for m in r.json()["messages"]) == ["before", "during"]
    finally:
        cluster.stop()
    assert_no_children(cluster)


def test_grpc_calls_fail_fast_with_unavailable_and_recover(tmp_path):
    """The same over gRPC, and for readers: a poll, and a long-poll or Listen stream already
    waiting when Redis dies, answer UNAVAILABLE / 503 within seconds instead of hanging."""
    cluster = start_cluster(tmp_path, matchers=2, store_cluster=None)  # one redis-server, killed here
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api, grpc.insecure_channel(cluster.grpc_address) as ch:
            stub = pb_grpc.PubSubStub(ch)
            sub = stub.Subscribe(pb.SubscribeRequest())
            md = (("authorization", f"Bearer {sub.token}"),)
            auth = {"Authorization": f"Bearer {sub.token}"}
            msg = pb.Message(attributes=GOOD["attributes"], id="g-during")
            listener = stub.Listen(pb.ListenRequest(queue=sub.queue), metadata=md, timeout=30)
            with ThreadPoolExecutor(2) as pool:
                waiting_poll = pool.submit(api.get, f"/v1/queues/{sub.queue}/messages", params={"wait": 15},
                                           headers=auth)
                waiting_listen = pool.submit(lambda: next(listener))
                time.sleep(1.0)
                t0 = time.monotonic()
                cluster.redis.kill()
                assert waiting_poll.result(10).status_code == 503
                with pytest.raises(grpc.RpcError) as e:
                    waiting_listen.result(10)
                assert e.value.code() == grpc.StatusCode.UNAVAILABLE
                assert time.monotonic() - t0 < 10

            for fn, req in ((stub.Publish, msg), (stub.CreateQueue, pb.CreateQueueRequest()),
                            (stub.Poll, pb.PollRequest(queue=sub.queue))):
                t0 = time.monotonic()
                with pytest.raises(grpc.RpcError) as e:
                    fn(req, metadata=md, timeout=30)
                assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value.details()
                assert dict(e.value.trailing_metadata())["bluedove-error-code"] == "unavailable"
                assert time.monotonic() - t0 < 5
            assert api.get(f"/v1/queues/{sub.queue}/messages", headers=auth).status_code == 503

            cluster.redis = RedisServer(cluster.data_dir / "redis", port=cluster.redis.port).start()
            deadline = time.monotonic() + 15
            while True:
                try:
                    stub.Publish(msg, timeout=5)
                    break
                except grpc.RpcError:
                    assert time.monotonic() < deadline, "no recovery after Redis came back"
                    time.sleep(0.2)
            got = stub.Poll(pb.PollRequest(queue=sub.queue, max=10, wait=2), metadata=md).messages
            assert [m.id for m in got] == ["g-during"]
    finally:
        cluster.stop()
    assert_no_children(cluster)


def test_unresponsive_redis_fails_publishes_with_503_not_a_hang(tmp_path):
    """A Redis that stops answering (SIGSTOP: no reset, like a network partition) fails calls
    with 503 after a bounded wait, does not mark matchers dead, and is forgotten once it resumes."""
    cluster = start_cluster(tmp_path, matchers=2, store_cluster=None)  # one redis-server, killed here
    pid = cluster.redis.proc.pid
    try:
        with httpx.Client(base_url=cluster.url, timeout=60) as api:
            os.kill(pid, signal.SIGSTOP)
            try:
                for path, body in (("/v1/messages", {**GOOD, "id": "paused"}), ("/v1/queues", None)):
                    t0 = time.monotonic()
                    r = api.post(path, json=body)
                    assert r.status_code == 503, r.text
                    assert time.monotonic() - t0 < 12
            finally:
                os.kill(pid, signal.SIGCONT)
            deadline = time.monotonic() + 15
            while api.post("/v1/messages", json={**GOOD, "id": "resumed"}).status_code != 202:
                assert time.monotonic() < deadline, "no recovery after Redis resumed"
                time.sleep(0.2)
    finally:
        os.kill(pid, signal.SIGCONT)
        cluster.stop()
    assert_no_children(cluster)
