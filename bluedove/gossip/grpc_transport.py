"""Gossip over gRPC: envelopes written on one long-lived `Gossip.Stream` call per peer, on the
matchers' and dispatchers' own servers.

A unary call per envelope cost each side ~1 ms of CPU, and a round sends to several peers
every 0.2 s: an idle 5-process cluster spent ~5 % of a core per process on gossip alone. A
write on an open stream costs a fraction of that. Semantics stay those of one-way messages: a
send never waits, and an envelope that cannot be written soon (the peer is down, its stream
broke, or it stopped reading) is lost, as the protocol expects of any message. A peer that
answers UNIMPLEMENTED (an earlier version) gets one `Deliver` call per envelope instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from bluedove.gossip import wire
from bluedove.gossip.messages import Envelope
from bluedove.runtime import tls
from bluedove.runtime.open_streams import OpenStreams
from bluedove.v1 import gossip_pb2 as pb
from bluedove.v1 import gossip_pb2_grpc as pb_grpc

LANE_BOUND = 64  # envelopes waiting for one peer's stream; more are lost (the peer is not reading)
BROKEN = (grpc.aio.AioRpcError, asyncio.TimeoutError, asyncio.InvalidStateError, grpc.aio.UsageError)


class _Lane:
    """One peer's envelopes: a bounded queue, written by one task onto an open stream call."""

    def __init__(self, stub: pb_grpc.GossipStub, timeout_s: float) -> None:
        self.stub, self.timeout_s = stub, timeout_s
        self.queue: asyncio.Queue[pb.Envelope] = asyncio.Queue(LANE_BOUND)
        self.unary = False  # the peer serves Deliver only
        self.task: asyncio.Task[None] | None = None

    def offer(self, msg: pb.Envelope) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(msg)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            if self.unary:
                await self._deliver(await self.queue.get())
            else:
                await self._stream()

    async def _deliver(self, msg: pb.Envelope) -> None:
        with contextlib.suppress(*BROKEN):
            await self.stub.Deliver(msg, timeout=self.timeout_s)

    async def _stream(self) -> None:
        """Open a call at the next envelope and write to it until it breaks: the envelope being
        written is lost, and so is what waited meanwhile longer than the timeout allows."""
        msg = await self.queue.get()
        call: Any = self.stub.Stream()
        try:
            while True:
                await self._write(call, msg)
                msg = await self.queue.get()
        except BROKEN:
            self.unary = await _unimplemented(call)
            if self.unary:
                await self._deliver(msg)
        finally:
            call.cancel()  # (also what ends a write still pending when this task is cancelled)
        self._drop_stale()

    async def _write(self, call: Any, msg: pb.Envelope) -> None:
        """One write, given up after the timeout. (Not `asyncio.wait_for`: on a timeout or a
        cancel it waits for the write to end, and a write blocked on a peer that stopped reading
        ends only when the call is cancelled.)"""
        write = asyncio.ensure_future(call.write(msg))
        write.add_done_callback(_retrieved)
        done, _ = await asyncio.wait((write,), timeout=self.timeout_s)
        if not done:
            raise asyncio.TimeoutError
        write.result()

    def _drop_stale(self) -> None:
        """After a broken stream, what waited is older than a round: lost, as a late message."""
        while not self.queue.empty():
            self.queue.get_nowait()


def _retrieved(write: asyncio.Future[Any]) -> None:
    """Take a write's outcome, so that one left behind by a broken call logs nothing."""
    if not write.cancelled():
        write.exception()


async def _unimplemented(call: Any) -> bool:
    """Whether a broken call ended because the peer does not serve Stream."""
    if not call.done():
        return False
    try:
        return bool(await call.code() == grpc.StatusCode.UNIMPLEMENTED)
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 (a call that ended any other way: not that)
        return False


class GrpcTransport:
    """Fire-and-forget sends, one stream per peer; a failed or slow write is a lost message
    (the protocol copes)."""

    def __init__(self, timeout_s: float = 0.5, tls_files: tls.TlsFiles | None = None) -> None:
        self.timeout_s = timeout_s
        self.tls = tls_files  # the process's TLS settings (mutual TLS with a CA)
        self.bytes_sent = 0
        self.sent = 0
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._lanes: dict[str, _Lane] = {}
        self._last: tuple[object, pb.Envelope] | None = None  # the last body sent, encoded

    def send(self, addr: str, envelope: Envelope) -> None:
        # A round's push goes to several peers as one body: encoded once (the sender is ours)
        if self._last is not None and self._last[0] is envelope.body:
            msg = self._last[1]
        else:
            msg = wire.to_proto(envelope)
            self._last = (envelope.body, msg)
        self.bytes_sent += msg.ByteSize()
        self.sent += 1
        lane = self._lanes.get(addr)
        if lane is None:
            ch = self._channels[addr] = tls.aio_channel(addr, self.tls, options=[
                ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 1000)])
            lane = self._lanes[addr] = _Lane(pb_grpc.GossipStub(ch), self.timeout_s)
        lane.offer(msg)

    async def close(self) -> None:
        tasks = [lane.task for lane in self._lanes.values() if lane.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ch in self._channels.values():
            await ch.close(grace=None)


class GossipServicer(pb_grpc.GossipServicer):
    """Thin decode-and-dispatch: every envelope goes to one callback. `close` ends the peers'
    open streams, which would otherwise hold the server's stop for its whole grace period."""

    def __init__(self, on_envelope: Callable[[Envelope], None]) -> None:
        self.on_envelope = on_envelope
        self._streams = OpenStreams()

    async def Deliver(self, request: pb.Envelope,
                      context: grpc.aio.ServicerContext[pb.Envelope, pb.Delivered]) -> pb.Delivered:
        self.on_envelope(wire.from_proto(request))
        return pb.Delivered()

    async def Stream(self, request_iterator: AsyncIterator[pb.Envelope],
                     context: grpc.aio.ServicerContext[pb.Envelope, pb.Delivered]) -> pb.Delivered:
        async for request in self._streams.requests(context, request_iterator):
            self.on_envelope(wire.from_proto(request))
        return pb.Delivered()

    def close(self) -> None:
        """End every open stream (its sender sees it break and opens another, elsewhere)."""
        self._streams.close()
