"""`bench fleet`'s client processes: each keeps one long poll parked per queue of its share, on
a keep-alive connection of its own, with raw asyncio streams (a request writer and a response
reader of HTTP/1.1: status line, Content-Length, body), one task per poll, no thread.

A poll that answers is followed at once by the next, on the same connection; when it brought
deliveries, their receipts are acked first (on that connection too). Every delivery is kept
as (message id, queue index, time.time_ns() when its answer was read whole), to be matched
against the publishes' 202s by the bench (one clock for every process of one machine).

A process holds at most OPEN_FILES_CAP connections: the machine's open-file limit is per
process (`ulimit -Hn`), and the process needs a few descriptors of its own.
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# progress slots every client process writes (one writer each) and the bench reads
READY, PARKED, ANSWERS, MESSAGES, ERRORS, OPEN = range(6)
SLOTS = 6
OPEN_FILES_CAP = 15_000  # connections one client process holds at most
CONNECTING = 200  # connections a process opens at once (the dispatchers' listen backlog is 2,048)
RETRY_S = 0.5  # after a failed connection or an error answer, before trying again
OVERDUE_S = 1.0  # a poll longer than wait + this is overdue
EMPTY = b'{"messages":[]}'


class ProtocolError(Exception):
    """An answer this minimal HTTP/1.1 reader does not read (no Content-Length, a bad status line)."""


def request(method: str, path: str, host: str, token: str, body: bytes = b"") -> bytes:
    """An HTTP/1.1 request on a keep-alive connection, the queue's token as its bearer."""
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
    if body or method == "POST":
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode("ascii") + b"\r\n" + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, whether the connection stays open) of one HTTP/1.1 answer."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    version, _, rest = head[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ProtocolError(f"bad status line {head[0][:80]!r}")
    length, keep = None, version == "HTTP/1.1"
    for line in head[1:]:
        name, _, value = line.partition(":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "connection":
            keep = value == "keep-alive" or (keep and value != "close")
        elif name == "transfer-encoding" and value != "identity":
            raise ProtocolError(f"transfer-encoding {value} is not read here")
    status = int(code)
    if length is None and status not in (204, 304) and not 100 <= status < 200:
        raise ProtocolError(f"status {status} without Content-Length")
    return status, (await reader.readexactly(length) if length else b""), keep


@dataclass
class Share:
    """One client process's part of the fleet: where to connect and its queues."""

    host: str
    port: int
    queues: list[tuple[int, str, str]]  # (the queue's index in the fleet, id, token)
    wait_s: int
    max_n: int
    # the address the connections come from (None: the system's choice): the ephemeral ports
    # (32768-60999) are per source address and destination, ~28,000 connections each
    source: str | None = None


@dataclass
class Fleet:
    """One client process's polls while they run: progress for the bench, and what they saw."""

    share: Share
    progress: Any  # a multiprocessing RawArray('q', SLOTS)
    received: list[tuple[str, int, int]] = field(default_factory=list)  # (message id, queue index, ns)
    issued: dict[int, float] = field(default_factory=dict)  # queue index -> its open poll's send (monotonic)
    errors: Counter[str] = field(default_factory=Counter)
    samples: dict[str, str] = field(default_factory=dict)  # the first message of each error kind
    empty: int = 0
    overdue: int = 0
    longest_s: float = 0.0

    def __post_init__(self) -> None:
        self.connecting = asyncio.Semaphore(CONNECTING)

    def failed(self, kind: str, what: object) -> None:
        self.errors[kind] += 1
        self.samples.setdefault(kind, str(what)[:300])
        self.progress[ERRORS] += 1

    async def run(self, stop: asyncio.Future[None]) -> None:
        """Every queue's poll until `stop` is done; then every connection is closed."""
        tasks = [asyncio.create_task(self.poll_queue(*q)) for q in self.share.queues]
        try:
            await stop
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _connect(self, i: int, get: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A new connection with queue i's poll sent on it (a bounded number opened at once)."""
        async with self.connecting:
            s = self.share
            source = (s.source, 0) if s.source else None
            reader, writer = await asyncio.open_connection(s.host, s.port, local_addr=source)
            self.issued[i] = time.monotonic()
            try:
                writer.write(get)
                await writer.drain()
            except BaseException:
                writer.close()
                raise
        return reader, writer

    async def poll_queue(self, i: int, queue: str, token: str) -> None:
        """Queue i's poll, again and again; a new connection when one fails or is closed."""
        s = self.share
        host = f"{s.host}:{s.port}"
        get = request("GET", f"/v1/queues/{queue}/messages?wait={s.wait_s}&max={s.max_n}", host, token)
        parked = False
        while True:
            try:
                reader, writer = await self._connect(i, get)
            except OSError as exc:
                self.issued.pop(i, None)
                self.failed(f"connect {type(exc).__name__}", exc)
                await asyncio.sleep(RETRY_S)
                continue
            if not parked:
                parked = True
                self.progress[PARKED] += 1
            self.progress[OPEN] += 1
            try:
                await self._serve(i, f"/v1/queues/{queue}/ack", host, token, get, reader, writer)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ProtocolError,
                    ValueError, KeyError) as exc:
                self.failed(type(exc).__name__, exc)
                await asyncio.sleep(RETRY_S)
            finally:
                self.progress[OPEN] -= 1
                writer.close()

    async def _serve(self, i: int, ack_path: str, host: str, token: str, get: bytes,
                     reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Polls on one connection (its first poll already sent) until the server closes it."""
        while True:
            status, body, keep = await read_response(reader)
            arrived = time.time_ns()
            self._answered(i)
            if status != 200:
                self.failed(f"poll {status}", body[:300].decode("utf-8", "replace"))
                await asyncio.sleep(RETRY_S)
            elif body == EMPTY:
                self.empty += 1
            else:
                msgs = json.loads(body)["messages"]
                self.received += [(m["id"], i, arrived) for m in msgs]
                self.progress[MESSAGES] += len(msgs)
                if not keep:
                    return  # the receipts come back after the visibility timeout: counted as duplicates
                receipts = json.dumps({"receipts": [m["receipt"] for m in msgs]}).encode()
                writer.write(request("POST", ack_path, host, token, receipts))
                status, body, keep = await read_response(reader)
                if status != 204:
                    self.failed(f"ack {status}", body[:300].decode("utf-8", "replace"))
            if not keep:
                return
            self.issued[i] = time.monotonic()
            writer.write(get)
            await writer.drain()

    def _answered(self, i: int) -> None:
        took = time.monotonic() - self.issued.pop(i, time.monotonic())
        self.progress[ANSWERS] += 1
        self.longest_s = max(self.longest_s, took)
        if took > self.share.wait_s + OVERDUE_S:
            self.overdue += 1

    def result(self) -> dict[str, Any]:
        """What this process saw; polls still open count as overdue when older than wait + 1 s."""
        now = time.monotonic()
        ages = [now - t for t in self.issued.values()]
        late = [a for a in ages if a > self.share.wait_s + OVERDUE_S]
        return {"received": self.received, "answers": int(self.progress[ANSWERS]), "empty": self.empty,
                "overdue": self.overdue + len(late), "longest_s": round(max([self.longest_s, *ages]), 3),
                "open_at_close": len(ages), "errors": dict(self.errors), "error_samples": self.samples}


def raise_open_files() -> None:
    """This process's open-file limit up to its hard limit (which cannot be raised)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def client_main(share: Share, progress: Any, go: Any, stop: Any, out: Any) -> None:
    """A client process: ready, then (on `go`) park every poll of `share` and keep them until
    `stop`; then close every connection and put what it saw on `out`."""
    raise_open_files()

    async def main() -> dict[str, Any]:
        fleet = Fleet(share, progress)
        progress[READY] = 1
        await asyncio.to_thread(go.wait)
        stopped = asyncio.ensure_future(asyncio.to_thread(stop.wait))
        await fleet.run(stopped)
        return fleet.result()

    out.put(asyncio.run(main()))
