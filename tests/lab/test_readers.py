"""The lab's phone-like readers (bluedove/lab/readers.py), as the demo uses them, on a fake clock against
a stand-in service (httpx.MockTransport): a lone reader long-polls and acks in batches, a reader
of several queues goes round them, failures are reported and retried."""

from __future__ import annotations

import asyncio
import json

import httpx

from bluedove.lab.load import pool
from bluedove.lab.readers import ACK_EVERY_S, Inbox, read, reading

URL = "http://bluedove.test"


class Queues:
    """GET …/messages answers what is queued, or waits `wait` seconds (fake) for nothing;
    POST …/ack records the receipts with the time."""

    def __init__(self, clock, queued: dict[str, int], fail: int = 0) -> None:
        self.clock, self.queued, self.fail = clock, dict(queued), fail
        self.polls: list[tuple[float, str, float]] = []
        self.acks: list[tuple[float, str, list[str]]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.fail:
            self.fail -= 1
            return httpx.Response(503, json={"error": {"code": "unavailable", "message": "busy"}})
        queue = request.url.path.split("/")[3]
        now = round(self.clock.now() - 1000.0, 6)
        if request.method == "POST":
            self.acks.append((now, queue, json.loads(request.content)["receipts"]))
            return httpx.Response(204)
        wait = float(request.url.params["wait"])
        self.polls.append((now, queue, wait))
        n, self.queued[queue] = self.queued.get(queue, 0), 0
        if not n:
            await self.clock.sleep(wait)
        msgs = [{"id": f"{queue}-{i}", "subscriptions": ["s"], "receipt": f"{queue}-r{i}"} for i in range(n)]
        return httpx.Response(200, json={"messages": msgs})


async def test_a_lone_reader_long_polls_and_acks_in_batches(clock):
    service, got, errors = Queues(clock, {"q": 2}), [], []
    boxes = [Inbox("q", "tok")]
    async with reading(URL, boxes, lambda i, m: got.append((i, len(m))), errors.append, httpx.MockTransport(service),
                       clock):
        await clock.run_for(12.0)
    assert got[0] == (0, 2) and errors == []
    # a poll brought 2: the next comes MIN_POLL_GAP_S later and first acks them (none was acked
    # for ACK_EVERY_S), then long-polls again
    assert [(t, w) for t, _, w in service.polls[:3]] == [(0.0, 10.0), (0.5, 10.0), (10.5, 10.0)]
    assert service.acks == [(0.5, "q", ["q-r0", "q-r1"])]


async def test_receipts_wait_for_the_next_batch_of_acks(clock):
    service = Queues(clock, {"q": 1})
    box = Inbox("q", "tok", last_ack=clock.now())  # just acked
    t = asyncio.create_task(read(_pool(httpx.MockTransport(service)), [box], [0], lambda i, m: None,
                                 lambda e: None, clock))
    await clock.run_for(6.0)
    t.cancel()
    # pending receipts: the long-poll ends in time for the ack, ACK_EVERY_S after the last one
    assert [(at, w) for at, _, w in service.polls[:3]] == [(0.0, 10.0), (0.5, ACK_EVERY_S), (5.5, 10.0)]
    assert service.acks == [(5.5, "q", ["q-r0"])]


async def test_a_reader_of_several_queues_goes_round_them(clock):
    boxes = [Inbox("a", "t"), Inbox("b", "t")]
    async with reading(URL, boxes, lambda i, m: None, lambda e: None, httpx.MockTransport(Queues(clock, {})),
                       clock) as tasks:
        assert len(tasks) == 2  # one reader each while there are few
    service = Queues(clock, {"a": 1})
    transport = httpx.MockTransport(service)
    t = asyncio.create_task(read(_pool(transport), boxes, [0, 1], lambda i, m: None, lambda e: None, clock))
    await clock.run_for(4.1)
    t.cancel()
    # no long-polls; again MIN_POLL_GAP_S after a round that brought something, else IDLE_ROUND_S
    assert service.polls == [(0.0, "a", 0.0), (0.0, "b", 0.0), (0.5, "a", 0.0), (0.5, "b", 0.0),
                             (2.5, "a", 0.0), (2.5, "b", 0.0)]


def _pool(transport):
    return pool(URL, 2, transport)


async def test_failures_are_reported_and_retried(clock):
    service, got, errors = Queues(clock, {"q": 1}, fail=2), [], []
    t = asyncio.create_task(read(_pool(httpx.MockTransport(service)), [Inbox("q", "t")], [0],
                                 lambda i, m: got.append(len(m)), errors.append, clock))
    await clock.run_for(1.2)
    t.cancel()
    assert [e.status for e in errors] == [503, 503] and got[0] == 1
    assert service.polls[0][0] == 1.0  # after two half-second retries
