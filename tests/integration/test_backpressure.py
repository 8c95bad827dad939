"""Backpressure on a real cluster: publishers built on the SDK push far more than it can take
for ~20 s; the dispatcher and matchers refuse (503 + Retry-After) instead of buffering, their
memory plateaus, and every accepted message is delivered exactly (bluedove/lab/bench/backpressure.py)."""

from __future__ import annotations

import asyncio

import pytest

from bluedove.lab.bench.backpressure import overload
from tests.integration.conftest import assert_no_children, start_cluster

pytestmark = pytest.mark.integration

MB = 1 << 20


def test_overloaded_cluster_refuses_with_503_keeps_memory_flat_and_delivers_exactly(tmp_path):
    c = start_cluster(tmp_path, matchers=2, child_env={"BLUEDOVE_MAX_OUTSTANDING": "2000",
                                                       "BLUEDOVE_MAX_QUEUED": "1000"})
    try:
        pids = {ch.name: ch.pid for ch in c.children}
        r = asyncio.run(overload(c.url, pids, seconds=20.0))
    finally:
        c.stop()
    assert_no_children(c)
    print(r)
    # the publishers were refused, told when to retry, and offered far more than was taken
    assert r["answers_503"] > 0 and r["with_retry_after"] == r["answers_503"] and r["retry_after"] == [1.0]
    # pushed beyond capacity all along: refusals in every third of the run, not only at first
    assert all(n > 0 for n in r["answers_503_by_third"]), r
    assert r["offered"] > r["accepted"] > 0, r
    assert not r["other_errors"], r["other_errors"]
    # memory plateaus: the last third's peak within 25 % + 32 MB of the first third's
    for name, m in r["rss"].items():
        assert m["samples"] >= 30, (name, m)
        assert m["last_max"] <= m["first_max"] * 1.25 + 32 * MB, (name, m)
    # every accepted message exactly; a refused one in all its queues or none
    o = r["oracle"]
    assert (o["missing"], o["duplicates"], o["unexpected"], o["refused_but_partly_stored"]) == (0, 0, 0, 0), o
    assert o["deliveries"] > 0


def test_when_every_candidate_matcher_is_over_its_bound_a_publish_is_503_and_no_matcher_is_marked_down(tmp_path):
    from bluedove.client import Client
    from bluedove.client.errors import Unavailable

    # a bound of 0: every Forward is refused (RESOURCE_EXHAUSTED), as by matchers always full
    c = start_cluster(tmp_path, matchers=2, child_env={"BLUEDOVE_MAX_QUEUED": "0"})
    try:
        with Client(c.url, retries=0) as rest, Client(f"grpc://{c.grpc_address}", retries=0) as grpc_client:
            q = rest.create_queue()
            rest.subscribe(q, {"x0": [0, 1000]})
            body = {"x0": 5, "x1": 5, "x2": 5, "x3": 5}
            for client in (rest, grpc_client):
                with pytest.raises(Unavailable) as e:
                    client.publish(body, id="refused-1")
                assert "backpressure" in e.value.message
            assert e.value.retry_after_s is None  # gRPC carries no Retry-After
            r = rest.t.h.post("/v1/messages", json={"attributes": body})
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == "unavailable"
            # busy is not broken: both matchers are still alive in the dispatcher's view
            members = rest.t.h.get("/v1/cluster").json()["members"]
            assert sorted(m["status"] for m in members) == ["alive", "alive"]
            assert rest.poll(q, max=10) == []  # nothing was half delivered
            metrics = "\n".join(rest.t.h.get(u).text for u in [f"http://{c.host}:{p}/metrics"
                                                                 for p in c.metrics_ports.values()])
            refused = [line for line in metrics.splitlines()
                       if line.startswith("bluedove_matcher_forwards_refused_total")]
            assert sum(float(line.split()[-1]) for line in refused) >= 3
    finally:
        c.stop()
    assert_no_children(c)
