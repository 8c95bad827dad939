"""bluedove/gossip/grpc_transport.py on loopback gRPC servers in this process: envelopes travel
on one stream per peer, in order; a peer that is down loses what is sent meanwhile and gets
what is sent once it is back; a peer that serves only `Deliver` gets one call per envelope;
closing leaves nothing running."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from bluedove.gossip.grpc_transport import GossipServicer, GrpcTransport
from bluedove.gossip.messages import Envelope, Ping
from bluedove.store.server import free_port
from bluedove.v1 import gossip_pb2 as pb
from bluedove.v1 import gossip_pb2_grpc as pb_grpc


class Peer:
    """A gossip server that records what it receives and how (stream or unary)."""

    def __init__(self, port: int, stream: bool = True) -> None:
        self.port, self.stream = port, stream
        self.got: list[int] = []
        self.calls = {"Stream": 0, "Deliver": 0}
        self.server: grpc.aio.Server | None = None

    async def start(self) -> "Peer":
        self.server = grpc.aio.server()
        servicer = GossipServicer(lambda env: self.got.append(env.body.seq))
        handlers = {"Deliver": grpc.unary_unary_rpc_method_handler(
            self._counted("Deliver", servicer.Deliver), request_deserializer=pb.Envelope.FromString,
            response_serializer=pb.Delivered.SerializeToString)}
        if self.stream:
            handlers["Stream"] = grpc.stream_unary_rpc_method_handler(
                self._counted("Stream", servicer.Stream), request_deserializer=pb.Envelope.FromString,
                response_serializer=pb.Delivered.SerializeToString)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bluedove.v1.Gossip", handlers),))
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        await self.server.start()
        return self

    def _counted(self, name, method):
        async def handler(request, context):
            self.calls[name] += 1
            return await method(request, context)
        return handler

    async def stop(self) -> None:
        assert self.server is not None
        await self.server.stop(grace=None)


def ping(seq: int) -> Envelope:
    return Envelope("m1", "127.0.0.1:1", Ping(seq))


async def settle(cond, timeout_s: float = 30.0) -> None:
    for _ in range(int(timeout_s / 0.02)):
        if cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not reached in time: {cond}")


async def test_envelopes_travel_in_order_on_one_stream():
    peer = await Peer(free_port()).start()
    # Only the order is checked: a write that waits past the timeout drops what is queued (the
    # next test), and so does a lane past LANE_BOUND; 10 s here, and groups of 20 each let
    # through before the next, hold on a loaded machine.
    t = GrpcTransport(timeout_s=10.0)
    try:
        for i in range(200):
            t.send(f"127.0.0.1:{peer.port}", ping(i))
            if i % 20 == 19:
                await settle(lambda n=i + 1: len(peer.got) == n)
        assert peer.got == list(range(200))
        assert peer.calls == {"Stream": 1, "Deliver": 0}
    finally:
        await t.close()
        await peer.stop()


async def test_a_peer_down_loses_what_is_sent_meanwhile_and_gets_what_follows_once_back():
    port = free_port()
    t = GrpcTransport(timeout_s=0.3)
    addr = f"127.0.0.1:{port}"
    try:
        for i in range(5):
            t.send(addr, ping(i))  # nobody listens: lost, and no error reaches the sender
            await asyncio.sleep(0.05)
        peer = await Peer(port).start()
        try:
            seq = 100

            def sent_one_and_arrived() -> bool:
                nonlocal seq
                seq += 1
                t.send(addr, ping(seq))
                return bool(peer.got)

            await settle(sent_one_and_arrived)
            await settle(lambda: peer.got[-1] == seq)
            assert all(s > 100 for s in peer.got) and peer.got == sorted(peer.got)
            first_stream = peer.calls["Stream"]
            # The peer restarts: its stream breaks; what follows arrives on a new one.
            await peer.stop()
            peer.got.clear()
            peer = await Peer(port).start()
            await settle(sent_one_and_arrived)
            assert peer.calls["Stream"] >= 1 and first_stream >= 1
        finally:
            await peer.stop()
    finally:
        await t.close()


async def test_a_peer_serving_only_deliver_gets_a_call_per_envelope():
    peer = await Peer(free_port(), stream=False).start()
    t = GrpcTransport()
    try:
        for i in range(10):
            t.send(f"127.0.0.1:{peer.port}", ping(i))
            await asyncio.sleep(0.01)
        # What the refused stream held is lost (the first envelope, perhaps the second), as any
        # message may be; from then on each envelope is one Deliver call.
        await settle(lambda: peer.got[-1:] == [9])
        assert peer.got == list(range(10 - len(peer.got), 10)) and len(peer.got) >= 8
        assert peer.calls == {"Stream": 0, "Deliver": len(peer.got)}
    finally:
        await t.close()
        await peer.stop()


async def test_close_cancels_every_lane():
    peer = await Peer(free_port()).start()
    t = GrpcTransport()
    try:
        t.send(f"127.0.0.1:{peer.port}", ping(1))
        await settle(lambda: peer.got == [1])
        await t.close()
        lanes = [lane.task for lane in t._lanes.values()]
        assert lanes and all(task is not None and task.done() for task in lanes)
    finally:
        await peer.stop()


@pytest.mark.parametrize("n", [1000])
async def test_a_peer_that_stops_reading_costs_the_sender_a_bounded_queue(n):
    # Writes block once the stream's flow-control window is full; the lane then holds at most
    # LANE_BOUND envelopes and drops the rest, and sending never blocks.
    from bluedove.gossip.grpc_transport import LANE_BOUND

    t = GrpcTransport(timeout_s=0.2)
    port = free_port()
    try:
        for i in range(n):
            t.send(f"127.0.0.1:{port}", ping(i))
        lane = t._lanes[f"127.0.0.1:{port}"]
        assert lane.queue.qsize() <= LANE_BOUND
    finally:
        await t.close()


async def test_closing_the_servicer_ends_open_streams_so_a_server_stops_at_once():
    # A peer's stream never ends by itself: without `close`, stop(grace) waits out its grace.
    got: list[int] = []
    servicer = GossipServicer(lambda env: got.append(env.body.seq))
    server = grpc.aio.server()
    pb_grpc.add_GossipServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    t = GrpcTransport()
    try:
        t.send(f"127.0.0.1:{port}", ping(1))
        await settle(lambda: got == [1])
        servicer.close()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await server.stop(grace=30)
        assert loop.time() - started < 10  # not the 30 s grace
    finally:
        await t.close()
