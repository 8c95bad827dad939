"""Replay of a space's log to a new subscription (docs/api.md, "Replay"), through real processes.

With a publisher running throughout, subscriptions made with `replay_from` = a time T in the
past receive every message published at or after T that they match, exactly once across the
replay and live deliveries (the seam: messages matched live while the replay was starting are
not replayed again), each replayed one marked `"replayed": true` with its original id and
`published_at`; nothing published before T. A plain subscription sharing their queues gets
exactly its own matches throughout. The replay's state shows in `GET /v1/subscriptions/{id}`.
A dispatcher working on a replay and a matcher, both SIGKILLed mid-replay, lose nothing: the
other dispatcher takes the replay over from its recorded position once the lease runs out, and
the seam still holds. The SDK replays over REST and gRPC alike (`subscribe(replay_from=…)`,
`Delivery.replayed`, `Subscription.replay`). Deleting a subscription stops its replay. Bad
`replay_from` values, and replay in a space without a log, are 422s naming the field that
create nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from bluedove.client import Client
from bluedove.core.spaces import parse_space_spec
from bluedove.store import keys as K
from bluedove.store.client import sync_client
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import drain, new_queue, oracle

pytestmark = pytest.mark.integration

ORDERS = {"name": "orders", "retention_s": 3600,
          "attributes": [{"name": "status", "type": "string"}, {"name": "total", "min": 0, "max": 1000},
                         {"name": "coupon", "type": "string", "optional": True}],
          "partition": ["status", "total"]}
STATUSES = ["new", "paid", "sent", "back", "paid-late"]


def order(rng: random.Random) -> dict:
    attrs = {"status": rng.choice(STATUSES), "total": round(rng.uniform(0, 1000), 3)}
    if rng.random() < 0.3:
        attrs["coupon"] = rng.choice(["A1", "B2", "XMAS"])
    return attrs


FILTERS = [{"status": "paid"}, {"total": {"gte": 100, "lt": 400}}, {"status": {"prefix": "paid"}},
           {"any_of": [{"coupon": {"exists": True}}, {"status": "back"}]}, {}]


def _until(done: Callable[[], bool], timeout: float = 120.0) -> None:
    """Wait until `done()` (it is checked every 50 ms); the test's own asserts say what was missing."""
    end = time.monotonic() + timeout
    while not done() and time.monotonic() < end:
        time.sleep(0.05)


class Publisher(threading.Thread):
    """Publishes batches of 20 orders until stopped, 10 ms apart; `cut()` returns a time T
    between two batches (everything before was answered before it, everything after is sent
    after it)."""

    def __init__(self, url: str, rng: random.Random, base: str = "/v1/spaces/orders") -> None:
        super().__init__(daemon=True)
        self.url, self.rng, self.base = url, rng, base
        self.sent: dict[str, dict] = {}
        self.before: set[str] = set()  # ids published before the cut
        self.stop = threading.Event()
        self._cut = threading.Event()
        self._cut_at: list[int] = []
        self.errors: list[str] = []

    def cut(self) -> int:
        self._cut.set()
        while not self._cut_at:
            time.sleep(0.01)
        return self._cut_at[0]

    def run(self) -> None:
        n = 0
        with httpx.Client(base_url=self.url, timeout=30) as api:
            while not self.stop.is_set():
                if self._cut.is_set() and not self._cut_at:
                    self.before = set(self.sent)
                    time.sleep(0.005)
                    self._cut_at.append(int(time.time() * 1000))
                    time.sleep(0.005)
                items = [{"id": f"o{n + i}", "attributes": order(self.rng)} for i in range(20)]
                n += 20
                self._send(api, items)
                time.sleep(0.01)

    def _send(self, api: httpx.Client, items: list[dict]) -> None:
        """Until answered 202: a retry (the same ids) after a dropped connection or a 503 delivers
        nothing twice."""
        for _ in range(100):
            try:
                r = api.post(f"{self.base}/messages:batch", json={"messages": items})
            except httpx.TransportError:
                time.sleep(0.1)
                continue
            if r.status_code == 202:
                self.sent.update((m["id"], m["attributes"]) for m in items)
                return
            if r.status_code != 503:
                self.errors.append(r.text)
                return
            time.sleep(0.1)
        self.errors.append(f"never accepted: {items[0]['id']}")


def _subscribe(api: httpx.Client, queues: dict, replay_from: int,
               base: str = "/v1/spaces/orders") -> dict[str, tuple[str, dict]]:
    """A replaying subscription of every filter, spread over the queues."""
    subs = {}
    for i, preds in enumerate(FILTERS):
        q = list(queues)[i % len(queues)]
        r = api.post(f"{base}/subscriptions", json={"queue": q, "predicates": preds, "replay_from": replay_from},
                     headers=queues[q])
        assert r.status_code == 201, r.text
        assert r.json()["replay"]["from"].endswith("Z")
        subs[r.json()["id"]] = (q, preds)
    return subs


