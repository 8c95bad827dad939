"""`bench latency`'s clients: a paced publisher (its own process) whose messages carry their send
time, and subscribers that keep a long-poll (or a gRPC `Listen` stream) open on every queue.

Clocks: every timestamp is `time.time_ns()` (CLOCK_REALTIME, one clock for every process of one
machine), as are the dispatcher's `published_at` and Redis's stream entry ids (a receipt is
`<ms>-<seq>`: when the delivery was stored, to the millisecond).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import time
from dataclasses import dataclass, field
from datetime import datetime

import httpx

from bluedove.client.errors import BlueDoveError
from bluedove.client.http import AsyncHttpTransport, decode
from bluedove.lab.bench.fleet_client import ProtocolError, read_response, request
from bluedove.lab.load import Pacer, pool

T_MARK = "@T@"  # where a message's send time goes in its prepared JSON
K_MARK = "@K@"  # where its number goes
LISTEN_WAIT_S = 20  # a REST subscriber's long-poll (the API's longest)
POLL_MAX = 100
LISTENERS_PER_POOL = 4  # REST subscribers sharing one httpx pool (one connection each)
STREAMS_PER_CHANNEL = 50  # gRPC Listen streams sharing one channel
PUBLISH_INFLIGHT = 32


def message_json(point: list[float], names: tuple[str, ...]) -> str:
    """A message at `point` as the API's JSON, its payload {"k", "t"} with K_MARK and T_MARK where
    its number and send time go."""
    attrs = json.dumps(dict(zip(names, point)), separators=(",", ":"))
    return f'{{"attributes":{attrs},"payload":{{"k":{K_MARK},"t":{T_MARK}}}}}'


# -- the publisher -------------------------------------------------------------------------------
def publisher(url: str, rate: float, batch: int, warmup_s: float, duration_s: float, messages: list[str],
              k0: int, out: mp.Queue) -> None:
    """Publish messages k0, k0 + 1, … (message k: `messages[k % len(messages)]`, message_json's)
    at `rate` msg/s for warmup_s + duration_s, `batch` a request (1: POST /v1/messages, else
    /v1/messages:batch); puts
    {"sends": [(k of the first, n, sent ns, answered ns or 0, warm-up?)], "skipped", "cpu_s"}."""

    async def main() -> dict:
        transport = pool(url, PUBLISH_INFLIGHT)
        sends: list[tuple[int, int, int, int, bool]] = []
        pacer, tasks = Pacer(), set()
        skipped, j = 0, k0
        path = "/v1/messages" if batch == 1 else "/v1/messages:batch"
        start = time.monotonic()

        async def one(k: int, n: int, warm: bool) -> None:
            t0 = time.time_ns()
            stamp = str(t0)
            texts = [messages[(k + i) % len(messages)].replace(K_MARK, str(k + i)).replace(T_MARK, stamp)
                     for i in range(n)]
            body = texts[0] if batch == 1 else '{"messages":[' + ",".join(texts) + "]}"
            try:
                r = await transport.h.post(path, content=body, headers={"Content-Type": "application/json"})
                decode(r.status_code, r.content, r.reason_phrase)
                sends.append((k, n, t0, time.time_ns(), warm))
            except (BlueDoveError, httpx.HTTPError):
                sends.append((k, n, t0, 0, warm))

        try:
            while (now := time.monotonic()) - start < warmup_s + duration_s:
                if len(tasks) >= PUBLISH_INFLIGHT:
                    skipped += batch
                else:
                    task = asyncio.get_running_loop().create_task(one(j, batch, now - start < warmup_s))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                j += batch
                await asyncio.sleep(pacer.wait_s(rate, batch, time.monotonic()))
            await asyncio.gather(*tasks)
        finally:
            await transport.close()
        return {"sends": sends, "skipped": skipped, "next_k": j, "elapsed_s": time.monotonic() - start}

    res = asyncio.run(main())
    res["cpu_s"] = time.process_time()
    out.put(res)


# -- the subscribers -----------------------------------------------------------------------------
@dataclass
class Received:
    """One delivery as a subscriber got it (ns, but `stored_ms`)."""

    queue: int
    k: int
    sent: int  # the publisher's time.time_ns() just before its request
    accepted: int  # the dispatcher's published_at
    stored_ms: int  # Redis's stream entry time (ms)
    issued: int  # the poll that brought it was sent (REST); the stream's previous message (gRPC)
    before: int  # the subscriber's previous poll answered (REST; 0: none); = issued (gRPC)
    answered: int  # the poll's answer was read whole (REST); the message came off the stream (gRPC)
    decoded: int  # its JSON decoded


class Acks:
    """One Listen stream's acks: one Ack call in flight at a time, carrying every receipt that
    arrived while the last was out. (An Ack call per delivery would send thousands at once
    when 200 streams bring 100 deliveries each: past the gRPC server's backlog of calls its
    event loop has not yet taken, grpc cancels the excess, status CANCELLED.)"""

    def __init__(self, send) -> None:
        self.send = send  # async (receipts) -> None
        self.waiting: list[str] = []
        self.task: asyncio.Task | None = None

    def add(self, receipt: str) -> None:
        self.waiting.append(receipt)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self.waiting:
            receipts, self.waiting = self.waiting, []
            await self.send(receipts)
        self.task = None


class RawAcker:
    """One queue's acks on a keep-alive connection of their own (the raw HTTP/1.1 of
    bluedove/lab/bench/fleet_client.py), opened at the first ack and again after a failure."""

    def __init__(self, host: str, port: int, queue: str, token: str, failed) -> None:
        self.host, self.port, self.token, self.failed = host, port, token, failed
        self.path = f"/v1/queues/{queue}/ack"
        self.conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def send(self, receipts: list[str]) -> None:
        body = json.dumps({"receipts": receipts}).encode()
        try:
            if self.conn is None:
                self.conn = await asyncio.open_connection(self.host, self.port)
            reader, writer = self.conn
            writer.write(request("POST", self.path, f"{self.host}:{self.port}", self.token, body))
            status, answer, keep = await read_response(reader)
            if status != 204:
                raise ProtocolError(f"ack answered {status}: {answer[:200]!r}")
            if not keep:
                self.close()
        except (OSError, asyncio.IncompleteReadError, ProtocolError) as exc:
            self.failed("ack", exc)
            self.close()

    def close(self) -> None:
        if self.conn is not None:
            self.conn[1].close()
            self.conn = None


@dataclass
class Subscribers:
    """Every queue's subscriber while running: REST long-polls (a new one as soon as the last
    answered) or gRPC Listen streams; each answer acked by a task of its own (a stream's acks
    batched, `Acks`), so that the next read does not wait for the ack. `recording` off:
    deliveries are acked, not kept. `stream_ends`: Listen streams that ended though the bench
    did not end them, by status (each is opened again). `raw`: the long-polls written as raw
    HTTP/1.1 on asyncio streams (a keep-alive connection for a queue's polls, one for its acks)
    instead of the SDK's httpx transport, whose ~0.3 ms of CPU a call made the subscribers'
    process the busiest on 2 cores (a phone's client costs the service nothing)."""

    url: str
    queues: list[tuple[str, str]]
    grpc_url: str | None = None  # Listen streams instead of long-polls
    recording: bool = False
    raw: bool = False
    got: list[Received] = field(default_factory=list)
    gaps_ns: list[int] = field(default_factory=list)  # REST: answer read -> next poll sent
    errors: dict[str, int] = field(default_factory=dict)  # failed calls, by call and kind
    error_samples: dict[str, str] = field(default_factory=dict)  # the first message of each kind
    stream_ends: dict[str, int] = field(default_factory=dict)
    last_delivery: float = 0.0  # time.monotonic() of the newest delivery

    async def sync(self) -> None:
        """(In the bench's own process `got` is current: nothing to fetch.)"""

    async def run(self) -> None:
        """Until cancelled."""
        tasks: list[asyncio.Task] = []
        transports: list = []
        try:
            per = STREAMS_PER_CHANNEL if self.grpc_url else LISTENERS_PER_POOL
            raw = self.raw and not self.grpc_url
            for i, (q, token) in enumerate(self.queues):
                if raw:
                    tasks.append(asyncio.create_task(self._raw_long_poll(i, q, token)))
                    continue
                if i % per == 0:
                    transports.append(self._transport(per))
                read = self._stream if self.grpc_url else self._long_poll
                tasks.append(asyncio.create_task(read(transports[-1], i, q, token)))
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for t in transports:
                await t.close()

    def _transport(self, per: int):
        if self.grpc_url:
            from bluedove.client.grpc_transport import AsyncGrpcTransport

            return AsyncGrpcTransport(self.grpc_url, 30.0)
        # a connection per long-poll, as many for acks: one pool of 16 for every subscriber's
        # acks spent the bench's core in httpcore's search of its queued requests (1,000 queues)
        return pool(self.url, 2 * per, timeout_s=30.0)

    def _failed(self, call: str, exc: Exception) -> None:
        kind = f"{call} {type(exc).__name__}"
        self.errors[kind] = self.errors.get(kind, 0) + 1
        self.error_samples.setdefault(kind, str(exc)[:300])

    def _keep(self, i: int, msgs: list[dict], before: int, issued: int, answered: int, decoded: int) -> None:
        if msgs:
            self.last_delivery = time.monotonic()
        for m in msgs:
            p = m.get("payload")
            if not (self.recording and isinstance(p, dict) and "t" in p):
                continue  # the saturation search's
            at = datetime.fromisoformat(m["published_at"].replace("Z", "+00:00"))
            self.got.append(Received(i, p["k"], p["t"], round(at.timestamp() * 1e6) * 1000,
                                     int(m["receipt"].split("-")[0]), issued, before, answered, decoded))

    def _ack(self, acks, q: str, token: str, msgs: list[dict]) -> None:
        asyncio.get_running_loop().create_task(self._ack_now(acks, q, token, [m["receipt"] for m in msgs]))

    async def _ack_now(self, acks, q: str, token: str, receipts: list[str]) -> None:
        try:
            await acks.ack(q, token, receipts)
        except BlueDoveError as exc:
            self._failed("ack", exc)

    async def _long_poll(self, t: AsyncHttpTransport, i: int, q: str, token: str) -> None:
        path, auth = f"/v1/queues/{q}/messages", {"Authorization": f"Bearer {token}"}
        params = {"max": POLL_MAX, "wait": LISTEN_WAIT_S}
        answered = 0
        while True:
            issued, before = time.time_ns(), answered
            if answered:
                self.gaps_ns.append(issued - answered)
            try:
                r = await t.h.get(path, params=params, headers=auth)
                answered = time.time_ns()
                msgs = decode(r.status_code, r.content, r.reason_phrase)["messages"]
            except (BlueDoveError, httpx.HTTPError) as exc:
                self._failed("poll", exc)
                answered = 0
                await asyncio.sleep(0.2)
                continue
            self._keep(i, msgs, before, issued, answered, time.time_ns())
            if msgs:
                self._ack(t, q, token, msgs)

    async def _raw_long_poll(self, i: int, q: str, token: str) -> None:
        """Queue `q`'s long-polls, one after another on a keep-alive connection (a new one
        after a failure), each answer's receipts acked on the queue's other connection."""
        u = httpx.URL(self.url)
        host, port = u.host, u.port or 80
        get = request("GET", f"/v1/queues/{q}/messages?max={POLL_MAX}&wait={LISTEN_WAIT_S}", f"{host}:{port}", token)
        acker = RawAcker(host, port, q, token, self._failed)
        acks = Acks(acker.send)
        answered = 0
        try:
            while True:
                try:
                    reader, writer = await asyncio.open_connection(host, port)
                except OSError as exc:
                    self._failed("connect", exc)
                    await asyncio.sleep(0.2)
                    continue
                try:
                    answered = await self._raw_polls(i, get, reader, writer, acks, answered)
                except (OSError, asyncio.IncompleteReadError, ProtocolError, ValueError) as exc:
                    self._failed("poll", exc)
                    answered = 0
                    await asyncio.sleep(0.2)
                finally:
                    writer.close()
        finally:
            acker.close()

    async def _raw_polls(self, i: int, get: bytes, reader, writer, acks: Acks, answered: int) -> int:
        """Polls on one connection until the server closes it: the last answer's time."""
        while True:
            issued, before = time.time_ns(), answered
            if answered:
                self.gaps_ns.append(issued - answered)
            writer.write(get)
            status, body, keep = await read_response(reader)
            answered = time.time_ns()
            if status != 200:
                raise ProtocolError(f"poll answered {status}: {body[:200]!r}")
            msgs = json.loads(body)["messages"]
            self._keep(i, msgs, before, issued, answered, time.time_ns())
            for m in msgs:
                acks.add(m["receipt"])
            if not keep:
                return answered

    async def _stream(self, t, i: int, q: str, token: str) -> None:
        """Queue `q`'s Listen stream, read with the SDK's transport (its channel, its decoding)
        from the stub, so that an end is seen with its status: the SDK's `listen` ends quietly
        on CANCELLED. The bench's own cancel ends it with CancelledError, not counted."""
        import grpc

        from bluedove.client.grpc_messages import delivery_json
        from bluedove.v1 import pubsub_pb2 as pb

        acks = Acks(lambda receipts: self._ack_now(t, q, token, receipts))
        auth = (("authorization", f"Bearer {token}"),)
        while True:
            call = t.stub.Listen(pb.ListenRequest(queue=q, max=POLL_MAX), metadata=auth)
            status = "OK"
            try:
                prev = time.time_ns()
                async for d in call:
                    m = delivery_json(d)
                    now = time.time_ns()
                    self._keep(i, [m], prev, prev, now, now)
                    acks.add(m["receipt"])
                    prev = now
            except grpc.RpcError as exc:
                status = exc.code().name
            finally:
                call.cancel()
            self.stream_ends[status] = self.stream_ends.get(status, 0) + 1
            await asyncio.sleep(0.2)
