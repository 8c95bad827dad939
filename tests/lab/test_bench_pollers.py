"""The delivery bench's pollers (lab/bench/procs.py) against a stand-in HTTP server:
paced like a fleet of phones (each queue at most once per --poll-interval, the connections'
passes offset from each other), unpaced for the final drain, and stopping on a failed poll or
ack."""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import time

from lab.bench.procs import Control, _poll_all


class FakeService:
    """Answers GET …/messages with the deliveries queued for that queue (all at once) and
    POST …/ack with 204, recording when each queue was polled; `fail` maps a method to the
    status it answers with instead."""

    def __init__(self, queued: dict[str, int] | None = None, fail: dict[str, int] | None = None,
                 keep_alive: bool = True, mute: bool = False) -> None:
        self.queued = dict(queued or {})
        self.fail = fail or {}
        self.keep_alive = keep_alive  # False: close each connection after one answer (as an idle timeout does)
        self.mute = mute  # True: close each connection without answering
        self.connections = 0
        self.polls: list[tuple[float, str]] = []
        self.acked: list[str] = []
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while not self.mute and (line := await reader.readline()):
                method, path, _ = line.decode().split()
                length = 0
                while (h := await reader.readline()) != b"\r\n":
                    name, _, value = h.decode().partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length) if length else b""
                queue = path.split("/")[3]
                if method in self.fail:
                    status, out = self.fail[method], b'{"error":{"code":"x","message":"x"}}'
                elif method == "GET":
                    self.polls.append((time.monotonic(), queue))
                    n, self.queued[queue] = self.queued.get(queue, 0), 0
                    msgs = [{"id": f"{queue}-{i}", "subscriptions": ["s"], "receipt": f"{i + 1}-0"} for i in range(n)]
                    status, out = 200, json.dumps({"messages": msgs}).encode()
                else:
                    self.acked += [f"{queue}:{r}" for r in json.loads(body)["receipts"]]
                    status, out = 204, b""
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: {len(out)}\r\n\r\n".encode() + out)
                if not self.keep_alive:
                    await writer.drain()
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        self.server.close()


def control() -> Control:
    return Control(mp.Value("d", 0.0), mp.Value("q", 0), mp.Value("i", 1), mp.Event(), mp.Event(), mp.Value("i", 0),
                   mp.Value("q", 0))


async def run_for(service: FakeService, queues: list[str], seconds: float, interval: float, ctl: Control,
                  concurrency: int = 1, drain: bool = False, sample: set[str] = frozenset()) -> dict:
    url = await service.start()
    task = asyncio.create_task(_poll_all(url, [(q, "tok") for q in queues], set(sample), concurrency, ctl, interval))
    await asyncio.sleep(seconds)
    if drain:
        ctl.drain.set()
    ctl.stop.set()
    out = await asyncio.wait_for(task, 10)
    service.close()
    return out


async def test_paced_pollers_poll_each_queue_once_per_interval():
    service, ctl = FakeService(), control()
    queues = ["q0", "q1", "q2", "q3"]
    out = await run_for(service, queues, 1.1, 0.4, ctl)
    assert out["errors"] == []
    times = {q: [t for t, p in service.polls if p == q] for q in queues}
    assert all(2 <= len(ts) <= 3 for ts in times.values()), times  # passes at 0, 0.4, 0.8 s
    for ts in times.values():
        assert all(b - a >= 0.38 for a, b in zip(ts, ts[1:])), ts
    assert ctl.polls.value == len(service.polls)


async def test_paced_connections_are_offset_from_each_other():
    """Two connections: both first passes at once (so the drain phase starts at full speed),
    then the second connection's passes half an interval after the first's."""
    service, ctl = FakeService(), control()
    await run_for(service, ["a", "b"], 2.3, 1.0, ctl, concurrency=2)  # a on one connection, b on the other
    a = [t for t, q in service.polls if q == "a"]
    b = [t for t, q in service.polls if q == "b"]
    assert abs(a[0] - b[0]) < 0.2
    assert all(0.9 <= y - x <= 1.2 for x, y in zip(a, a[1:])), a  # every interval from its start
    assert 0.3 <= b[1] - b[0] <= 0.7, b  # its first pass counted as begun half an interval early
    assert all(0.9 <= y - x <= 1.2 for x, y in zip(b[1:], b[2:])), b


async def test_unpaced_pollers_poll_as_fast_as_they_can():
    service, ctl = FakeService(), control()
    await run_for(service, ["q0", "q1"], 0.5, 0.0, ctl)
    assert len(service.polls) > 12  # an empty pass then waits 50 ms: > 2 queues x 6 passes


async def test_the_final_drain_is_unpaced_and_acks_everything():
    service = FakeService(queued={"q0": 3, "q1": 2})
    ctl = control()
    t0 = time.monotonic()
    out = await run_for(service, ["q0", "q1"], 0.0, 30.0, ctl, drain=True, sample={"q1"})
    assert time.monotonic() - t0 < 5  # not one pass per 30 s
    assert sorted(service.acked) == ["q0:1-0", "q0:2-0", "q0:3-0", "q1:1-0", "q1:2-0"]
    assert out["acked"] == ctl.done.value == 5 and out["errors"] == []
    assert sorted(out["seen"]) == [("q1", "q1-0", ["s"]), ("q1", "q1-1", ["s"])]


async def test_a_failed_poll_or_ack_is_reported_and_ends_that_connection():
    service = FakeService(fail={"GET": 401})
    out = await run_for(service, ["q0"], 0.3, 0.0, control())
    assert len(out["errors"]) == 1 and out["errors"][0].startswith("poll 401")
    service = FakeService(queued={"q0": 2}, fail={"POST": 422})
    out = await run_for(service, ["q0"], 0.3, 0.0, control())
    assert len(out["errors"]) == 1 and out["errors"][0].startswith("ack 422") and out["acked"] == 0


async def test_a_connection_the_server_closed_is_opened_again():
    service = FakeService(queued={"q0": 2, "q1": 1}, keep_alive=False)
    out = await run_for(service, ["q0", "q1"], 0.0, 30.0, control(), drain=True)
    assert out["errors"] == [] and out["acked"] == 3 and len(service.acked) == 3
    assert service.connections >= 4  # one per request: 2 polls + 2 acks at least


async def test_a_server_that_never_answers_is_reported_not_a_crash():
    out = await run_for(FakeService(mute=True), ["q0"], 0.3, 0.0, control())
    assert len(out["errors"]) == 1 and out["errors"][0].startswith("connection failed: ConnectionError")
