"""The baselines of the paper's §IV-B on real processes: exact delivery under `p2p` and
`full-replication`, checked against the brute-force oracle, with the mode visibly in force
(what each matcher stores), and full replication failing over when a matcher dies."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

from tests.integration.cluster_checks import EXACT, publish_points, random_point, random_workload
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import compare, drain, new_queue, oracle

pytestmark = pytest.mark.integration

N_QUEUES = 20
N_SUBS = 800
N_MESSAGES = 800


def _per_dimension(cluster) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Each matcher's subscriptions and messages matched, per dimension's set."""
    subs, matched = {}, {}
    for m in cluster.cluster_state()["members"]:
        subs[m["id"]] = [m["subscriptions"].get(d, 0) for d in cluster.space.names]
        matched[m["id"]] = [m["load"].get(d, {}).get("matched", 0) for d in cluster.space.names]
    return subs, matched


@pytest.mark.parametrize("mode", ["p2p", "full-replication"])
def test_random_workload_is_delivered_exactly_under_a_baseline(tmp_path, mode):
    c = start_cluster(tmp_path, matchers=3, partition=mode)
    try:
        assert c.cluster_state()["partition"] == mode
        rng = random.Random({"p2p": 1, "full-replication": 2}[mode])
        with httpx.Client(base_url=c.url, timeout=30) as api:
            queues = dict(new_queue(api) for _ in range(N_QUEUES))
        subs, messages, got = asyncio.run(random_workload(c.url, queues, rng, N_SUBS, N_MESSAGES))
        expected = oracle(c.space, subs, messages)
        assert len(expected) > 300, "the workload should cause many deliveries"
        assert compare(expected, got) == EXACT
        assert len(got) == len(expected)

        asyncio.run(asyncio.sleep(1.5))  # one load report more
        counts, matched = _per_dimension(c)
        # Only the dimension-0 sets are used: to store and to match (dispatchers route along x0).
        assert all(row[1:] == [0, 0, 0] for row in counts.values()), counts
        assert all(row[1:] == [0, 0, 0] for row in matched.values()), matched
        assert sum(row[0] for row in matched.values()) >= N_MESSAGES, matched
        if mode == "full-replication":
            assert all(row[0] == len(subs) for row in counts.values()), counts
        else:
            assert len(subs) <= sum(row[0] for row in counts.values()) < 3 * len(subs), counts

        if mode == "full-replication":
            # Any matcher can take any message: with one killed, the next candidate takes its share.
            c.child("m2").proc.kill()
            c.child("m2").proc.wait()
            points = [random_point(rng, []) for _ in range(300)]

            async def again():
                async with httpx.AsyncClient(base_url=c.url, timeout=60) as client:
                    msgs = await publish_points(client, asyncio.Semaphore(16), points)
                    return msgs, await drain(client, queues)

            messages, got = asyncio.run(again())
            expected = oracle(c.space, subs, messages)
            assert compare(expected, got) == EXACT
    finally:
        c.stop()
    assert_no_children(c)
