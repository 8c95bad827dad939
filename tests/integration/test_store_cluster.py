"""The store on a Redis Cluster when things break part way: a matcher killed between two
nodes' shares of one delivery batch (on real processes, and on the store alone without
timing), a primary killed under steady publishing with and without ?wait=1 (checked against
the oracle), and ?wait=1 under load writing every delivery (what it costs is measured by
`bluedove bench store-wait`). docs/operations.md, "A Redis Cluster: what each failure
does", gives the figures these tests print.

Each test starts its own Redis Cluster (bluedove/store/redis_cluster.py) and LocalCluster,
whatever --store-kind says, and stops both whatever happens.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import threading
import time
import urllib.request

import httpx
import numpy as np
import pytest
import redis
from redis.crc import key_slot

from bluedove.core.model import build_subscription
from bluedove.lab.bench.store_wait import WAIT, load, store_cost, written
from bluedove.local.cluster import LocalCluster
from bluedove.store import keys as K
from bluedove.store.batch import Runner
from bluedove.store.client import sync_client
from bluedove.store.ids import new_id
from bluedove.store.redis_cluster import RedisClusterServers
from bluedove.store.store import Store
from tests.integration.cluster_checks import publish_steadily, subscribe_random
from tests.integration.conftest import assert_no_children
from tests.integration.helpers import drain, new_queue, oracle

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
    return sum(1 for _, f in r.xrange(K.queue_stream(queue)) if json.loads(f["m"])["id"] == mid)


def test_a_matcher_killed_between_two_nodes_writes_leaves_each_queue_one_delivery(tmp_path):
    """A message matches queue A (on primary PA) and queue B (on primary PB). PB is frozen
    (SIGSTOP: no reset, its socket still takes the bytes), so the matcher's pipeline writes A's
    share and then waits on B's. Once A holds the delivery the matcher is SIGKILLed and PB
    resumed: the dispatcher's call fails, it sends the message to the other matcher, which
    writes A again (its (queue, message) mark: nothing written) and B. B may also run the
    killed matcher's call, whose bytes were in its socket: of the two writes to B, the mark
    lets only the first through.
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


class _FirstGroupOnly(Runner):
    """A writer that dies part way: the first call of a delivery batch (one slot's share) is
    sent, then the connection is lost before the rest."""

    async def run(self, calls, wait=False):
        if len(calls) > 1:
            await super().run(calls[:1], wait)
            raise redis.exceptions.ConnectionError("the writer died after the first slot's call")
        return await super().run(calls, wait)


async def _write_part_then_retry(url: str) -> tuple[dict, dict, dict, tuple, tuple]:
    """One batch of 2 messages to 12 queues spread over slots, written part way by a dying
    writer, then whole by a fresh Store, then once more."""
    first, second = Store(url), Store(url)
    try:
        queues = [q for q, _ in await first.create_queues(12)]
        slots = {q: first.runner.slot_of_queue(q) for q in queues}
        messages = [("pub-1", '{"id":"pub-1"}'), ("pub-2", '{"id":"pub-2"}')]
        deliveries = [(q, i, '["s"]') for q in queues for i in (0, 1)]
        first.runner = _FirstGroupOnly(first.r, first.runner.wait_replicas, first.runner.wait_ms)
        with pytest.raises(redis.exceptions.ConnectionError):
            await first.deliver(messages, deliveries)
        part = {q: await first.queue_depth(q) for q in queues}
        retried = await second.deliver(messages, deliveries)
        again = await second.deliver(messages, deliveries)
        whole = {q: await second.queue_depth(q) for q in queues}
        return slots, part, whole, retried, again
    finally:
        await first.close()
        await second.close()


def test_a_batch_written_part_way_then_again_lands_once_in_every_queue(tmp_path):
    """The store-level version of the killed writer, without timing: a batch whose first
    slot's call was written before the writer died, delivered again by another Store (the
    dispatcher's retry on another matcher). The retry writes exactly the missing deliveries
    (the first slot's are held back by their (queue, message) marks), each queue ends with
    both messages once, and a third delivery of the batch writes nothing: the publisher ids'
    marks, set only once the whole batch was written, now stand."""
    servers = RedisClusterServers(tmp_path / "rc", primaries=3, replicas=0).start()
    try:
        slots, part, whole, retried, again = asyncio.run(_write_part_then_retry(servers.url))
    finally:
        servers.stop()
    assert len(set(slots.values())) > 1, "the queues should hash to different slots"
    first_slot = next(iter(slots.values()))  # the batch's first call: its first queue's slot
    written_first = [q for q, slot in slots.items() if slot == first_slot]
    assert part == {q: 2 if q in written_first else 0 for q in slots}, part  # that slot's share, both messages
    assert set(whole.values()) == {2}, whole
    # both messages new to the window; the deliveries missing, and only those, written
    assert retried == (2, 24 - 2 * len(written_first)), retried
    assert again == (0, 0), again


