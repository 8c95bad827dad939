"""Load processes of the delivery bench: publishers (PublishStream) and pollers (REST, max=100), plus CPU reading."""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass

import numpy as np

# Publisher pace (messages/s per process): PAUSED stops sending, FULL sends as fast as it can.
PAUSED = -1.0
FULL = 0.0
STREAM_CHUNK = 500  # messages per PublishStream call
POLL_MAX = 100  # what a poller asks for per poll (the max=100)


@dataclass
class Control:
    """Shared between the bench and one load process (multiprocessing primitives)."""

    rate: object  # Value('d'): publishers' pace, PAUSED, FULL or messages/s
    done: object  # Value('q'): messages stored (publisher) or deliveries acked (poller)
    active: object  # Value('i'): pollers poll while 1
    stop: object  # Event: finish (pollers drain their queues first when `drain` is set)
    drain: object  # Event
    ready: object  # Value('i'): processes of this kind that have started and connected
    polls: object = None  # Value('q'): polls made (pollers only)


class Pacer:
    """A paced sender's schedule: item j is due at start + j / rate (per item sent, `wait_s`
    says how long to sleep first). Time lost to a late wake-up or a full window is made up, up
    to MAKEUP_S of it; sleeping for what was left of each item's share alone fell ~20 % short
    of the rate on a busy machine. A new rate, or none (<= 0: full speed or paused), starts
    the schedule again."""

    MAKEUP_S = 1.0

    def __init__(self) -> None:
        self._due: float | None = None
        self._rate = 0.0

    def wait_s(self, rate: float, per_item: float, now: float) -> float:
        """Seconds to sleep after sending one item of `per_item` units at `rate` units/s."""
        if rate <= 0:
            self._due = None
            return 0.0
        if self._due is None or rate != self._rate:
            self._due, self._rate = now, rate
        self._due = max(self._due + per_item / rate, now - self.MAKEUP_S)
        return max(0.0, self._due - now)


def _ready(ctl: Control) -> None:
    with ctl.ready.get_lock():
        ctl.ready.value += 1


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- publishers --------------------------------------------------------------------------------
def publisher_main(target: str, names: list[str], seed: int, index: int, ctl: Control, results) -> None:
    """Stream uniform messages to the PubSub gRPC API at the pace `ctl.rate` asks for; at the
    end send back (ids, points) of every message the service accepted."""
    import grpc

    from bluedove.v1 import pubsub_pb2 as pb
    from bluedove.v1 import pubsub_pb2_grpc as pb_grpc

    rng = np.random.default_rng([seed, 100, index])
    ids: list[str] = []
    points: list[np.ndarray] = []
    error = None
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.PubSubStub(channel)
        _ready(ctl)
        while not ctl.stop.is_set():
            rate = ctl.rate.value
            if rate == PAUSED:
                time.sleep(0.02)
                continue
            t0 = time.monotonic()
            pts = rng.uniform(0.0, 1000.0, (STREAM_CHUNK, len(names)))
            msgs = [pb.Message(attributes=dict(zip(names, row)), payload=f'{{"n":{len(ids) + j}}}')
                    for j, row in enumerate(pts.tolist())]
            try:
                reply = stub.PublishStream(iter(msgs), timeout=60)
            except grpc.RpcError as exc:
                error = f"PublishStream failed: {exc.code().name} {exc.details()}"
                break
            ids += reply.ids
            points.append(pts)
            with ctl.done.get_lock():
                ctl.done.value += len(reply.ids)
            if rate > 0:  # paced: one chunk every STREAM_CHUNK / rate seconds
                time.sleep(max(0.0, STREAM_CHUNK / rate - (time.monotonic() - t0)))
    results.put(("publisher", index, {"ids": ids, "points": np.vstack(points) if points else None, "error": error}))


# -- feeders: the dispatchers' one hop, without the public API -------------------------------
def feeder_main(table_json: dict, seed: int, index: int, ctl: Control, results, inflight: int = 4,
                prebuild: int = 0) -> None:
    """Send uniform messages straight to the matchers' Forward (as a dispatcher does: one
    candidate per message, here each dimension's owner in turn), at the pace `ctl.rate` asks
    for; at the end send back (ids, points) of every message the matchers stored.

    The first `prebuild` messages are built and serialized before the feeder reports ready, as
    a load generator prepares its requests: while they last, the feeder's CPU goes to sending
    only and the machine's to the matchers and Redis under test. Past them it builds as it sends."""
    out = asyncio.run(_feed(table_json, seed, index, ctl, inflight, prebuild))
    results.put(("feeder", index, out))


