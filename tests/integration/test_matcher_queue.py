"""bluedove/matcher/queues.py against a real redis-server: batches are matched while earlier ones are
being stored, at most `store_inflight` store calls at a time, each delivery written once, a
failed store call fails exactly the requests of its batch, and a request's parts are matched
each against its own dimension's set and stored together, with λ, μ and q kept per dimension
(and the service rate: the process's CPU over the whole path)."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest

from bluedove.core.wire import Part, encode_part
from bluedove.matcher.index import SubscriptionSet
from bluedove.matcher.index_thread import IndexThread
from bluedove.matcher.load import WindowStats
from bluedove.matcher.queues import INLINE_MOST, MatcherQueue
from bluedove.store import keys as K
from bluedove.store.store import Store

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

    async def deliver(self, messages, deliveries, marks=None, seam=(), log=None):
        self.calls += 1
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.gate.wait()
            if self.fail_next:
                self.fail_next = False
                raise ConnectionError("store down")
            return await super().deliver(messages, deliveries, marks, seam, log)
        finally:
            self.running -= 1


@pytest.fixture
async def setup(redis_clean_url):
    """(store, queue worker with batches of at most 4, [(queue id, token)]). Dimension 0's set:
    queue i subscribes to x0 in [100 i, 100 i + 100); dimension 1's: queue i to x1 in the same."""
    store = GatedStore(redis_clean_url)
    queues = await store.create_queues(3)
    subs = SubscriptionSet(2)
    # queue i subscribes to x0 in [100 i, 100 i + 100)
    subs.add_many([f"s{i}" for i in range(3)], [q for q, _ in queues],
                  np.array([[100.0 * i, 0.0] for i in range(3)]),
                  np.array([[100.0 * i + 100, 1000.0] for i in range(3)]))
    by_x1 = SubscriptionSet(2)
    by_x1.add_many([f"t{i}" for i in range(3)], [q for q, _ in queues],
                   np.array([[0.0, 100.0 * i] for i in range(3)]),
                   np.array([[1000.0, 100.0 * i + 100] for i in range(3)]))
    sets = [subs, by_x1]
    index = IndexThread()
    dq = MatcherQueue(2, lambda d: sets[d], store, index, [WindowStats(), WindowStats()], batch_max=4,
                      store_inflight=2)
    dq.start()
    yield store, dq, queues
    await dq.stop()
    index.shutdown()
    await store.close()


def request(n: int, start: int, x0: float, dim: int = 0, x1: float = 5.0, client: bool = True) -> list[Part]:
    """One part of n messages m<start>..., as the matcher reads a dispatcher's packed part;
    `client`: the publisher chose the ids."""
    ids = [f"m{start + i}".encode() for i in range(n)]
    wire = encode_part(dim, np.array([[x0, x1]] * n), ids, [json.dumps({"id": i.decode()}).encode() for i in ids],
                       np.full(n, client))
    return [Part.from_packed(wire, 2)]


