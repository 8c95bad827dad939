"""The matcher's side of a replay's seam (bluedove/matcher/queues.py): `barrier` waits for
exactly the batches taken before it (stored or failed), not for those taken after; a new
replaying subscription's deliveries are split out to be written with replay marks while its
seam is open, and no longer after."""

from __future__ import annotations

import asyncio
import json

import numpy as np

from bluedove.core.wire import ENDS, Part
from bluedove.matcher import queues as mq
from bluedove.matcher.index_thread import IndexThread
from bluedove.matcher.load import WindowStats
from bluedove.matcher.queues import BatchResult, MatcherQueue, _split


def part(n: int = 1) -> Part:
    ids = b"".join(b"m%d" % i for i in range(n))
    return Part(0, np.zeros((n, 1)), ids, np.arange(2, 2 * n + 1, 2).astype(ENDS), b"{}" * n,
                np.arange(2, 2 * n + 1, 2).astype(ENDS), np.zeros(n, dtype=np.bool_))


class Gated(MatcherQueue):
    """A queue whose match is nothing and whose store waits for `gates[i]` (batch i, in order taken)."""

    def __init__(self) -> None:
        super().__init__(1, lambda i: None, None, IndexThread(), [WindowStats(5.0)])  # type: ignore
        self.gates: list[asyncio.Event] = []
        self.taken = 0

    def _match(self, parts):  # type: ignore[override]
        return [], {}, {}

    async def _finish(self, batch, parts, found, busy, walk_cpu):  # type: ignore[override]
        gate = self.gates[self.taken]
        self.taken += 1
        try:
            await gate.wait()
        except BaseException as exc:  # as MatcherQueue._finish: the batch fails, its slot is freed
            self._answer(batch, exc)
            raise
        for r in batch:
            r.done.set_result(BatchResult())
        self._answer(batch, None)

    async def submitted(self) -> asyncio.Future[BatchResult]:
        """A request submitted, once its batch is taken (matched, its store under way)."""
        taken = self.taken
        fut = asyncio.ensure_future(self.submit([part()]))
        while self.taken == taken:
            await asyncio.sleep(0.001)
        return fut


async def test_a_barrier_waits_for_the_batches_taken_before_it_and_only_those():
    q = Gated()
    q.gates = [asyncio.Event(), asyncio.Event()]
    q.start()
    try:
        first = await q.submitted()
        barrier = asyncio.ensure_future(q.barrier())
        second = await q.submitted()  # taken after the barrier began
        q.gates[1].set()  # the later batch is stored: the barrier still waits for the first
        await second
        await asyncio.sleep(0.01)
        assert not barrier.done()
        q.gates[0].set()
        await asyncio.wait_for(barrier, 1)
        await first
        await asyncio.wait_for(q.barrier(), 1)  # nothing taken: at once
    finally:
        await q.stop()


async def test_a_barrier_does_not_wait_on_a_batch_that_failed():
    q = Gated()
    q.gates = [asyncio.Event()]
    q.start()
    try:
        first = await q.submitted()
        barrier = asyncio.ensure_future(q.barrier())
        await q.stop()  # the batch under way fails (NotReady): the barrier is over
        await asyncio.wait_for(barrier, 1)
        assert first.done() and first.exception() is not None
    finally:
        await q.stop()


def test_deliveries_of_replaying_subscriptions_are_split_out_with_them():
    rows = [("q1", 0, json.dumps(["a", "b"])), ("q2", 0, json.dumps(["c"])), ("q1", 1, json.dumps(["ab"]))]
    plain, seam = [], []
    _split(rows, ["a", "c"], plain, seam)
    assert plain == [("q1", 1, '["ab"]')]  # "ab" is another subscription than "a"
    assert seam == [("q1", 0, '["a", "b"]', ["a"]), ("q2", 0, '["c"]', ["c"])]


def test_a_seam_closes_after_its_time(monkeypatch):
    q = MatcherQueue(1, lambda i: None, None, IndexThread(), [WindowStats(5.0)])  # type: ignore
    clock = [1000.0]
    monkeypatch.setattr(mq.time, "monotonic", lambda: clock[0])
    q.open_seam(["s1"], clock[0])
    assert q._replaying() == ["s1"]
    clock[0] += mq.SEAM_S - 1
    assert q._replaying() == ["s1"]
    clock[0] += 2
    assert q._replaying() == []
