"""GET /v1/stats on a real cluster (redis-server, matcher and dispatcher processes): the per-second
series add up to what was sent, the density matches the subscriptions made, the queue depth
follows polls, a takeover is an event with its time; and /v1/cluster's CPU, RSS and congestion.
With `bluedove up --autoscale`, the autoscaler's series are there."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time

import httpx
import numpy as np
import pytest

from bluedove.core import timeseries as ts
from bluedove.core.space import default_space
from tests.integration.cluster_checks import publish_steadily, subscribe_random
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import oracle

pytestmark = pytest.mark.integration


def wait_stats(api: httpx.Client, since: float, cond, limit_s: float = 20.0) -> dict:
    """/v1/stats?since= until `cond` holds of it (AssertionError with the last one if it never does)."""
    deadline = time.monotonic() + limit_s
    while True:
        r = api.get("/v1/stats", params={"since": since})
        assert r.status_code == 200, r.text
        s = r.json()
        if cond(s) or time.monotonic() > deadline:
            assert cond(s), s
            return s
        time.sleep(0.5)


def total(values: list) -> float:
    return sum(v for v in values if v is not None)


def covering(subs: dict, name: str, lo: float, hi: float) -> list[int]:
    """The oracle of subscription density: per bin, subscriptions whose range on `name` holds
    the bin's centre (a dimension left out is the whole range; bounds clipped to it)."""
    out = []
    for c in ts.bin_centres(lo, hi):
        out.append(sum(1 for _, preds in subs.values()
                       if name not in preds or (preds[name][0] <= c < preds[name][1])))
    return out


def test_stats_add_up_to_what_was_sent_and_show_a_takeover(tmp_path):
    cluster = start_cluster(tmp_path, matchers=3)
    try:
        rng = random.Random(17)
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            queues, subs = subscribe_random(api, rng, 4, 60)
            start = time.time()
            messages: dict = {}
            refused: list = []

            async def publish() -> None:
                async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
                    await publish_steadily(client, rng, "s", 300, 60, messages, refused)

            asyncio.run(publish())
            sent = len(messages)
            deliveries = len(oracle(default_space(), subs, messages))
            # Every second after the last message settled: the sums are exactly what was sent
            # and stored (a missing or doubled flush, or a count in the wrong place, fails here).
            s = wait_stats(api, start - 1, lambda s: total(s["series"]["published"]) == sent
                           and total(s["series"]["delivered"]) == deliveries, limit_s=15)
            series = s["series"]
            n = len(series["t"])
            assert all(len(v) == n for v in series.values()), {k: len(v) for k, v in series.items()}
            assert series["t"] == list(range(series["t"][0], series["t"][0] + n))  # one entry per second
            assert series["t"][0] > start - 1 and series["t"][-1] <= s["now"] - 1
            busy = [i for i, p in enumerate(series["published"]) if p]
            assert len(busy) >= 4, series["published"]  # ~5 s at 60/s: spread over the seconds
            for i in busy:  # a second with messages has their latency
                assert 0 < series["latency_p50_s"][i] <= series["latency_p99_s"][i] < 30, series
            assert series["matchers_actual"][-1] == 3
            assert total(series["redelivered"]) == 0
            assert s["step_s"] == 1 and s["window_s"] == 3600

            # Density: subscriptions per bin centre are exactly the oracle's (each centre counted
            # by its one owner); recent messages are where they were published.
            for dim in default_space().dimensions:
                d = s["density"][dim.name]
                assert (d["lo"], d["hi"], d["bins"]) == (0, 1000, 64)
                assert d["subscriptions"] == covering(subs, dim.name, dim.min, dim.max), dim.name
                col = np.array([[p[default_space().index(dim.name)]] for p in messages.values()])
                hit = {j for j, c in enumerate(ts.bin_counts(col, np.array([0.0]), np.array([1000.0]))[0]) if c}
                assert {j for j, v in enumerate(d["messages"]) if v > 0} <= hit
                assert sum(d["messages"]) > 0

            # Queue depth: nothing polled yet, so every delivery is undelivered; then half of one
            # queue polled and not acked is unacked.
            wait_stats(api, time.time() - 3, lambda s: deliveries in s["series"]["undelivered"])
            q, headers = next(iter(queues.items()))
            got = api.get(f"/v1/queues/{q}/messages", params={"max": 1000, "wait": 0}, headers=headers).json()
            polled = len(got["messages"])
            assert polled > 0
            wait_stats(api, time.time() - 3, lambda s: polled in s["series"]["unacked"]
                       and deliveries - polled in s["series"]["undelivered"])

            # /v1/cluster: each matcher's CPU, RSS and congestion per dimension.
            for m in api.get("/v1/cluster").json()["members"]:
                assert 0 <= m["cpu"] < 2 and m["rss_bytes"] > 10_000_000, m
                for load in m["load"].values():
                    assert load["congestion"] is None or load["congestion"] == pytest.approx(
                        load["lambda"] / load["mu"], abs=2e-3), load

            # A takeover is an event with its time, after the kill.
            killed = time.time()
            os.kill(cluster.child("m2").pid, signal.SIGKILL)
            s = wait_stats(api, killed - 5, lambda s: any(e["action"] == "takeover" for e in s["events"]), limit_s=40)
            [event] = [e for e in s["events"] if e["action"] == "takeover"]
            assert killed < event["t"] < time.time() and "m2 declared dead" in event["reason"]
            assert event["matchers"] == 2
            wait_stats(api, time.time(), lambda s: s["series"]["matchers_actual"][-1:] == [2])

            # Bad `since`: 422 naming it.
            r = api.get("/v1/stats", params={"since": "yesterday"})
            assert r.status_code == 422 and r.json()["error"]["field"] == "since", r.text
    finally:
        cluster.stop()
    assert_no_children(cluster)


