"""Dispatchers are gossip members (role "dispatcher", owning nothing): 3 matchers and 2
dispatchers as real processes, one matcher SIGKILLed.

Checked: the matchers' view and /v1/cluster list both dispatchers with their role; after the
takeover every dispatcher uses the takeover's epoch (as each registers it in the store), and
publishing through the shared port keeps working and delivering. No timing is asserted: the
spread bench (docs/benchmarks.md) measures how fast."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time

import grpc
import httpx
import pytest

from bluedove.store import Store
from bluedove.store.server import free_port
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import new_queue

pytestmark = pytest.mark.integration


def wait_for(what: str, check, limit_s: float = 30.0):
    """`check()` until it returns a true value; fails naming `what` after `limit_s`."""
    deadline = time.monotonic() + limit_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"not within {limit_s} s: {what} (last: {last!r})")


def matcher_roles(address: str) -> dict[str, tuple[str, str]]:
    """{member: (role, status)} as the matcher at `address` sees it through gossip."""
    with grpc.insecure_channel(address) as ch:
        reply = pb_grpc.MatcherStub(ch).GetTable(pb.TableRequest(), timeout=5)
    return {m.id: (m.role, m.status) for m in reply.members}


def store_state(url: str) -> tuple[list[dict], list[dict]]:
    async def read():
        store = Store(url)
        try:
            return await store.events(), await store.dispatchers()
        finally:
            await store.close()
    return asyncio.run(read())


def publish_and_receive(api: httpx.Client, queue: str, auth: dict, tag: str, n: int = 20) -> None:
    """n messages published (each 202) all reach the queue that subscribed to everything."""
    for i in range(n):
        r = api.post("/v1/messages", json={"attributes": {"x0": 10 * i, "x1": 1, "x2": 2, "x3": 3},
                                           "payload": {"tag": tag, "i": i}})
        assert r.status_code == 202, r.text
    got: set[int] = set()

    def received():
        r = api.get(f"/v1/queues/{queue}/messages", params={"max": 100}, headers=auth)
        assert r.status_code == 200, r.text
        msgs = r.json()["messages"]
        got.update(m["payload"]["i"] for m in msgs if m["payload"]["tag"] == tag)
        if msgs:
            api.post(f"/v1/queues/{queue}/ack", json={"receipts": [m["receipt"] for m in msgs]}, headers=auth)
        return got == set(range(n))
    wait_for(f"all {n} messages of {tag} delivered", received)


def test_dispatchers_gossip_learn_the_takeover_and_keep_publishing(tmp_path):
    cluster = start_cluster(tmp_path, matchers=3, dispatchers=2)
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            # Both dispatchers joined: /v1/cluster (whichever dispatcher answers) lists them
            # with their role, alive by gossip; members are the matchers, role "matcher".
            def both_listed():
                c = api.get("/v1/cluster").json()
                ds = {d["id"]: d for d in c["dispatchers"]}
                ok = set(ds) == {"d1", "d2"} and all(d["role"] == "dispatcher" and d["status"] == "alive"
                                                     and d["gossip_address"] for d in ds.values())
                return c if ok else None
            c = wait_for("both dispatchers in /v1/cluster with role dispatcher", both_listed)
            assert {m["id"]: m["role"] for m in c["members"]} == {"m1": "matcher", "m2": "matcher", "m3": "matcher"}

            # Every matcher sees both dispatchers as alive gossip members of role dispatcher.
            for m, address in cluster.table.members.items():
                wait_for(f"{m} sees d1 and d2", lambda a=address: all(
                    matcher_roles(a).get(d) == ("dispatcher", "alive") for d in ("d1", "d2")))

            queue, auth = new_queue(api)
            r = api.post("/v1/subscriptions", json={"queue": queue, "predicates": {}}, headers=auth)
            assert r.status_code == 201, r.text
            publish_and_receive(api, queue, auth, "before")

            os.kill(cluster.child("m3").pid, signal.SIGKILL)

            def takeover():
                events, _ = store_state(cluster.store_url)
                return next((e for e in events if e["action"] == "takeover"), None)
            event = wait_for("the takeover of m3", takeover)
            assert "m3 declared dead" in event["reason"], event
            epoch = int(re.search(r"epoch (\d+)", event["reason"]).group(1))
            assert epoch > cluster.table.epoch, event

            # Each dispatcher registers the epoch it uses: both reach the takeover's.
            def both_adopted():
                stored = store_state(cluster.store_url)[1]
                return len(stored) == 2 and all(d["epoch"] >= epoch for d in stored) and stored
            wait_for("every dispatcher using the takeover's table", both_adopted)

            publish_and_receive(api, queue, auth, "after")

            # The dead matcher is no dispatcher's business and vice versa: m3 is dead, d1 and d2 alive.
            def views_settled():
                view = matcher_roles(cluster.addresses["m1"])
                return view.get("m3") == ("matcher", "dead") and view.get("d1") == view.get("d2") == (
                    "dispatcher", "alive")
            wait_for("m1's view: m3 dead, both dispatchers alive", views_settled)
    finally:
        cluster.stop()
    assert_no_children(cluster)


@pytest.mark.parametrize("flags,named", [
    (["--advertise", "nohost"], "--advertise"),
    (["--join", "a:b"], "--join"),
    (["--gossip-port", "70000"], "--gossip-port"),
    (["--peers-dns", "svc:0"], "--peers-dns"),
])
def test_a_bad_gossip_flag_is_a_usage_error_naming_it(flags, named):
    """Exit 2 with the flag in the message, before anything starts (no store is reached)."""
    cmd = [sys.executable, "-m", "bluedove", "dispatcher", "--id", "d1", "--http-port", str(free_port()),
           "--store", "redis://127.0.0.1:1/0", *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert named in r.stderr, r.stderr
