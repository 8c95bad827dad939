"""bluedove/dispatcher/publish/forward_stream.py against the matcher's real servicer on loopback
gRPC servers in this process (the matcher behind it a stand-in that records what it matches):
calls share one stream and are served at once, each answered by its number; a refused call
fails alone with the status the unary call ends with; a call not answered in time fails alone;
a restarted matcher is reached on a new stream; a matcher serving only the unary call gets
unary calls; closing the servicer ends the open streams so the server stops at once."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from bluedove.dispatcher.publish.forward_stream import ForwardStream
from bluedove.matcher.errors import Busy, NotOwner
from bluedove.matcher.servicer import MatcherServicer
from bluedove.store.server import free_port
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc


class Stand:
    """What the servicer calls: `forward` answers matched = the request's epoch, refusing,
    stalling or waiting on cue (the epoch names the call)."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.tasks: set[int] = set()  # the handler tasks' ids: one per stream
        self.refuse: dict[int, Exception] = {}
        self.stall: set[int] = set()
        self.gates: dict[int, asyncio.Event] = {}

    async def forward(self, req: pb.ForwardRequest) -> pb.ForwardReply:
        self.seen.append(req.epoch)
        if req.epoch in self.refuse:
            raise self.refuse[req.epoch]
        if req.epoch in self.stall:
            await asyncio.sleep(30)
        if req.epoch in self.gates:
            await self.gates[req.epoch].wait()
        return pb.ForwardReply(matched=req.epoch)


async def serve(port: int, stand: Stand, stream: bool = True) -> tuple[grpc.aio.Server, MatcherServicer]:
    server = grpc.aio.server()
    servicer = MatcherServicer(stand)  # type: ignore[arg-type]
    if stream:
        pb_grpc.add_MatcherServicer_to_server(servicer, server)
    else:  # an older matcher: the unary call only
        handler = grpc.unary_unary_rpc_method_handler(servicer.Forward,
                                                      request_deserializer=pb.ForwardRequest.FromString,
                                                      response_serializer=pb.ForwardReply.SerializeToString)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "bluedove.v1.Matcher", {"Forward": handler}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, servicer


def to(port: int) -> tuple[ForwardStream, grpc.aio.Channel]:
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.MatcherStub(ch)
    return ForwardStream(lambda: stub), ch


def call(n: int) -> pb.ForwardRequest:
    return pb.ForwardRequest(epoch=n)


async def test_calls_share_one_stream_and_a_slow_call_holds_back_none_after_it():
    port, stand = free_port(), Stand()
    stand.gates[1] = asyncio.Event()
    server, _ = await serve(port, stand)
    fs, ch = to(port)
    try:
        first = asyncio.ensure_future(fs.forward(call(1), 5.0))
        replies = await asyncio.gather(*(fs.forward(call(n), 5.0) for n in range(2, 42)))
        assert [r.matched for r in replies] == list(range(2, 42))  # each its own answer, by number
        assert not first.done()  # still under way in the matcher: the others were served beside it
        stand.gates[1].set()
        assert (await first).matched == 1
        assert not fs.unary
    finally:
        await fs.close()
        await ch.close()
        await server.stop(grace=None)


@pytest.mark.parametrize(("error", "code"), [(NotOwner("stale"), grpc.StatusCode.FAILED_PRECONDITION),
                                             (Busy("full"), grpc.StatusCode.RESOURCE_EXHAUSTED),
                                             (RuntimeError("bug"), grpc.StatusCode.UNKNOWN)])
async def test_a_refused_call_fails_alone_with_the_unary_calls_status(error, code):
    port, stand = free_port(), Stand()
    stand.refuse[2] = error
    server, _ = await serve(port, stand)
    fs, ch = to(port)
    try:
        assert (await fs.forward(call(1), 5.0)).matched == 1
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await fs.forward(call(2), 5.0)
        assert err.value.code() == code and str(error) in (err.value.details() or "")
        assert (await fs.forward(call(3), 5.0)).matched == 3  # the stream goes on
    finally:
        await fs.close()
        await ch.close()
        await server.stop(grace=None)


async def test_a_call_not_answered_in_time_fails_alone_with_deadline_exceeded():
    port, stand = free_port(), Stand()
    stand.stall.add(1)
    server, _ = await serve(port, stand)
    fs, ch = to(port)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await fs.forward(call(1), 0.3)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # failover blames the matcher
        assert (await fs.forward(call(2), 5.0)).matched == 2
    finally:
        await fs.close()
        await ch.close()
        await server.stop(grace=None)


async def test_a_restarted_matcher_is_reached_on_a_new_stream_and_the_broken_one_fails_its_calls():
    port, stand = free_port(), Stand()
    stand.gates[2] = asyncio.Event()
    server, _ = await serve(port, stand)
    fs, ch = to(port)
    try:
        assert (await fs.forward(call(1), 5.0)).matched == 1
        waiting = asyncio.ensure_future(fs.forward(call(2), 5.0))
        while 2 not in stand.seen:
            await asyncio.sleep(0.01)
        await server.stop(grace=None)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await waiting
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # sent to its next candidate
        server, _ = await serve(port, stand)
        for attempt in range(50):
            try:
                assert (await fs.forward(call(100 + attempt), 5.0)).matched == 100 + attempt
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("the restarted matcher was never reached")
    finally:
        await fs.close()
        await ch.close()
        await server.stop(grace=None)


async def test_a_matcher_serving_only_the_unary_call_gets_unary_calls():
    port, stand = free_port(), Stand()
    server, _ = await serve(port, stand, stream=False)
    fs, ch = to(port)
    try:
        assert [(await fs.forward(call(n), 5.0)).matched for n in (1, 2, 3)] == [1, 2, 3]
        assert fs.unary and stand.seen == [1, 2, 3]  # the first, refused as a stream, sent again unary
        again = ForwardStream(fs.stub)  # calls under way together at the first contact: each sent unary
        replies = await asyncio.gather(*(again.forward(call(n), 5.0) for n in range(10, 30)))
        assert [r.matched for r in replies] == list(range(10, 30)) and again.unary
    finally:
        await fs.close()
        await ch.close()
        await server.stop(grace=None)


async def test_closing_the_servicer_ends_open_streams_so_the_server_stops_at_once():
    port, stand = free_port(), Stand()
    server, servicer = await serve(port, stand)
    fs, ch = to(port)
    try:
        assert (await fs.forward(call(1), 5.0)).matched == 1  # a stream is open now, and stays open
        servicer.close()
        t0 = time.monotonic()
        await server.stop(grace=10)
        assert time.monotonic() - t0 < 5  # not held for the grace period by the open stream
        with pytest.raises(grpc.aio.AioRpcError):
            await fs.forward(call(2), 5.0)
    finally:
        await fs.close()
        await ch.close()
