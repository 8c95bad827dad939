"""Gossip over gRPC: envelopes as unary `Gossip.Deliver` calls on the matchers' own servers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

from bluedove.gossip import wire
from bluedove.gossip.messages import Envelope
from bluedove.runtime import tls
from bluedove.v1 import gossip_pb2 as pb
from bluedove.v1 import gossip_pb2_grpc as pb_grpc


class GrpcTransport:
    """Fire-and-forget sends; a failed or slow call is a lost message (the protocol copes)."""

    def __init__(self, timeout_s: float = 0.5, tls_files: tls.TlsFiles | None = None) -> None:
        self.timeout_s = timeout_s
        self.tls = tls_files  # the process's TLS settings (mutual TLS with a CA)
        self.bytes_sent = 0
        self.sent = 0
        self._stubs: dict[str, tuple[grpc.aio.Channel, pb_grpc.GossipStub]] = {}
        self._inflight: set[asyncio.Task[None]] = set()

    def send(self, addr: str, envelope: Envelope) -> None:
        msg = wire.to_proto(envelope)
        self.bytes_sent += msg.ByteSize()
        self.sent += 1
        task = asyncio.get_running_loop().create_task(self._send(addr, msg))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _send(self, addr: str, msg: pb.Envelope) -> None:
        cached = self._stubs.get(addr)
        if cached is None:
            ch = tls.aio_channel(addr, self.tls, options=[("grpc.initial_reconnect_backoff_ms", 100),
                                                        ("grpc.max_reconnect_backoff_ms", 1000)])
            cached = self._stubs[addr] = (ch, pb_grpc.GossipStub(ch))
        try:
            await cached[1].Deliver(msg, timeout=self.timeout_s)
        except (grpc.aio.AioRpcError, asyncio.TimeoutError):
            pass

    async def close(self) -> None:
        for t in list(self._inflight):
            t.cancel()
        for ch, _ in self._stubs.values():
            await ch.close(grace=None)


class GossipServicer(pb_grpc.GossipServicer):
    """Thin decode-and-dispatch: every envelope goes to one callback."""

    def __init__(self, on_envelope: Callable[[Envelope], None]) -> None:
        self.on_envelope = on_envelope

    async def Deliver(self, request: pb.Envelope,
                      context: grpc.aio.ServicerContext[pb.Envelope, pb.Delivered]) -> pb.Delivered:
        self.on_envelope(wire.from_proto(request))
        return pb.Delivered()
