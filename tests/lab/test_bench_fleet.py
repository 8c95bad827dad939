"""`bluedove bench fleet`: its raw HTTP/1.1 poller against a scripted server (in process), its
queue points, its flags, and a tiny run on a real cluster (every publish reaches its queue's
poll exactly once; each sample has every process). No timed thresholds: speed is the bench's
to report."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from array import array

import pytest

from bluedove.core.space import default_space
from bluedove.lab.bench import parse
from bluedove.lab.bench.fleet_client import ANSWERS, MESSAGES, PARKED, SLOTS, Fleet, ProtocolError, Share, read_response
from bluedove.lab.bench.fleet_probe import queue_box, queue_point


def _reader(data: bytes) -> asyncio.StreamReader:
    r = asyncio.StreamReader()
    r.feed_data(data)
    r.feed_eof()
    return r


async def test_a_response_is_read_by_its_content_length():
    r = _reader(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-type: application/json\r\n\r\nhello"
                b"HTTP/1.1 204 No Content\r\n\r\n")
    assert await read_response(r) == (200, b"hello", True)
    assert await read_response(r) == (204, b"", True)


async def test_connection_close_is_seen_and_chunked_answers_are_refused():
    assert await read_response(_reader(b"HTTP/1.1 503 X\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}")) \
        == (503, b"{}", False)
    with pytest.raises(ProtocolError):
        await read_response(_reader(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"))
    with pytest.raises(ProtocolError):
        await read_response(_reader(b"SSH-2.0 hello\r\n\r\n"))


def test_each_queue_point_lies_in_its_own_box_alone():
    space = default_space()
    boxes = [queue_box(space, i) for i in range(0, 3000, 7)]
    for n, i in enumerate(range(0, 3000, 7)):
        p = queue_point(space, i)
        inside = [j for j, b in enumerate(boxes) if all(lo <= p[d] < hi for d, (lo, hi) in b.items())]
        assert inside == [n]


class Scripted:
    """A server speaking just enough HTTP/1.1: the first poll of a connection answers one
    delivery, then it expects that receipt's ack on the same connection, and parks the next poll."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, str, bytes]] = []  # (connection number, request line, body)
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = self.connections
        while True:
            try:
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
            except asyncio.IncompleteReadError:
                return
            length = next((int(h.split(":")[1]) for h in head.split("\r\n") if h.lower().startswith("content-length")),
                          0)
            body = await reader.readexactly(length)
            line = head.split("\r\n")[0]
            self.requests.append((conn, line, body))
            if line.startswith("POST"):
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            elif sum(1 for c, ln, _ in self.requests if c == conn and ln.startswith("GET")) == 1:
                msg = {"messages": [{"id": f"m{conn}", "receipt": f"1-{conn}"}]}
                out = json.dumps(msg).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(out), out))
            else:
                await asyncio.sleep(3600)  # parked


async def test_a_poll_acks_on_its_connection_then_polls_again():
    server = Scripted()
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    progress = array("q", [0] * SLOTS)
    fleet = Fleet(Share("127.0.0.1", port, [(0, "qa", "ta"), (1, "qb", "tb")], 20, 10), progress)
    stop = asyncio.get_running_loop().create_future()
    run = asyncio.create_task(fleet.run(stop))
    for _ in range(200):
        if len(server.requests) == 6:
            break
        await asyncio.sleep(0.01)
    stop.set_result(None)
    await run
    srv.close()
    assert server.connections == 2 and progress[PARKED] == 2 and progress[ANSWERS] == 2 and progress[MESSAGES] == 2
    for conn, q in ((1, "qa"), (2, "qb")):
        mine = [(line.split(" ")[0], body) for c, line, body in server.requests if c == conn]
        assert mine == [("GET", b""), ("POST", json.dumps({"receipts": [f"1-{conn}"]}).encode()), ("GET", b"")]
    assert sorted((m, i) for m, i, _ in fleet.received) == [("m1", 0), ("m2", 1)]
    got = fleet.result()
    assert got["open_at_close"] == 2 and got["errors"] == {} and got["overdue"] == 0


@pytest.mark.parametrize("flags", [["--polls", "0"], ["--wait", "21"], ["--fraction", "0"], ["--rate", "-1"],
                                   ["--polls", "40000", "--clients", "2"],
                                   ["--polls", "40000", "--clients", "3", "--dispatchers", "2"],
                                   ["--polls", "3", "--clients", "4"]])
def test_bad_flags_exit_2(flags, capsys):
    args = parse(["fleet", *flags])
    assert args.func(args) == 2
    assert "bench fleet: --" in capsys.readouterr().err


@pytest.mark.integration
def test_a_tiny_fleet_gets_every_publish_once():
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "fleet", "--polls", "60", "--dispatchers", "2",
                        "--matchers", "1", "--clients", "2", "--wait", "2", "--rate", "20", "--seconds", "3",
                        "--after", "0.5", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["kind"] == "fleet" and out["parked"] == 60 and out["clients"] == 2
    d = out["delivery"]
    assert d["expected"] > 0 and d["received"] == d["expected"]
    assert d["lost"] == d["duplicates"] == d["misrouted"] == 0 and out["publish"]["errors"] == {}
    assert set(out["samples"]) == {"idle", "parked", "published", "after"}
    for s in out["samples"].values():
        assert set(s) == {"d1", "d2", "redis"} and s["redis"]["connected_clients"] > 0
        assert all({"redis_connections", "http_connections", "fds", "rss_mb"} <= set(s[d]) for d in ("d1", "d2"))
    assert sum(out["samples"]["parked"][d]["http_connections"] for d in ("d1", "d2")) == 60
    assert out["polls_seen"]["errors"] == {} and out["polls_seen"]["answers"] >= d["received"] // 10
