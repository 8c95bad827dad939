"""The store on a Redis Cluster when things break part way, on real processes: a matcher killed
between two nodes' shares of one delivery batch, and a primary killed under steady publishing.

Each test starts its own Redis Cluster (bluedove/store/cluster_server.py) and LocalCluster,
whatever --store-kind says, and stops both whatever happens.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time
import urllib.request

import httpx
import pytest
from redis.crc import key_slot

from bluedove.local.cluster import LocalCluster
from bluedove.store import keys as K
from bluedove.store.client import sync_client
from bluedove.store.cluster_server import RedisClusterServers
from tests.integration.conftest import assert_no_children
from tests.integration.helpers import new_queue

pytestmark = pytest.mark.integration

ATTRS = {"x0": 1, "x1": 999, "x2": 1, "x3": 999}  # low and high values: owned by different matchers


def _port_of_key(servers: RedisClusterServers, key: str) -> int:
    return servers.primary_of_slot(key_slot(key.encode()))


def _received(c: LocalCluster) -> dict[str, float]:
    """Messages each matcher has been forwarded so far (its Prometheus counter)."""
    out = {}
    for m in c.matchers():
        with urllib.request.urlopen(c.metrics_url(m), timeout=5) as resp:
            text = resp.read().decode()
        out[m.name] = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                          if line.startswith("bluedove_matcher_messages_received"))
    return out


def _deliveries_of(r, queue: str, mid: str) -> int:
    """How many entries of `queue`'s stream carry message `mid` (read, not consumed)."""
    import json

    return sum(1 for _, f in r.xrange(K.queue_stream(queue)) if json.loads(f["m"])["id"] == mid)


def test_a_matcher_killed_between_two_nodes_writes_leaves_each_queue_one_delivery(tmp_path):
    """A message matches queue A (on primary PA) and queue B (on primary PB). PB is frozen
    (SIGSTOP: no reset, its socket still takes the bytes), so the matcher's pipeline writes A's
    share and then waits on B's. Once A holds the delivery the matcher is SIGKILLed and PB
    resumed: the dispatcher's call fails, it sends the message to the other matcher, which
    writes A again (its (queue, message) mark: nothing written) and B. B may also run the
    killed matcher's call, whose bytes were in its socket: the mark makes that one write too.
    Each queue ends with the delivery exactly once, and the publish is accepted (at once, or on
    the client's retry with its own id if the dispatcher ran out of candidates meanwhile).

    No replicas and a node timeout far above the freeze, so that nothing fails over while PB
    is stopped: the only failure is the writer's."""
    servers = RedisClusterServers(tmp_path / "rc", primaries=3, replicas=0, node_timeout_ms=30_000).start()
    c = None
    stopped: int | None = None
    try:
        c = LocalCluster(matchers=2, http_port=0, data_dir=tmp_path / "bd", store=servers.url, quiet=True,
                         restart=False).start()
        r = sync_client(servers.url)
        with httpx.Client(base_url=c.url, timeout=60) as api:
            queues: dict[int, tuple[str, dict]] = {}
            while len(queues) < 2:  # two queues whose streams live on different primaries
                q, auth = new_queue(api)
                queues.setdefault(_port_of_key(servers, K.queue_stream(q)), (q, auth))
            (pa, (qa, auth_a)), (pb, (qb, auth_b)) = sorted(queues.items())[:2]
            for q, auth in ((qa, auth_a), (qb, auth_b)):
                resp = api.post("/v1/subscriptions", json={"queue": q, "predicates": {}}, headers=auth)
                assert resp.status_code == 201, resp.text
            owners = {m for _, m in c.table.candidates([ATTRS[n] for n in c.space.names])}
            assert len(owners) == 2, f"the message's candidates should be both matchers: {owners}"
            # Scripts are loaded on a node when it first refuses one (NOSCRIPT): a message first,
            # so that the frozen node's share is not the only one a fresh cluster would refuse.
            warm = api.post("/v1/messages", json={"attributes": ATTRS, "id": "warm-up"})
            assert warm.status_code == 202, warm.text
            # the publisher's own id, whose mark (read before the writes) is not on the frozen node
            mid = next(m for m in (f"split-{i}" for i in range(1000))
                       if _port_of_key(servers, K.message_mark(m)) != pb)
            before = _received(c)
            answers: list = []
            publish = threading.Thread(target=lambda: answers.append(
                api.post("/v1/messages", json={"attributes": ATTRS, "id": mid})))

            stopped = servers.nodes[pb].proc.pid
            os.kill(stopped, signal.SIGSTOP)
            publish.start()
            deadline = time.monotonic() + 10
            while _deliveries_of(r, qa, mid) == 0:  # A's share written, B's waiting on the frozen node
                assert time.monotonic() < deadline, "queue A never got its delivery while B's node was frozen"
                time.sleep(0.05)
            assert _deliveries_of(r, qa, mid) == 1
            writer = next(m for m, n in _received(c).items() if n > before[m])
            c.child(writer).proc.send_signal(signal.SIGKILL)
            c.child(writer).proc.wait()
            time.sleep(0.3)  # the dispatcher sees the call fail and tries the other matcher
            os.kill(stopped, signal.SIGCONT)
            stopped = None
            publish.join(60)
            assert not publish.is_alive(), "the publish never returned"
            first = answers[0]
            assert first.status_code in (202, 503), first.text
            retries = 0
            while first.status_code != 202:  # the dispatcher ran out of candidates: retry with the same id
                retries += 1
                assert retries < 50, first.text
                time.sleep(0.2)
                first = api.post("/v1/messages", json={"attributes": ATTRS, "id": mid})
                assert first.status_code in (202, 503), first.text
            other = next(m for m in before if m != writer)
            assert _received(c)[other] > before[other], "the other matcher never got the message"
            # each queue: the delivery once, whoever wrote it, however many times it was written
            assert (_deliveries_of(r, qa, mid), _deliveries_of(r, qb, mid)) == (1, 1)
            for q, auth in ((qa, auth_a), (qb, auth_b)):
                got = api.get(f"/v1/queues/{q}/messages", params={"max": 10, "wait": 1}, headers=auth).json()
                assert [m["id"] for m in got["messages"]] == ["warm-up", mid]
            print(f"\npartial write: A on {pa}, B on {pb}; killed {writer}; first answer "
                  f"{answers[0].status_code}, client retries {retries}")
        r.close()
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        if c is not None:
            c.stop()
            assert_no_children(c)
        servers.stop()
