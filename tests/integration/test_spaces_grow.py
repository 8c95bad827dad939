"""A hot named space gets more matchers from the autoscaler, alone, and gives them back once
idle: a cluster of 2 matchers
with spaces `orders` (laid out over both) and `fleet` (`matchers: 2`, a fixed size) scales out
to 3; the new matcher joins the default space only. While every space publishes, `orders` is
busier per owner than the (low, for the test) threshold over the window, so the autoscaler gives
it a third matcher (`space_scale_out`, its record's spans), and its coordinating owner joins m3
by a split of its busiest segment. Publishing stopped, it shrinks back to 2 (`space_scale_in`;
its coordinating owner merges an owner out). The default space's and fleet's tables do not move;
every message, before and after, reaches exactly the subscriptions of its space that match it."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

from bluedove.autoscaler.local import AutoscalerThread
from bluedove.autoscaler.policy import ScalingConfig
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import drain
from tests.integration.test_spaces_changes import FLEET_2, publish_steadily, until
from tests.integration.test_spaces_exact import ORDERS, delivered, expected, make_spaces, messages_of

pytestmark = pytest.mark.integration

# Any steady publishing is "hot" here; the cluster is held at 3 (no scale-out or in of its own).
HOT = ScalingConfig(min_matchers=3, max_matchers=3, window_s=3.0, out_busy=0.0001, target_busy=0.6,
                    out_cooldown_s=60.0, in_window_s=3.0, in_busy=0.5, in_cooldown_s=5.0)


def test_a_hot_space_is_given_a_matcher_alone_and_gives_it_back_once_idle(tmp_path):
    rng = random.Random(23)
    cluster = start_cluster(tmp_path, matchers=2)
    scaler = None
    try:
        queues, subs = make_spaces(cluster.url, rng, (ORDERS, FLEET_2), 3)
        messages, later = messages_of(rng, 250), messages_of(rng, 60)
        later = {space: {f"late-{mid}": a for mid, a in msgs.items()} for space, msgs in later.items()}
        url = cluster.store_url
        cluster.add_matcher()  # m3: the default space takes it; orders and fleet are at their sizes
        before = asyncio.run(until(url, lambda t: "m3" in t["default"].members, "m3 joined the default space"))
        assert set(before["orders"].members) == set(before["fleet"].members) == {"m1", "m2"}
        scaler = AutoscalerThread(cluster, HOT, interval_s=0.5).start()

        async def run() -> tuple[dict, dict, list, list]:
            refused: list = []
            async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
                pub = asyncio.create_task(publish_steadily(client, messages, 60, refused))
                grew = await until(url, lambda t: "m3" in t["orders"].members, "orders given m3", within_s=30)
                await pub
                got = await drain(client, queues)
                # idle now: back to the 2 it was made with, then published to again
                shrank = await until(url, lambda t: len(t["orders"].members) == 2, "orders back to 2", within_s=40)
                await publish_steadily(client, later, 60, refused)
                got += await drain(client, queues)
                events = (await client.get("/v1/cluster")).json()["autoscaler"]["events"]
            return grew, shrank, got, events

        grew, shrank, got, events = asyncio.run(run())
        for after in (grew, shrank):
            assert after["default"] == before["default"] and after["fleet"] == before["fleet"]
        assert len(grew["orders"].members) == 3
        resized = [(e["action"], e["space"], e["matchers"]) for e in events if e["action"].startswith("space_")]
        assert resized == [("space_scale_out", "orders", 3), ("space_scale_in", "orders", 2)], events
        assert [e["action"] for e in events if e.get("space") == "orders"][-4:] == [
            "space_scale_out", "split", "space_scale_in", "merge"], events
        assert not [e for e in events if e["action"] in ("scale_out", "scale_in")]
        assert delivered(got) == expected(subs, {s: {**messages[s], **later[s]} for s in messages})
    finally:
        if scaler is not None:
            scaler.stop()
        cluster.stop()
    assert_no_children(cluster)
