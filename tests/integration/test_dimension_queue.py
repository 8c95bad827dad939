"""matcher/queues.py against a real redis-server: batches are matched while earlier ones are
being stored, at most `store_inflight` store calls at a time, each delivery written once, and a
failed store call fails exactly the requests of its batch."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from bluedove.store.store import Store
from matcher.index import SubscriptionSet
from matcher.queues import DimensionQueue
from matcher.stats import WindowStats

pytestmark = pytest.mark.integration


class GatedStore(Store):
    """A Store whose deliver calls wait for `gate` and are counted while under way."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.gate = asyncio.Event()
        self.gate.set()
        self.running = 0
        self.most = 0
        self.calls = 0
        self.fail_next = False

    async def deliver(self, messages, deliveries):
        self.calls += 1
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.gate.wait()
            if self.fail_next:
                self.fail_next = False
                raise ConnectionError("store down")
            return await super().deliver(messages, deliveries)
        finally:
            self.running -= 1


@pytest.fixture
async def setup(redis_clean_url):
    """(store, queue worker of dimension 0 with batches of at most 4, [(queue id, token)])."""
    store = GatedStore(redis_clean_url)
    queues = await store.create_queues(3)
    subs = SubscriptionSet(2)
    # queue i subscribes to x0 in [100 i, 100 i + 100)
    subs.add_many([f"s{i}" for i in range(3)], [q for q, _ in queues],
                  np.array([[100.0 * i, 0.0] for i in range(3)]), np.array([[100.0 * i + 100, 1000.0] for i in range(3)]))
    executor = ThreadPoolExecutor(1)
    dq = DimensionQueue(0, lambda: subs, store, executor, WindowStats(), batch_max=4, store_inflight=2)
    dq.start()
    yield store, dq, queues
    await dq.stop()
    executor.shutdown()
    await store.close()


def request(n: int, start: int, x0: float) -> tuple[list[str], list[bytes], np.ndarray]:
    ids = [f"m{start + i}" for i in range(n)]
    return ids, [json.dumps({"id": i}).encode() for i in ids], np.array([[x0, 5.0]] * n)


async def test_every_request_is_answered_and_every_delivery_written_once(setup):
    store, dq, queues = setup
    reqs = [request(3, 10 * j, 100.0 * (j % 3) + 1) for j in range(20)]
    results = await asyncio.gather(*(dq.submit(*r) for r in reqs))
    assert all(res.matched == 3 for res in results)
    assert len(dq) == 0
    got = {q: await store.poll(q, 1000, 0) for q, _ in queues}
    ids = sorted(m["id"] for msgs in got.values() for m in msgs)
    assert ids == sorted(i for r in reqs for i in r[0])  # each message once, into its one queue
    for j, (q, _) in enumerate(queues):
        assert all(int(m["id"][1:]) // 10 % 3 == j for m in got[q])
    # The same messages again (a dispatcher's retry): nothing new is written.
    again = await asyncio.gather(*(dq.submit(*r) for r in reqs[:5]))
    assert all(res.fresh == 0 for res in again)
    assert sum([await store.queue_depth(q) for q, _ in queues]) == 60


async def test_matching_goes_on_while_at_most_two_batches_are_being_stored(setup):
    store, dq, _ = setup
    store.gate.clear()
    tasks = [asyncio.create_task(dq.submit(*request(4, 10 * j, 1.0))) for j in range(6)]
    for _ in range(100):
        await asyncio.sleep(0.01)
        if store.running == 2:
            break
    await asyncio.sleep(0.1)
    assert store.running == 2 and store.calls == 2  # the third batch waits for a free slot
    assert not any(t.done() for t in tasks)
    store.gate.set()
    await asyncio.gather(*tasks)
    assert store.most == 2 and len(dq) == 0


async def test_a_failed_store_call_fails_only_its_batch(setup):
    store, dq, queues = setup
    store.fail_next = True
    first = await asyncio.gather(dq.submit(*request(4, 0, 1.0)), return_exceptions=True)
    assert isinstance(first[0], ConnectionError)
    assert len(dq) == 0
    ok = await dq.submit(*request(4, 100, 1.0))
    assert ok.delivered == 4 and ok.fresh == 4
    # The failed batch wrote nothing (not even dedup marks): sent again, it is delivered.
    retry = await dq.submit(*request(4, 0, 1.0))
    assert retry.fresh == 4
    assert await store.queue_depth(queues[0][0]) == 8