def test_up_autoscale_records_the_autoscalers_input_thresholds_and_target(tmp_path):
    """One matcher under a minimum of two: the autoscaler scales out (its target 2 in the
    series, an event with its time), the table then has 2 owners (matchers_actual)."""
    from tests.integration.test_autoscale import run_up, stop

    start = time.time()
    proc, port = run_up(tmp_path, "--matchers", "1", "--min-matchers", "2", "--max-matchers", "3")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as api:
            def scaled(s: dict) -> bool:
                series = s["series"]
                return 2 in series["matchers_desired"] and series["matchers_actual"][-1:] == [2] \
                    and any(v is not None for v in series["autoscaler_input"])

            s = wait_stats(api, start - 1, scaled, limit_s=60)
            series = s["series"]
            # The thresholds are the policy's defaults (bluedove/autoscaler/policy.py, ScalingConfig).
            assert {v for v in series["autoscaler_out"] if v is not None} == {0.8}
            assert {v for v in series["autoscaler_in"] if v is not None} == {0.25}
            assert all(v >= 0 for v in series["autoscaler_input"] if v is not None)
            [out] = [e for e in s["events"] if e["action"] == "scale_out"]
            assert start < out["t"] < s["now"] and out["matchers"] == 2 and "below the minimum 2" in out["reason"]
            assert [e["t"] for e in s["events"]] == sorted(e["t"] for e in s["events"])  # oldest first
    finally:
        stop(proc)


POINT = {"x0": 1, "x1": 1, "x2": 1, "x3": 1}


def test_stored_to_answered_is_each_answers_oldest_new_delivery_in_the_queue(tmp_path):
    """A subscriber parked on a long poll hears of each message within a fraction of a second
    (`answered_*` small); a message left 2.5 s in a queue nobody polled is answered 2.5 s after it
    was stored (its second holds that one answer). A poll that hands nothing out adds nothing."""
    cluster = start_cluster(tmp_path, matchers=1)
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            q = api.post("/v1/queues").json()
            auth = {"Authorization": f"Bearer {q['token']}"}
            assert api.post("/v1/subscriptions", json={"queue": q["queue"], "predicates": {}},
                            headers=auth).status_code == 201
            start = time.time()
            got: list[str] = []

            def poll(wait: float) -> None:
                r = api.get(f"/v1/queues/{q['queue']}/messages", params={"max": 10, "wait": wait}, headers=auth)
                msgs = r.json()["messages"]
                got.extend(m["id"] for m in msgs)
                if msgs:
                    api.post(f"/v1/queues/{q['queue']}/ack", json={"receipts": [m["receipt"] for m in msgs]},
                             headers=auth)

            async def parked() -> None:  # a long poll open before each publish
                async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
                    for i in range(10):
                        waiting = asyncio.create_task(asyncio.to_thread(poll, 5))
                        await asyncio.sleep(0.2)
                        r = await client.post("/v1/messages", json={"id": f"p{i}", "attributes": POINT})
                        assert r.status_code == 202, r.text
                        await waiting

            asyncio.run(parked())
            assert got == [f"p{i}" for i in range(10)]
            s = wait_stats(api, start - 1, lambda s: any(v is not None for v in s["series"]["answered_p99_s"]))
            assert max(v for v in s["series"]["answered_p99_s"] if v is not None) < 0.5, s["series"]
            left = time.time()
            assert api.post("/v1/messages", json={"id": "late", "attributes": POINT}).status_code == 202
            time.sleep(2.5)
            poll(0)
            poll(0)  # nothing more: no answer counted
            assert got[-1] == "late"
            s = wait_stats(api, left, lambda s: any(v is not None for v in s["series"]["answered_p50_s"]))
            [late] = [v for v in s["series"]["answered_p50_s"] if v is not None]
            assert 2.0 < late <= 3.0, s["series"]  # its bucket, (2 s, 3 s]
    finally:
        cluster.stop()
    assert_no_children(cluster)