def _killed_slot(servers: RedisClusterServers, port: int) -> int:
    """A slot the primary on `port` serves now."""
    return next(s for s in range(0, 16384, 64) if servers.primary_of_slot(s) == port)


async def _publish_through_a_failover(servers: RedisClusterServers, c: LocalCluster, rng: random.Random,
                                      victim: int, kill_after_s: float, rate: float, n: int) -> dict:
    """Publish n messages steadily (each retried with its id until accepted), SIGKILL a primary
    after `kill_after_s`, then drain every queue: the oracle's figures."""
    with httpx.Client(base_url=c.url, timeout=30) as api:
        queues, subs = subscribe_random(api, rng, n_queues=40, n_subs=300)
        probed: tuple[str, dict] | None = None
        while probed is None:  # an empty queue on the node to be killed, for the probe below
            q, auth = new_queue(api)
            probed = (q, auth) if _port_of_key(servers, K.queue_stream(q)) == victim else None
    messages: dict = {}
    refused: list = []
    times: dict = {}
    slot = _killed_slot(servers, victim)
    killed: dict = {}

    async def kill() -> None:
        await asyncio.sleep(kill_after_s)
        killed["at"] = time.monotonic()
        servers.kill_node(victim)
        while True:  # until its replica serves its slots
            await asyncio.sleep(0.1)
            try:
                if await asyncio.to_thread(servers.primary_of_slot, slot) != victim:
                    killed["promoted"] = time.monotonic() - killed["at"]
                    break
            except RuntimeError:
                continue  # no running primary serves the slot yet
        # As a supervisor would: the killed node starts again and rejoins as the new primary's
        # replica. Until then the promoted primary has no replica, and with ?wait=1 every write
        # to its slots is refused (NotReplicated).
        await asyncio.to_thread(servers.restart_node, victim)
        killed["rejoined"] = time.monotonic() - killed["at"]

    # the rest of the API meanwhile: a queue made, a queue on the killed node polled and
    # long-polled (waiting when the node dies): each answers, and with 503 when it cannot.
    # It holds no subscription: nothing the probe reads is missing from the drain.
    on_victim, auth = probed
    answers: list[tuple[str, int]] = []
    publishing = asyncio.Event()

    async def probe(client: httpx.AsyncClient) -> None:
        async def long_polls() -> None:
            while not publishing.is_set():
                r = await client.get(f"/v1/queues/{on_victim}/messages", headers=auth, params={"max": 1, "wait": 2})
                answers.append(("long-poll", r.status_code))

        waiting = asyncio.create_task(long_polls())
        while not publishing.is_set():
            made = await client.post("/v1/queues")
            polled = await client.get(f"/v1/queues/{on_victim}/messages", headers=auth, params={"max": 1, "wait": 0})
            answers.extend([("create", made.status_code), ("poll", polled.status_code)])
            await asyncio.sleep(0.2)
        await waiting

    async with httpx.AsyncClient(base_url=c.url, timeout=30,
                                 limits=httpx.Limits(max_connections=64)) as client:
        killer = asyncio.create_task(kill())
        prober = asyncio.create_task(probe(client))
        # a failover on a loaded machine has kept a publish waiting 11 s: room to spare
        await publish_steadily(client, rng, "f", n, rate, messages, refused, times, give_up_s=30)
        publishing.set()
        await killer
        await prober
        got = await drain(client, queues)
    expected = oracle(c.space, subs, messages)
    seen: dict = {}
    for q, m in got:
        seen[(q, m["id"])] = seen.get((q, m["id"]), 0) + 1
    lost = set(expected) - set(seen)
    after_kill = [t for t, _ in refused if t >= killed["at"]]
    waits = sorted(done - sent for sent, done in times.values())
    return {
        "accepted": len(messages), "deliveries": len(expected),
        "lost_deliveries": len(lost), "lost_messages": len({mid for _, mid in lost}),
        "duplicates": sum(n - 1 for n in seen.values()), "unexpected": len(set(seen) - set(expected)),
        "refusals": len(refused), "promoted_s": round(killed.get("promoted", -1), 1),
        "rejoined_s": round(killed.get("rejoined", -1), 1),
        "refused_s": round(max(after_kill) - killed["at"], 1) if after_kill else 0.0,
        "refused_before_kill": len(refused) - len(after_kill),
        "publish_p50_ms": round(waits[len(waits) // 2] * 1000), "publish_max_s": round(waits[-1], 1),
        "publishes_over_1s": sum(1 for w in waits if w > 1.0),
        "slow_until_s": round(max((d for s, d in times.values() if d - s > 1.0), default=killed["at"])
                              - killed["at"], 1),
        "api_answers": {f"{what} {code}": sum(1 for a in answers if a == (what, code)) for what, code in set(answers)},
    }


@pytest.mark.parametrize("wait", [1, 0], ids=["wait1", "nowait"])
def test_a_primary_killed_under_steady_publishing(tmp_path, wait):
    """3 primaries with a replica each; 2 matchers; random subscriptions over 40 queues. A
    publisher sends ~40 messages/s with its own ids, retrying a refused publish (503) with the
    same id until it is accepted. A primary is SIGKILLed after 3 s; its replica is promoted
    after the node timeout (2 s) and a vote. Meanwhile writes to its slots fail: the matcher
    answers ABORTED, the dispatcher 503, the publisher retries. Then every queue is drained
    and compared with the brute-force oracle.

    With ?wait=1 a delivery write is acknowledged only once a replica has it, so nothing
    accepted is lost. Without it, a write acknowledged but not yet sent to the replica when
    the primary died is lost: counted and printed, not asserted (on loopback it is usually
    none). Either way no delivery comes twice: a retry after a partial write finds its marks."""
    servers = RedisClusterServers(tmp_path / "rc", primaries=3, replicas=1).start()
    c = None
    try:
        url = servers.url + ("?wait=1&wait_ms=1000" if wait else "")
        c = LocalCluster(matchers=2, http_port=0, data_dir=tmp_path / "bd", store=url, quiet=True,
                         restart=False).start()
        victim = servers.primaries()[0]
        with httpx.Client(base_url=c.url, timeout=30) as api:
            tailed = None  # a queue whose catalogue shard lives on the node to be killed
            while tailed is None:
                q, auth = new_queue(api)
                tailed = (q, auth) if _port_of_key(servers, K.catalog_log(K.shard_of(q))) == victim else None
        fig = asyncio.run(_publish_through_a_failover(servers, c, random.Random(16), victim, kill_after_s=3.0,
                                                      rate=40, n=400))
        print(f"\nprimary killed, wait={wait}: {fig}")
        assert fig["refused_before_kill"] == 0, fig
        assert fig["accepted"] == 400, fig
        assert fig["promoted_s"] > 0, f"the replica was never promoted: {fig}"
        assert fig["duplicates"] == 0 and fig["unexpected"] == 0, fig
        # the rest of the API: answered, with 503 (retry) while the store fails over, never 500
        assert {a.split()[1] for a in fig["api_answers"]} <= {"200", "201", "503"}, fig
        if wait:
            assert fig["lost_deliveries"] == 0, fig
        # The matchers' catalogue tails recovered: a subscription written to the store alone
        # (no call to the matchers), in a shard the promoted replica now serves, is matched.
        sub = build_subscription(new_id(), tailed[0], {}, c.space).to_json()
        asyncio.run(_add_to_store_only(url, sub))
        with httpx.Client(base_url=c.url, timeout=30) as api:
            deadline = time.monotonic() + 15
            for i in range(1000):  # a new id each time: an id once published is never delivered again
                assert api.post("/v1/messages", json={"attributes": ATTRS, "id": f"tailed-{i}"}).status_code == 202
                got = api.get(f"/v1/queues/{tailed[0]}/messages", params={"max": 10, "wait": 1},
                              headers=tailed[1]).json()["messages"]
                if got:
                    assert [m["id"] for m in got] == [f"tailed-{i}"]
                    break
                assert time.monotonic() < deadline, "the matchers never read the subscription from the catalogue"
    finally:
        if c is not None:
            c.stop()
            assert_no_children(c)
        servers.stop()


async def _add_to_store_only(url: str, sub: dict) -> None:
    store = Store(url)
    try:
        await store.add_subscription(sub)
    finally:
        await store.close()


def test_with_wait_1_every_batch_and_every_publish_is_written_whole_under_load(tmp_path):
    """?wait=1 changes what a write costs, not what is written (`bluedove bench store-wait`
    measures the cost, docs/store.md, "The cost of `wait=1`"). On 3 primaries with a replica
    each: delivery batches over every primary, written by Stores with and without WAIT taking
    turns, are all written whole; then a LocalCluster on the store with ?wait=1, under steady
    publishing and then publishers back to back, accepts every publish, and its matchers write
    exactly the deliveries the oracle names."""
    servers = RedisClusterServers(tmp_path / "rc", primaries=3, replicas=1).start()
    try:
        store = asyncio.run(store_cost(servers.url, rounds=5))
        assert store[0]["short_batches"] == store[1]["short_batches"] == 0, store
        c = LocalCluster(matchers=2, http_port=0, data_dir=tmp_path / "bd", store=servers.url + WAIT, quiet=True,
                         restart=False).start()
        try:
            with httpx.Client(base_url=c.url, timeout=30) as api:
                _, subs = subscribe_random(api, random.Random(16), n_queues=20, n_subs=200)
            written0 = written(c)
            points = np.random.default_rng(16).uniform(0, 1000, (2000, len(c.space.names)))
            figures, messages = asyncio.run(load(c, points, steady_rate=100, seconds=1.5, publishers=8))
            assert figures["errors"] == {} and len(messages) > 150, figures
            time.sleep(0.5)
            assert written(c) - written0 == len(oracle(c.space, subs, messages))
        finally:
            c.stop()
            assert_no_children(c)
    finally:
        servers.stop()