async def test_every_request_is_answered_and_every_delivery_written_once(setup):
    store, dq, queues = setup
    reqs = [request(3, 10 * j, 100.0 * (j % 3) + 1) for j in range(20)]
    results = await asyncio.gather(*(dq.submit(r) for r in reqs))
    assert all(res.matched == 3 for res in results)
    assert len(dq) == 0
    got = {q: await store.poll(q, 1000, 0) for q, _ in queues}
    ids = sorted(m["id"] for msgs in got.values() for m in msgs)
    assert ids == sorted(r[0].id(k) for r in reqs for k in range(r[0].n))  # each message once, into its one queue
    for j, (q, _) in enumerate(queues):
        assert all(int(m["id"][1:]) // 10 % 3 == j for m in got[q])
    # The same messages again (a dispatcher's retry): nothing new is written.
    again = await asyncio.gather(*(dq.submit(r) for r in reqs[:5]))
    assert all(res.fresh == 0 for res in again)
    assert sum([await store.queue_depth(q) for q, _ in queues]) == 60


async def test_matching_goes_on_while_at_most_two_batches_are_being_stored(setup):
    store, dq, _ = setup
    store.gate.clear()
    tasks = [asyncio.create_task(dq.submit(request(4, 10 * j, 1.0))) for j in range(6)]
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
    first = await asyncio.gather(dq.submit(request(4, 0, 1.0)), return_exceptions=True)
    assert isinstance(first[0], ConnectionError)
    assert len(dq) == 0
    ok = await dq.submit(request(4, 100, 1.0))
    assert ok.delivered == 4 and ok.fresh == 4
    # The failed batch wrote nothing (not even dedup marks): sent again, it is delivered.
    retry = await dq.submit(request(4, 0, 1.0))
    assert retry.fresh == 4
    assert await store.queue_depth(queues[0][0]) == 8


async def test_parts_of_several_dimensions_are_matched_each_on_its_own_set_and_stored_in_one_call(setup):
    store, dq, queues = setup
    # x0 = 150 is queue 1's on dimension 0; x1 = 250 is queue 2's on dimension 1.
    parts = request(2, 0, 150.0, dim=0, x1=250.0) + request(2, 10, 150.0, dim=1, x1=250.0)
    res = await dq.submit(parts)
    assert res.matched == 4 and res.fresh == 4 and res.delivered == 4 and store.calls == 1
    got = {q: sorted((m["id"], tuple(m["subscriptions"])) for m in await store.poll(q, 100, 0)) for q, _ in queues}
    assert got[queues[0][0]] == []
    assert got[queues[1][0]] == [("m0", ("s1",)), ("m1", ("s1",))]  # dimension 0's set only
    assert got[queues[2][0]] == [("m10", ("t2",)), ("m11", ("t2",))]  # dimension 1's set only


async def test_arrivals_queue_lengths_and_matching_work_are_kept_per_dimension(setup):
    store, dq, _ = setup
    store.gate.clear()
    task = asyncio.create_task(dq.submit(request(3, 0, 1.0, dim=0) + request(1, 10, 1.0, dim=1)))
    for _ in range(100):
        await asyncio.sleep(0.01)
        if store.running:
            break
    assert (dq.queued(0), dq.queued(1), len(dq)) == (3, 1, 4)  # matched, not yet stored
    store.gate.set()
    await task
    assert (dq.queued(0), dq.queued(1)) == (0, 0)
    s0, s1 = dq.stats
    assert (s0.total_arrived, s0.total_processed, s1.total_arrived, s1.total_processed) == (3, 3, 1, 1)
    assert s0.rates(time.monotonic())[1] > 0 and s1.rates(time.monotonic())[1] > 0  # μ from each one's own work


async def test_a_dispatcher_made_id_is_marked_only_when_it_has_deliveries(setup):
    store, dq, queues = setup
    # x0 = 1500 matches nothing; x0 = 50 is queue 0's
    none = request(2, 0, 1500.0, client=False)
    some = request(2, 10, 50.0, client=False)
    res = await dq.submit(none + some)
    assert res.matched == 2 and res.fresh == 2 and res.delivered == 2
    q0 = queues[0][0]
    marks = [K.message_mark(m) for m in ("m0", "m1", "m10", "m11")] + [K.delivery_mark(q0, m) for m in ("m10", "m11")]
    assert [await store.r.exists(k) for k in marks] == [0, 0, 0, 0, 1, 1]  # only the deliveries' marks
    # A publisher's own id is marked for the whole window even when it matches nothing.
    chosen = request(1, 20, 1500.0)
    assert (await dq.submit(chosen)).fresh == 1 and await store.r.exists(K.message_mark("m20")) == 1
    # The retry of a marked message writes nothing again.
    assert (await dq.submit(some)).fresh == 0
    assert await store.queue_depth(queues[0][0]) == 2


async def test_service_work_is_the_process_s_cpu_from_a_request_s_entry_to_its_deliveries_over_the_capacity(setup):
    """The service rate's work (bluedove/matcher/queues.py): the CPU time since the request entered the matcher
    (`cpu_at`, before its decoding) to its deliveries stored, over the cores the matcher may use;
    CPU spent while the queue was idle is no one's."""
    store, dq, _ = setup
    dq.cpu.capacity = lambda most=1.0: 0.25  # a matcher limited to a quarter of a core
    await dq.submit(request(4, 0, 1.0, dim=0), cpu_at=time.process_time() - 0.05)  # 50 ms of decoding
    s0, s1 = dq.service
    mu0 = s0.rates(time.monotonic())[1]
    assert 0 < mu0 <= 4 / (0.05 / 0.25)  # at least 0.2 s of a quarter core's work for 4 messages
    t = time.process_time()
    while time.process_time() - t < 0.05:  # busy while the queue is idle (gossip, a report)
        pass
    await dq.submit(request(4, 10, 1.0, dim=1))
    assert s1.rates(time.monotonic())[1] > 4 / (0.05 / 0.25)  # those 50 ms (0.2 s of work) were not counted


async def test_a_small_batch_is_matched_on_the_event_loop_and_a_big_one_on_the_index_thread(setup):
    """Both deliver alike; only where the walk ran differs (bluedove/matcher/index_thread.py)."""
    store, dq, queues = setup
    small = await dq.submit(request(INLINE_MOST, 0, 150.0))
    assert dq.index.inline == 1
    big = await dq.submit(request(INLINE_MOST + 1, 100, 150.0))
    assert dq.index.inline == 1
    assert (small.delivered, big.delivered) == (INLINE_MOST, INLINE_MOST + 1)
    assert await store.queue_depth(queues[1][0]) == 2 * INLINE_MOST + 1
