"""Batcher, the lane of the publish and subscribe paths: what a call carries, how many are under
way, when a further call goes out beside one under way, and each submitter's own result."""

from __future__ import annotations

import asyncio

from bluedove.runtime.batcher import Batcher


class Held:
    """A `handle` whose calls are held until `release()`; each answers its items doubled, or
    raises `fail` when an item equals it."""

    def __init__(self, fail: int | None = None):
        self.calls: list[list[int]] = []
        self.gate = asyncio.Event()
        self.fail = fail

    async def __call__(self, items: list[int]) -> list[int]:
        self.calls.append(items)
        await self.gate.wait()
        if self.fail in items:
            raise ValueError(f"refused {self.fail}")
        return [2 * i for i in items]


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


async def test_each_submitter_gets_its_own_result_and_a_failed_call_returns_its_exception_to_each():
    h = Held(fail=13)
    h.gate.set()
    lane: Batcher[int, int] = Batcher(h, max_weight=2, max_inflight=4)
    futs = [lane.submit(i) for i in (1, 2, 13, 4, 5)]  # submitted together: calls of two items
    results = await asyncio.gather(*futs)
    assert h.calls == [[1, 2], [13, 4], [5]]
    assert results[:2] == [2, 4] and results[4] == 10
    assert [type(r) for r in results[2:4]] == [ValueError, ValueError] and results[2] is results[3]


async def test_by_default_a_further_call_goes_out_on_any_free_slot():
    """The subscribe lanes: while a call is under way, what queues leaves at once on a free
    slot, up to max_inflight calls; the rest waits for one to end."""
    h = Held()
    lane: Batcher[int, int] = Batcher(h, max_weight=10, max_inflight=2)
    futs = [lane.submit(0)]
    await settle()
    futs.append(lane.submit(1))
    await settle()
    futs += [lane.submit(2), lane.submit(3)]
    await settle()
    assert h.calls == [[0], [1]] and lane.inflight == 2  # the bound: 2 and 3 wait
    h.gate.set()
    assert await asyncio.gather(*futs) == [0, 2, 4, 6]
    assert h.calls == [[0], [1], [2, 3]] and lane.inflight == 0


async def test_with_alongside_items_wait_for_a_call_to_end_until_that_much_weight_waits():
    """The publish lanes: while a call is under way, a further one goes out only once
    `alongside` weight waits; a call carries at most max_weight, its first item always."""
    h = Held()
    lane: Batcher[int, int] = Batcher(h, max_weight=10, max_inflight=4, alongside=5)
    futs = [lane.submit(0, weight=3)]
    await settle()
    futs += [lane.submit(1, weight=2), lane.submit(2, weight=2)]
    await settle()
    assert h.calls == [[0]]  # 4 waiting: under `alongside`
    futs.append(lane.submit(3, weight=1))
    await settle()
    assert h.calls == [[0], [1, 2, 3]]  # 5 waiting: they go out beside the first
    futs += [lane.submit(4, weight=12), lane.submit(5, weight=1)]
    await settle()
    assert h.calls == [[0], [1, 2, 3], [4]]  # over max_weight, 4 goes alone; 5 alone is under `alongside`
    h.gate.set()
    assert await asyncio.gather(*futs) == [0, 2, 4, 6, 8, 10]
    assert h.calls[3:] == [[5]]  # left once a call ended


async def test_a_submitter_that_stops_waiting_leaves_the_lane_working():
    h = Held()
    lane: Batcher[int, int] = Batcher(h, max_weight=10, max_inflight=1)
    gone = lane.submit(1)
    kept = lane.submit(2)
    await settle()
    gone.cancel()
    h.gate.set()
    assert await kept == 4 and gone.cancelled() and lane.inflight == 0
    assert await lane.submit(3) == 6


async def test_with_hold_the_call_after_one_that_ends_waits_and_carries_what_came_meanwhile():
    """The subscribe lanes: a call ending with less than `alongside` waiting lets the next leave
    `hold_s` later, with what queued up by then; an idle lane's call is never held."""
    h = Held()
    lane: Batcher[int, int] = Batcher(h, max_weight=100, max_inflight=1, alongside=16, hold_s=0.05)
    first = lane.submit(1)
    await settle()
    assert h.calls == [[1]]  # an idle lane's call leaves at once
    later = [lane.submit(2)]  # queued while the first is under way
    h.gate.set()
    assert await first == 2
    await settle()
    later.append(lane.submit(3))  # the first ended with one waiting: the next is held...
    await settle()
    assert h.calls == [[1]]
    assert await asyncio.gather(*later) == [4, 6]
    assert h.calls == [[1], [2, 3]]  # ...and carries what came meanwhile
    await settle()
    assert await lane.submit(4) == 8 and h.calls[-1] == [4]  # idle again: at once
