"""Exact delivery on a real 4-matcher cluster, checked against the brute-force oracle.

Random subscriptions (wildcards, ranges past the space's edges, tiny ranges, some removed
again) and messages (many exactly on predicate bounds), published singly and in batches:
each (queue, message) pair the oracle names arrives once with its complete subscription
list, and nothing else arrives.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from tests.integration.cluster_checks import EXACT, random_workload
from tests.integration.helpers import compare, new_queue, oracle

pytestmark = pytest.mark.integration

N_QUEUES = 40


def test_random_workload_is_delivered_exactly(cluster, api):
    rng = random.Random(20261122)
    queues = dict(new_queue(api) for _ in range(N_QUEUES))
    subs, messages, got = asyncio.run(random_workload(cluster.url, queues, rng, filters=0.2))
    expected = oracle(cluster.space, subs, messages)
    assert len(expected) > 1000, "the workload should cause many deliveries"
    diff = compare(expected, got)
    assert diff == EXACT
    assert len(got) == len(expected)