async def _feed(table_json: dict, seed: int, index: int, ctl: Control, inflight: int, prebuild: int) -> dict:
    import collections

    import grpc

    from bluedove.segments import SegmentTable
    from bluedove.v1 import matcher_pb2 as pb

    table = SegmentTable.from_json(table_json)
    names = list(table.space.names)
    k = len(names)
    # The stored message JSON, {id, attributes, payload, published_at}, by formatting rather than
    # json.dumps of a dict per message (most of a feeder's CPU): ids and the timestamp need no
    # escaping, and a float's repr is JSON (json.dumps writes the same text).
    template = ('{"id":"%s","attributes":{' + ",".join(f"{json.dumps(n)}:%r" for n in names)
                + '},"payload":{"n":%d},"published_at":"%s"}')
    rng = np.random.default_rng([seed, 300, index])
    prefix = f"f{index}-{os.getpid()}-"
    channels = {m: grpc.aio.insecure_channel(a) for m, a in table.members.items()}
    # Requests go out already serialized (the pool's), so the call takes bytes as they are.
    forward = {m: ch.unary_unary("/bluedove.v1.Matcher/Forward", request_serializer=None,
                                 response_deserializer=pb.ForwardReply.FromString) for m, ch in channels.items()}
    ids: list[str] = []
    points: list[np.ndarray] = []
    error = None
    sem = asyncio.Semaphore(inflight)
    tasks: set[asyncio.Task] = set()
    seq = 0
    built_live = 0

    def chunk() -> tuple[list[str], np.ndarray, dict[str, bytes]]:
        """STREAM_CHUNK messages as one serialized request per matcher, one part per dimension
        (a dispatcher's lane)."""
        nonlocal seq
        pts = rng.uniform(0.0, 1000.0, (STREAM_CHUNK, k))
        groups: dict[str, dict[int, list]] = {}
        mids = []
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for row in pts.tolist():
            mid = f"{prefix}{seq:x}"
            d = seq % k
            seq += 1
            body = (template % (mid, *row, seq, now)).encode()
            groups.setdefault(table.owner_at(d, row[d]), {}).setdefault(d, []).append(
                pb.ForwardMessage(id=mid, point=row, body=body, client_id=False))
            mids.append(mid)
        reqs = {}
        for m, by_dim in groups.items():
            (d, msgs), *more = by_dim.items()
            reqs[m] = pb.ForwardRequest(dimension=d, messages=msgs, epoch=table.epoch, parts=[
                pb.ForwardPart(dimension=d2, messages=ms) for d2, ms in more]).SerializeToString()
        return mids, pts, reqs

    pool = collections.deque(chunk() for _ in range(-(-prebuild // STREAM_CHUNK)))
    _ready(ctl)

    async def send(mids: list[str], pts: np.ndarray, reqs: dict[str, bytes]) -> None:
        nonlocal error
        try:
            await asyncio.gather(*(forward[m](body, timeout=60) for m, body in reqs.items()))
            ids.extend(mids)
            points.append(pts)
            with ctl.done.get_lock():
                ctl.done.value += len(mids)
        except grpc.aio.AioRpcError as exc:
            error = f"Forward failed: {exc.code().name} {exc.details()}"
        finally:
            sem.release()

    pacer = Pacer()
    while not ctl.stop.is_set() and error is None:
        rate = ctl.rate.value
        if rate == PAUSED:
            pacer.wait_s(0.0, 0, time.monotonic())  # a pause ends the schedule
            await asyncio.sleep(0.02)
            continue
        if pool:
            mids, pts, reqs = pool.popleft()
        else:
            mids, pts, reqs = chunk()
            if rate == FULL:  # a phase at full speed that waited on building
                built_live += len(mids)
        await sem.acquire()
        task = asyncio.get_running_loop().create_task(send(mids, pts, reqs))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        if (pause := pacer.wait_s(rate, len(mids), time.monotonic())) > 0:
            await asyncio.sleep(pause)
    await asyncio.gather(*tasks)
    for ch in channels.values():
        await ch.close()
    return {"ids": ids, "points": np.vstack(points) if points else None, "error": error, "built_live": built_live}


# -- pollers -----------------------------------------------------------------------------------
def poller_main(url: str, queues: list[tuple[str, str]], sample: set[str], concurrency: int, ctl: Control,
                results, interval: float = 0.0) -> None:
    """Poll (max=100, no wait) and ack `queues` with `concurrency` connections while
    `ctl.active`, each connection polling each of its queues once per `interval` seconds (0:
    as fast as it can); on `stop` with `drain`, empty them first, unpaced. Sends back the
    sampled deliveries."""
    out = asyncio.run(_poll_all(url, queues, sample, concurrency, ctl, interval))
    results.put(("poller", os.getpid(), out))


class _Conn:
    """One keep-alive HTTP/1.1 connection: the least client work per request, so that the
    pollers' CPU measures polling rather than an HTTP library (the service sees ordinary
    requests; responses carry Content-Length)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, token: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        for _ in range(2):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            try:
                self.writer.write(head)
                status_line = await self.reader.readline()
            except ConnectionError:
                status_line = b""
            if status_line:
                break
            # Closed before answering: the server drops a keep-alive connection idle for a few
            # seconds (uvicorn: 5), as a paced connection is between passes. Again on a new one.
            self.close()
        else:
            raise ConnectionError(f"{self.host}:{self.port} closed the connection twice without answering")
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        data = await self.reader.readexactly(length) if length else b""
        return int(status_line.split()[1]), data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


async def _until(ctl: Control, at: float) -> None:
    """Sleep until monotonic time `at`, or less once `ctl.stop` is set (the final drain
    starts within half a second)."""
    while (left := at - time.monotonic()) > 0 and not ctl.stop.is_set():
        await asyncio.sleep(min(left, 0.5))


async def _poll_all(url: str, queues: list[tuple[str, str]], sample: set[str], concurrency: int, ctl: Control,
                    interval: float = 0.0) -> dict:
    from urllib.parse import urlsplit

    seen: list[tuple[str, str, list[str]]] = []
    errors: list[str] = []
    acked = 0
    where = urlsplit(url)
    conns = [_Conn(where.hostname, where.port) for _ in range(concurrency)]

    async def one_pass(conn: _Conn, share: list[tuple[str, str]]) -> int | None:
        """Poll and ack each queue of `share` once; deliveries acked, or None after a failed request."""
        nonlocal acked
        got_any = 0
        for q, tok in share:
            status, data = await conn.request("GET", f"/v1/queues/{q}/messages?max={POLL_MAX}&wait=0", tok)
            if status != 200:
                errors.append(f"poll {status}: {data[:200]!r}")
                return None
            with ctl.polls.get_lock():
                ctl.polls.value += 1
            msgs = json.loads(data)["messages"]
            if not msgs:
                continue
            body = json.dumps({"receipts": [m["receipt"] for m in msgs]}).encode()
            status, data = await conn.request("POST", f"/v1/queues/{q}/ack", tok, body)
            if status != 204:
                errors.append(f"ack {status}: {data[:200]!r}")
                return None
            got_any += len(msgs)
            if q in sample:
                seen.extend((q, m["id"], m["subscriptions"]) for m in msgs)
            acked += len(msgs)
            with ctl.done.get_lock():
                ctl.done.value += len(msgs)
        return got_any

    async def worker(conn: _Conn, share: list[tuple[str, str]], phase: float) -> None:
        """Pass after pass over `share`, paced like a fleet of phones that each poll their queue
        every `interval` seconds: a pass done early waits until `interval` after its start; one
        that falls behind (the service is the bottleneck) is followed at once. Within a pass the
        polls go back to back; each connection's passes are offset by `phase` of an interval,
        so that the connections, not in step, make an even load together."""
        empty_pass = 0
        start = None
        while True:
            if ctl.stop.is_set() and (not ctl.drain.is_set() or empty_pass >= 2):
                return
            if not running.is_set():
                await running.wait()
                start = None  # paused: the next pass begins afresh
                continue
            # The first pass begins at once (the drain phase measures from then) but counts as
            # begun `phase` of an interval ago: the offset shows from the second pass on.
            now = time.monotonic()
            start = now - phase * interval if start is None else max(now, start + interval)
            try:
                got_any = await one_pass(conn, share)
            except (OSError, asyncio.IncompleteReadError) as exc:  # ConnectionError is an OSError
                errors.append(f"connection failed: {exc!r}")
                return
            if got_any is None:
                return
            empty_pass = 0 if got_any else empty_pass + 1
            if not got_any:
                await asyncio.sleep(0.05)
            if interval:
                await _until(ctl, start + interval)

    # One watcher per process looks at the shared flags; paused connections wait on it. (Each
    # of 128 connections looking every 20 ms cost a poller 5 % of a core while paused, taken
    # from the phases that measure writing.)
    running = asyncio.Event()

    async def watch() -> None:
        while True:
            if ctl.active.value or ctl.stop.is_set():
                running.set()
            else:
                running.clear()
            await asyncio.sleep(0.02)

    shares = [queues[i::concurrency] for i in range(concurrency)]
    watcher = asyncio.get_running_loop().create_task(watch())
    _ready(ctl)
    try:
        await asyncio.gather(*(worker(c, s, i / concurrency) for i, (c, s) in enumerate(zip(conns, shares)) if s))
    finally:
        watcher.cancel()
        for c in conns:
            c.close()
    return {"seen": seen, "acked": acked, "errors": errors[:5]}
