"""The lab's load (bluedove/lab/load.py) on a fake clock against a stand-in service (httpx.MockTransport):
pollers paced like a fleet of phones (each queue at most once per interval, the connections'
passes offset from each other), unpaced for the final drain, stopping on a failed poll or
ack; the open-loop publisher keeps its rate, skips what it cannot send and counts refusals;
the ticked publisher sends what is due each tick, in larger batches when the service is slow."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import httpx

from bluedove.lab.load import PacedPublisher, Pollers, closed_loop, poll_queues, pool, publish_due, publish_encoded

URL = "http://bluedove.test"


class FakeService:
    """Answers GET …/messages with the deliveries queued for that queue (all at once) and
    POST …/ack with 204, recording when each queue was polled; `fail` maps a method to the
    status it answers with instead; `down` fails every request as an unreachable server."""

    def __init__(self, clock, queued: dict[str, int] | None = None, fail: dict[str, int] | None = None,
                 down: bool = False) -> None:
        self.clock = clock
        self.queued = dict(queued or {})
        self.fail = fail or {}
        self.down = down
        self.polls: list[tuple[float, str]] = []
        self.acked: list[str] = []
        self.batches: list[bytes] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if request.method in self.fail:
            return httpx.Response(self.fail[request.method], json={"error": {"code": "x", "message": "no"}})
        if request.url.path == "/v1/messages:batch":
            self.batches.append(request.content)
            return httpx.Response(202, json={"ids": ["m"]})
        queue = request.url.path.split("/")[3]
        if request.method == "GET":
            self.polls.append((self.clock.now(), queue))
            n, self.queued[queue] = self.queued.get(queue, 0), 0
            msgs = [{"id": f"{queue}-{i}", "subscriptions": ["s"], "receipt": f"{i + 1}-0"} for i in range(n)]
            return httpx.Response(200, json={"messages": msgs})
        self.acked += [f"{queue}:{r}" for r in json.loads(request.content)["receipts"]]
        return httpx.Response(204)

    def times(self, queue: str) -> list[float]:
        return [round(t - 1000.0, 6) for t, q in self.polls if q == queue]


@dataclass
class Switches:
    is_active: bool = True
    stop: bool = False
    drain: bool = False
    polls: int = 0
    done: int = 0

    def active(self) -> bool:
        return self.is_active

    def stopping(self) -> bool:
        return self.stop

    def draining(self) -> bool:
        return self.drain

    def polled(self) -> None:
        self.polls += 1

    def acked(self, n: int) -> None:
        self.done += n


def mock_pools(service: FakeService):
    """`poll_queues`' pools: the SDK's REST transport on the stand-in service."""
    return lambda n: pool(URL, n, httpx.MockTransport(service))


async def run_for(clock, service: FakeService, queues: list[str], seconds: float, interval: float,
                  switches: Switches, connections: int = 1, drain: bool = False,
                  sample: frozenset[str] = frozenset()) -> dict:
    task = asyncio.create_task(poll_queues(mock_pools(service), [(q, "tok") for q in queues], switches, connections,
                                           interval, sample, clock))
    await clock.run_for(seconds)
    switches.drain = drain
    switches.stop = True
    return await clock.finish(task, limit_s=10)


async def test_paced_pollers_poll_each_queue_once_per_interval(clock):
    service, switches = FakeService(clock), Switches()
    queues = ["q0", "q1", "q2", "q3"]
    out = await run_for(clock, service, queues, 1.1, 0.4, switches)
    assert out["errors"] == []
    for q in queues:
        assert service.times(q) == [0.0, 0.4, 0.8]
    assert switches.polls == len(service.polls)


async def test_paced_connections_are_offset_from_each_other(clock):
    """Two connections: both first passes at once (so the drain phase starts at full speed),
    then the second connection's passes half an interval after the first's."""
    service = FakeService(clock)
    await run_for(clock, service, ["a", "b"], 2.3, 1.0, Switches(), connections=2)  # a and b on one each
    assert service.times("a") == [0.0, 1.0, 2.0]  # every interval from its start
    assert service.times("b") == [0.0, 0.5, 1.5]  # its first pass counted as begun half an interval early


async def test_connections_held_up_by_a_slow_service_stay_offset(clock):
    """Polls take 1.5 s for the first 3 s, so both connections' passes run late; once the
    service is fast again, each is back on its own schedule, half an interval apart (not in
    step, which would make the load come in bursts)."""
    service = FakeService(clock)
    answer = service.__call__

    async def slow(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and clock.now() - 1000.0 < 3.0:
            await clock.sleep(1.5)
        return answer(request)

    pollers = Pollers([("a", "t"), ("b", "t")], [pool(URL, 1, httpx.MockTransport(slow)) for _ in range(2)],
                      switches := Switches(), 1.0, clock=clock)
    task = asyncio.create_task(pollers.run())
    await clock.run_for(5.8)
    switches.stop = True
    await clock.finish(task, limit_s=10)
    late = 3.5  # every pass before this ran late or follows one that did
    assert [t for t in service.times("a") if t >= late] == [4.0, 5.0]
    assert [t for t in service.times("b") if t >= late] == [3.5, 4.5, 5.5]


async def test_unpaced_pollers_poll_as_fast_as_they_can(clock):
    service = FakeService(clock)
    await run_for(clock, service, ["q0", "q1"], 0.5, 0.0, Switches())
    assert len(service.polls) > 12  # an empty pass then waits 50 ms: > 2 queues x 6 passes


async def test_paused_pollers_do_not_poll(clock):
    service, switches = FakeService(clock), Switches(is_active=False)
    task = asyncio.create_task(poll_queues(mock_pools(service), [("q0", "tok")], switches, 1, 0.0, frozenset(),
                                           clock))
    await clock.run_for(1.0)
    assert service.polls == []
    switches.is_active = True
    await clock.run_for(0.03)  # the watcher looks every 20 ms
    switches.stop = True
    await clock.finish(task, limit_s=10)
    (t,) = service.times("q0")
    assert 1.0 <= t <= 1.02


async def test_the_final_drain_is_unpaced_and_acks_everything(clock):
    service, switches = FakeService(clock, queued={"q0": 3, "q1": 2}), Switches()
    out = await run_for(clock, service, ["q0", "q1"], 0.0, 30.0, switches, drain=True, sample=frozenset({"q1"}))
    assert clock.now() - 1000.0 < 5  # not one pass per 30 s
    assert sorted(service.acked) == ["q0:1-0", "q0:2-0", "q0:3-0", "q1:1-0", "q1:2-0"]
    assert out["acked"] == switches.done == 5 and out["errors"] == []
    assert sorted(out["seen"]) == [("q1", "q1-0", ["s"]), ("q1", "q1-1", ["s"])]


async def test_a_failed_poll_or_ack_is_reported_and_ends_that_connection(clock):
    out = await run_for(clock, FakeService(clock, fail={"GET": 401}), ["q0"], 0.3, 0.0, Switches())
    assert len(out["errors"]) == 1 and out["errors"][0].startswith("poll 401")
    out = await run_for(clock, FakeService(clock, queued={"q0": 2}, fail={"POST": 422}), ["q0"], 0.3, 0.0, Switches())
    assert len(out["errors"]) == 1 and out["errors"][0].startswith("ack 422") and out["acked"] == 0


async def test_a_server_that_cannot_be_reached_is_reported_not_a_crash(clock):
    out = await run_for(clock, FakeService(clock, down=True), ["q0"], 0.3, 0.0, Switches())
    assert len(out["errors"]) == 1 and out["errors"][0].startswith("connection failed")


async def test_connections_share_small_pools(clock):
    service = FakeService(clock)
    transports = [pool(URL, 4, httpx.MockTransport(service))] * 2
    pollers = Pollers([("a", "t"), ("b", "t")], transports, Switches(stop=True), clock=clock)
    assert (await pollers.run())["errors"] == []
    await transports[0].close()


async def test_the_publisher_keeps_its_rate_and_sends_the_batches_in_turn(clock):
    service = FakeService(clock)
    t = pool(URL, 4, httpx.MockTransport(service))
    pub = PacedPublisher(publish_encoded(t, [b'{"messages":[1]}', b'{"messages":[2]}']), per_send=100, inflight=4,
                         clock=clock, rate=1000.0)  # a batch of 100 every 0.1 s
    stop_at = clock.now() + 1.0
    await clock.finish(asyncio.create_task(pub.run(lambda: clock.now() >= stop_at - 1e-9)))
    assert pub.sent == pub.accepted == 1000 and pub.skipped == pub.refused == 0
    assert service.batches[:3] == [b'{"messages":[1]}', b'{"messages":[2]}', b'{"messages":[1]}']
    assert all(s == 0.0 for _, s in pub.latencies)
    await t.close()


async def test_the_publisher_skips_what_it_cannot_send_and_counts_refusals(clock):
    answers = iter([False, True] * 100)

    async def slow_send() -> bool:
        await clock.sleep(0.25)  # each batch takes 0.25 s to answer
        return next(answers)

    pub = PacedPublisher(slow_send, per_send=10, inflight=1, clock=clock, rate=100.0)  # a send due every 0.1 s
    stop_at = clock.now() + 1.0
    await clock.finish(asyncio.create_task(pub.run(lambda: clock.now() >= stop_at - 1e-9)))
    assert pub.sent + pub.skipped == 100  # every due send, sent or skipped
    assert pub.sent == 40 and pub.refused == 20 and pub.accepted == 20  # one in three sent: 0, 0.3, 0.6, 0.9 s
    assert [s for _, s in pub.latencies] == [0.25] * 2


async def test_a_paused_publisher_sends_nothing(clock):
    sent = []

    async def send() -> bool:
        sent.append(clock.now())
        return True

    pub = PacedPublisher(send, per_send=1, inflight=1, clock=clock)  # rate 0: paused
    task = asyncio.create_task(pub.run(lambda: len(sent) >= 3))
    await clock.run_for(1.0)
    assert sent == []
    pub.rate = 10.0
    await clock.finish(task)
    assert [round(t - 1001.0, 6) for t in sent] == [0.0, 0.1, 0.2]


async def test_closed_loop_callers_call_again_at_once_and_count_only_the_window(clock):
    n = iter(range(10**6))

    async def send() -> list[str]:
        await clock.sleep(0.3)  # each call answers after 0.3 s with 2 ids
        return [f"id{next(n)}", f"id{next(n)}"]

    task = asyncio.create_task(closed_loop(send, 2, clock.now() + 1.0, clock))
    counted, ids, returned = await clock.finish(task)
    assert counted == 2 * 2 * 3  # 2 callers, answered at 0.3, 0.6, 0.9 s; the 1.2 s answers are late
    assert returned == len(ids) == 2 * 2 * 4


async def test_the_publisher_sends_what_is_due_each_tick(clock):
    sent: list[tuple[float, range]] = []

    async def send(idx: range) -> None:
        sent.append((round(clock.now() - 1000.0, 6), idx))

    await clock.finish(asyncio.create_task(publish_due(send, 1000, 100.0, 1.0, clock=clock)))
    assert sent[0] == (0.0, range(0, 10)) and sent[1] == (0.1, range(10, 20))
    assert 100 <= sent[-1][1].stop <= 110 and sent[-1][0] < 1.0  # due by the last tick's end; nothing later
    assert all(r.start == p.stop for (_, p), (_, r) in zip(sent, sent[1:]))


async def test_a_slow_service_gets_larger_batches_and_nothing_beyond_what_was_due(clock):
    sent: list[range] = []

    async def send(idx: range) -> None:
        sent.append(idx)
        await clock.sleep(0.35)

    await clock.finish(asyncio.create_task(publish_due(send, 1000, 100.0, 1.0, inflight=1, clock=clock)))
    assert [len(r) for r in sent][:2] == [10, 35] and all(r.start == p.stop for p, r in zip(sent, sent[1:]))
    assert 100 <= sent[-1].stop <= 110


async def test_what_was_due_but_held_back_past_the_end_is_sent_late(clock):
    """A cluster too slow to answer before the end: the items due by then go in one last batch
    (all `rate * duration` of them sent), nothing beyond them."""
    sent: list[range] = []

    async def send(idx: range) -> None:
        sent.append(idx)
        await clock.sleep(1.05)  # the first batch answers only after the end

    await clock.finish(asyncio.create_task(publish_due(send, 1000, 100.0, 1.0, inflight=1, clock=clock)))
    assert sent[-1].stop == 100 and all(r.start == p.stop for p, r in zip(sent, sent[1:]))


async def test_open_loop_sends_at_its_rate_without_waiting_for_answers():
    """`open_loop`: a call every 1/rate s whatever the answers take; every call answered before it returns."""
    import threading

    from bluedove.lab.load import open_loop

    stop, started, answered = threading.Event(), [], []

    async def send(i: int) -> None:
        started.append(i)
        await asyncio.sleep(0.2)  # slower than the rate: calls overlap
        answered.append(i)

    asyncio.get_running_loop().call_later(0.25, stop.set)
    await open_loop(40.0, send, stop)
    assert 8 <= len(started) <= 12 and sorted(answered) == started == list(range(len(started)))