def _wait_done(api: httpx.Client, queues: dict, subs: dict, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    for sid, (q, _) in subs.items():
        while True:
            shown = api.get(f"/v1/subscriptions/{sid}", headers=queues[q]).json()
            if shown["replay"]["done"]:
                break
            assert time.monotonic() < deadline, shown
            time.sleep(0.2)


def _per_subscription(got: list[tuple[str, dict]]) -> Counter:
    """(subscription, message id) -> how many deliveries named it."""
    return Counter((s, m["id"]) for _, m in got for s in m["subscriptions"])


@pytest.mark.parametrize("name", ["orders", "default"])
def test_replay_from_the_past_with_a_publisher_throughout_is_exact(tmp_path, name):
    """In a named space made with `retention_s`, and in the cluster's own space, whose space
    file (`bluedove up --space`) declares the log."""
    rng = random.Random(31)
    space = parse_space_spec(ORDERS).space
    base = "/v1" if name == "default" else f"/v1/spaces/{name}"
    space_file = tmp_path / "space.yaml"
    space_file.write_text(json.dumps({k: v for k, v in ORDERS.items() if k != "name"}))
    cluster = start_cluster(tmp_path, matchers=3, space_file=str(space_file) if name == "default" else None)
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            if name == "orders":
                assert api.post("/v1/spaces", json=ORDERS).status_code == 201
            assert api.get(f"/v1/spaces/{name}").json()["retention_s"] == 3600
            queues = dict(new_queue(api) for _ in range(3))
            plain = {}
            for q in queues:  # a plain subscription in each queue, there before anything is published
                r = api.post(f"{base}/subscriptions", json={"queue": q, "predicates": {"status": "new"}},
                             headers=queues[q])
                plain[r.json()["id"]] = (q, {"status": "new"})
            pub = Publisher(cluster.url, rng, base)
            pub.start()
            # counts, not seconds: a slow machine publishes fewer a second
            _until(lambda: len(pub.sent) > 520 or bool(pub.errors))
            cut = pub.cut()
            time.sleep(2.0)
            subs = _subscribe(api, queues, cut, base)
            _until(lambda: len(pub.sent) - len(pub.before) > 1020 or bool(pub.errors))
            pub.stop.set()
            pub.join()
            assert not pub.errors, pub.errors[:3]
            _wait_done(api, queues, subs)
            got = asyncio.run(_drain(cluster.url, queues))
            sid, (q, _) = next(iter(subs.items()))
            shown = api.get(f"/v1/subscriptions/{sid}", headers=queues[q]).json()
            assert shown.get("space", "default") == name and shown["replay"]["position"] >= shown["replay"]["from"]
            assert api.get(f"/v1/spaces/{name}").json()["log_chunks"] > 0
            log = api.get("/v1/cluster", params={"space": name}).json()["log"]  # the dashboard's summary
            assert log["chunks"] > 0 and log["replays"] == 0
        after = {m: a for m, a in pub.sent.items() if m not in pub.before}
        assert len(pub.before) > 500 and len(after) > 1000
        want = Counter()
        for (q, mid), ids in oracle(space, subs, after).items():
            want.update((s, mid) for s in ids)
        for (q, mid), ids in oracle(space, plain, pub.sent).items():
            want.update((s, mid) for s in ids)
        have = _per_subscription(got)
        assert {k for k, n in have.items() if n > 1} == set(), "delivered twice"
        assert set(have) - set(want) == set(), "delivered but not matching (or published before the cut)"
        assert set(want) - set(have) == set(), "missing"
        replayed = [m for _, m in got if m.get("replayed")]
        assert replayed and all(m["id"] in pub.before or m["id"] in after for m in replayed)
        assert all(set(m["subscriptions"]) <= set(subs) and len(m["subscriptions"]) == 1 for m in replayed)
        assert all(m["attributes"] == pub.sent[m["id"]] or m["attributes"] == _as_given(pub.sent[m["id"]])
                   for m in replayed[:50])
    finally:
        cluster.stop()
        assert_no_children(cluster)


def _expected(space, subs: dict, messages: dict) -> Counter:
    want: Counter = Counter()
    for (_, mid), ids in oracle(space, subs, messages).items():
        want.update((s, mid) for s in ids)
    return want


def test_a_replay_survives_its_dispatcher_and_a_matcher_killed_mid_way(tmp_path):
    rng = random.Random(47)
    space = parse_space_spec(ORDERS).space
    env = {"BLUEDOVE_REPLAY_RATE": "2000", "BLUEDOVE_REPLAY_LEASE_S": "2"}  # a replay of ~10 s
    cluster = start_cluster(tmp_path, matchers=3, dispatchers=2, child_env=env)
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            assert api.post("/v1/spaces", json=ORDERS).status_code == 201
            queues = dict(new_queue(api) for _ in range(2))
            start = int(time.time() * 1000) - 1
            history = {}
            for b in range(20):  # the log before the subscription: 20,000 messages
                items = [{"id": f"h{b}-{i}", "attributes": order(rng)} for i in range(1000)]
                assert api.post("/v1/spaces/orders/messages:batch", json={"messages": items}).status_code == 202
                history.update((m["id"], m["attributes"]) for m in items)
            pub = Publisher(cluster.url, rng)
            pub.start()
            subs = _subscribe(api, queues, start)
            sid, (q, _) = next(iter(subs.items()))
            time.sleep(2.0)
            state = api.get(f"/v1/subscriptions/{sid}", headers=queues[q]).json()["replay"]
            assert not state["done"], state  # still under way
            owner = _lease_pid(cluster, sid)
            os.kill(owner, signal.SIGKILL)
            os.kill(cluster.child("m2").pid, signal.SIGKILL)
            time.sleep(3.0)
            pub.stop.set()
            pub.join()
            assert not pub.errors, pub.errors[:3]
            _wait_done(api, queues, subs, timeout_s=120)
            got = asyncio.run(_drain(cluster.url, queues))
        have = _per_subscription(got)
        want = _expected(space, subs, {**history, **pub.sent})
        assert {k for k, n in have.items() if n > 1} == set(), "delivered twice"
        assert set(have) - set(want) == set(), "delivered but not matching"
        assert set(want) - set(have) == set(), "missing"
    finally:
        cluster.stop()
        assert_no_children(cluster)


def _lease_pid(cluster, sub_id: str) -> int:
    """The pid of the dispatcher holding a replay's lease (its owner is host:pid:nonce)."""
    r = sync_client(cluster.store_url)
    try:
        owner = r.hget(K.space_replay("orders", sub_id), "lease")
    finally:
        r.close()
    assert owner, "no worker holds the replay"
    pid = int(owner.split(":")[1])
    assert pid in cluster.pids().values(), (pid, cluster.pids())
    return pid


def _as_given(attrs: dict) -> dict:
    return {k: float(v) if k == "total" else v for k, v in attrs.items()}


async def _drain(url: str, queues: dict) -> list[tuple[str, dict]]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return await drain(client, queues)


def test_bad_replay_requests_are_422s_naming_the_field_and_create_nothing(tmp_path):
    cluster = start_cluster(tmp_path, matchers=1)
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            assert api.post("/v1/spaces", json=ORDERS).status_code == 201
            nolog = {**ORDERS, "name": "nolog", "retention_s": 0}
            assert api.post("/v1/spaces", json=nolog).status_code == 201
            q, auth = new_queue(api)
            now = int(time.time() * 1000)
            cases = [("orders", "yesterday"), ("orders", now + 60_000), ("orders", "2026-11-27"), ("orders", 1.5),
                     ("orders", None), ("orders", True), ("nolog", now - 1000), ("default", now - 1000)]
            for space, value in cases:
                base = "/v1" if space == "default" else f"/v1/spaces/{space}"
                r = api.post(f"{base}/subscriptions", json={"queue": q, "predicates": {}, "replay_from": value},
                             headers=auth)
                assert r.status_code == 422, (space, value, r.text)
                assert r.json()["error"]["field"] == "replay_from", r.text
            for space in ("orders", "nolog"):
                assert api.get(f"/v1/spaces/{space}").json().get("subscriptions", 0) == 0
            ok = api.post("/v1/spaces/orders/subscriptions", json={"queue": q, "predicates": {},
                                                                    "replay_from": "1999-01-01T00:00:00Z"},
                          headers=auth)
            assert ok.status_code == 201, ok.text  # older than the log: its start is the effective one
            assert ok.json()["replay"]["from"] >= time.strftime("%Y-", time.gmtime())
    finally:
        cluster.stop()
        assert_no_children(cluster)


def test_the_sdk_replays_over_rest_and_grpc(tmp_path):
    cluster = start_cluster(tmp_path, matchers=2)
    try:
        with Client(cluster.url) as admin:
            admin.create_space(ORDERS)
            since = datetime.now(timezone.utc) - timedelta(seconds=1)
            ids = admin.in_space("orders").publish_many(
                [{"id": f"s{i}", "attributes": {"status": "paid", "total": i}} for i in range(30)])
        for url in (cluster.url, cluster.grpc_url):
            with Client(url) as c:
                sub = c.in_space("orders").subscribe(total=(10, 20), replay_from=since)
                assert sub.replay is not None and sub.replay["from"].endswith("Z")
                got = []
                deadline = time.monotonic() + 30
                while len(got) < 10 and time.monotonic() < deadline:
                    batch = c.poll(sub.queue, max=100, wait=1)
                    got += batch
                    c.ack(sub.queue, batch)
                assert sorted(d.id for d in got) == sorted(ids[10:20]), url
                assert all(d.replayed and d.subscriptions == [sub.id] and d.space == "orders" for d in got)
                shown = c.get_subscription(sub.id, sub.queue)
                assert shown.replay is not None and shown.replay["delivered"] == 10 and shown.replay["done"], url
        out = subprocess.run([sys.executable, "-m", "bluedove", "subscribe", "--url", cluster.url, "--space-name",
                              "orders", "--where", "status=paid", "--replay-from", "1h"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["replay"]["from"].endswith("Z")
    finally:
        cluster.stop()
        assert_no_children(cluster)


def test_a_replay_into_a_queue_at_its_cap_waits_for_the_consumer_and_drops_nothing(tmp_path):
    """600 logged matches into a queue capped at 100: the replay stops at the cap and goes on as
    the consumer acks; every message arrives once and the queue drops none."""
    cluster = start_cluster(tmp_path, matchers=2)
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            assert api.post("/v1/spaces", json=ORDERS).status_code == 201
            start = int(time.time() * 1000) - 1
            ids = [f"c{i}" for i in range(600)]
            for b in range(0, 600, 100):
                items = [{"id": m, "attributes": {"status": "paid", "total": 1}} for m in ids[b:b + 100]]
                assert api.post("/v1/spaces/orders/messages:batch", json={"messages": items}).status_code == 202
            r = api.post("/v1/queues", json={"max_undelivered": 100})
            q, auth = r.json()["queue"], {"Authorization": f"Bearer {r.json()['token']}"}
            sub = api.post("/v1/spaces/orders/subscriptions", json={"queue": q, "predicates": {"status": "paid"},
                                                                      "replay_from": start}, headers=auth).json()
            time.sleep(2.0)  # the replay fills the queue and waits
            assert api.get(f"/v1/queues/{q}", headers=auth).json()["depth"] == 100
            assert not api.get(f"/v1/subscriptions/{sub['id']}", headers=auth).json()["replay"]["done"]
            got: list[str] = []
            deadline = time.monotonic() + 60
            while len(got) < 600 and time.monotonic() < deadline:
                batch = api.get(f"/v1/queues/{q}/messages", params={"max": 50, "wait": 1}, headers=auth).json()
                got += [m["id"] for m in batch["messages"]]
                if batch["messages"]:
                    api.post(f"/v1/queues/{q}/ack", json={"receipts": [m["receipt"] for m in batch["messages"]]},
                             headers=auth)
            assert sorted(got) == sorted(ids) and len(got) == 600, (len(got), len(set(got)))
            shown = api.get(f"/v1/queues/{q}", headers=auth).json()
            assert shown["dropped"] == 0 and shown["depth"] == 0
            replay = api.get(f"/v1/subscriptions/{sub['id']}", headers=auth).json()["replay"]
            assert replay["done"] and replay["delivered"] == 600
    finally:
        cluster.stop()
        assert_no_children(cluster)


def test_deleting_a_subscription_stops_its_replay(tmp_path):
    env = {"BLUEDOVE_REPLAY_RATE": "2000"}  # a replay of ~10 s
    cluster = start_cluster(tmp_path, matchers=2, child_env=env)
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            assert api.post("/v1/spaces", json=ORDERS).status_code == 201
            start = int(time.time() * 1000) - 1
            rng = random.Random(3)
            for b in range(20):
                items = [{"id": f"h{b}-{i}", "attributes": order(rng)} for i in range(1000)]
                assert api.post("/v1/spaces/orders/messages:batch", json={"messages": items}).status_code == 202
            q, auth = new_queue(api)
            r = api.post("/v1/spaces/orders/subscriptions", json={"queue": q, "predicates": {}, "replay_from": start},
                         headers=auth)
            sid = r.json()["id"]
            time.sleep(1.5)
            assert not api.get(f"/v1/subscriptions/{sid}", headers=auth).json()["replay"]["done"]
            assert api.delete(f"/v1/subscriptions/{sid}", headers=auth).status_code == 204
            r = sync_client(cluster.store_url)
            try:
                deadline = time.monotonic() + 30
                while r.exists(K.space_replay("orders", sid)) and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert not r.exists(K.space_replay("orders", sid)) and not r.smembers(K.space_replays("orders"))
                depth = r.xlen(K.queue_stream(q))
                time.sleep(2.0)
                assert r.xlen(K.queue_stream(q)) == depth < 20_000  # nothing more replayed into the queue
            finally:
                r.close()
    finally:
        cluster.stop()
        assert_no_children(cluster)
