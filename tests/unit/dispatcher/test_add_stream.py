"""bluedove/dispatcher/add_stream.py against the matcher's real servicer on loopback gRPC servers
in this process (the matcher behind it a stand-in that records what it files): batches are acked
in order on one call; a matcher that is not ready fails its batch and the next opens a new call;
a batch not acked in time fails and ends the call; a restarted matcher is reached on a new call;
a matcher serving only the unary call gets unary calls; plain subscriptions go in columns only
on a call whose ack said the matcher reads them; closing the servicer ends open streams so the
server stops at once, even when it closes while a stream is answering a batch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import grpc
import pytest

from bluedove.dispatcher.add_stream import AddStream
from bluedove.matcher.errors import NotReady
from bluedove.matcher.servicer import MatcherServicer
from bluedove.store.server import free_port
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc


class Filer:
    """What the servicer calls: files a batch (its `changed` = its size), refuses or stalls on cue."""

    def __init__(self) -> None:
        self.filed: list[str] = []
        self.tasks: list[asyncio.Task] = []  # the handler task of each call (kept: ids are not reused)
        self.refuse: set[str] = set()
        self.stall: set[str] = set()
        self.on_file: dict[str, Callable[[], None]] = {}  # called as the batch is filed, before its ack
        self.columns = False  # its acks say it reads SubscriptionBatch.boxes
        self.forms: list[str] = []  # each batch's form: "columns" or "messages"

    async def add_subscriptions(self, req: pb.SubscriptionBatch) -> pb.SubscriptionAck:
        task = asyncio.current_task()
        if not any(t is task for t in self.tasks):
            self.tasks.append(task)
        ids = [s.id for s in req.subscriptions] + list(req.boxes.ids)
        self.forms.append("columns" if req.HasField("boxes") else "messages")
        first = ids[0]
        if first in self.refuse:
            raise NotReady("not ready")
        if first in self.stall:
            await asyncio.sleep(30)
        self.filed += ids
        if first in self.on_file:
            self.on_file[first]()
        return pb.SubscriptionAck(changed=len(ids), epoch=7, columns=self.columns)


async def serve(port: int, filer: Filer, stream: bool = True) -> tuple[grpc.aio.Server, MatcherServicer]:
    server = grpc.aio.server()
    servicer = MatcherServicer(filer)  # type: ignore[arg-type]
    if stream:
        pb_grpc.add_MatcherServicer_to_server(servicer, server)
    else:  # an older matcher: the unary call only
        handler = grpc.unary_unary_rpc_method_handler(servicer.AddSubscriptions,
                                                      request_deserializer=pb.SubscriptionBatch.FromString,
                                                      response_serializer=pb.SubscriptionAck.SerializeToString)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "bluedove.v1.Matcher", {"AddSubscriptions": handler}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, servicer


def batch(name: str, n: int = 1) -> Callable[[bool], pb.SubscriptionBatch]:
    """The builder of a batch of `n` plain subscriptions: in columns when asked for them."""
    ids = [f"{name}.{i}" for i in range(n)]

    def build(columns: bool) -> pb.SubscriptionBatch:
        if columns:
            return pb.SubscriptionBatch(boxes=pb.Boxes(ids=ids, queues=["q"] * n))
        return pb.SubscriptionBatch(subscriptions=[pb.Subscription(id=i, queue="q") for i in ids])
    return build


def adds_to(port: int, timeout_s: float = 5.0) -> tuple[AddStream, grpc.aio.Channel]:
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.MatcherStub(ch)
    return AddStream(lambda: stub, timeout_s), ch


async def first_after_restart(adds: AddStream, name: str) -> None:
    """A batch of one filed after the matcher restarted (the first ones may meet the broken call)."""
    for attempt in range(50):
        try:
            assert (await adds.add(batch(f"{name}{attempt}"))).changed == 1
            return
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.1)
    raise AssertionError("no batch was filed after the restart")


async def test_batches_are_acked_in_order_on_one_call():
    port, filer = free_port(), Filer()
    server, _ = await serve(port, filer)
    adds, ch = adds_to(port)
    try:
        acks = await asyncio.gather(*(adds.add(batch(f"b{n}", n)) for n in range(1, 41)))
        assert [a.changed for a in acks] == list(range(1, 41))  # each batch its own ack
        assert len(filer.filed) == sum(range(1, 41)) and len(filer.tasks) == 1 and not adds.unary
    finally:
        await adds.close()
        await ch.close()
        await server.stop(grace=None)


async def test_a_matcher_not_ready_fails_its_batch_and_the_next_opens_a_new_call():
    port, filer = free_port(), Filer()
    filer.refuse.add("no.0")
    server, _ = await serve(port, filer)
    adds, ch = adds_to(port)
    try:
        assert (await adds.add(batch("a"))).changed == 1
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await adds.add(batch("no"))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # as the unary call answers
        assert (await adds.add(batch("b", 3))).changed == 3
        assert filer.filed == ["a.0", "b.0", "b.1", "b.2"] and len(filer.tasks) == 2
    finally:
        await adds.close()
        await ch.close()
        await server.stop(grace=None)


async def test_a_batch_not_acked_in_time_fails_and_the_call_is_replaced():
    port, filer = free_port(), Filer()
    filer.stall.add("slow.0")
    server, _ = await serve(port, filer)
    adds, ch = adds_to(port, timeout_s=0.5)
    try:
        with pytest.raises(TimeoutError):
            await adds.add(batch("slow"))
        assert (await adds.add(batch("next"))).changed == 1  # on a new call: the old one is out of step
        assert "next.0" in filer.filed and len(filer.tasks) == 2
    finally:
        await adds.close()
        await ch.close()
        await server.stop(grace=None)


async def test_a_restarted_matcher_is_reached_on_a_new_call():
    port, filer = free_port(), Filer()
    server, _ = await serve(port, filer)
    adds, ch = adds_to(port)
    try:
        assert (await adds.add(batch("before"))).changed == 1
        await server.stop(grace=None)
        server, _ = await serve(port, filer)
        await first_after_restart(adds, "after")
        assert any(s.startswith("after") for s in filer.filed) and len(filer.tasks) == 2
    finally:
        await adds.close()
        await ch.close()
        await server.stop(grace=None)


async def test_a_matcher_serving_only_the_unary_call_gets_unary_calls():
    port, filer = free_port(), Filer()
    filer.columns = True  # (a unary call's batch is always messages)
    server, _ = await serve(port, filer, stream=False)
    adds, ch = adds_to(port)
    try:
        assert [(await adds.add(batch(f"u{i}", 2))).changed for i in range(3)] == [2, 2, 2]
        assert set(filer.forms) == {"messages"}
        assert adds.unary and len(filer.filed) == 6 and len(filer.tasks) == 3  # one call each
        again = AddStream(adds.stub, 5.0)  # batches under way together at the first contact: each sent unary
        acks = await asyncio.gather(*(again.add(batch(f"c{i}")) for i in range(20)))
        assert [a.changed for a in acks] == [1] * 20 and again.unary
    finally:
        await adds.close()
        await ch.close()
        await server.stop(grace=None)


async def test_closing_the_servicer_ends_open_streams_so_the_server_stops_at_once():
    port, filer = free_port(), Filer()
    server, servicer = await serve(port, filer)
    adds, ch = adds_to(port)
    try:
        assert (await adds.add(batch("open"))).changed == 1  # a stream is open now, and stays open
        servicer.close()
        t0 = time.monotonic()
        await server.stop(grace=10)
        assert time.monotonic() - t0 < 5  # not held for the grace period by the open stream
        with pytest.raises((grpc.aio.AioRpcError, ConnectionError)):
            await adds.add(batch("after"))
    finally:
        await adds.close()
        await ch.close()


async def test_closing_while_a_stream_answers_a_batch_ends_it_after_that_ack():
    """The close lands while the handler is not waiting for the next batch (here: just before its
    ack is written). That batch is acked; the stream then ends, and the stop is not held."""
    port, filer = free_port(), Filer()
    server, servicer = await serve(port, filer)
    filer.on_file["closing.0"] = servicer.close
    adds, ch = adds_to(port)
    try:
        assert (await adds.add(batch("closing"))).changed == 1
        t0 = time.monotonic()
        await server.stop(grace=10)
        assert time.monotonic() - t0 < 5
        with pytest.raises((grpc.aio.AioRpcError, ConnectionError)):
            await adds.add(batch("after"))
        assert filer.filed == ["closing.0"]
    finally:
        await adds.close()
        await ch.close()


async def test_columns_go_only_on_a_call_whose_ack_said_the_matcher_reads_them():
    port, filer = free_port(), Filer()
    filer.columns = True
    server, _ = await serve(port, filer)
    adds, ch = adds_to(port)
    try:
        for i in range(3):
            assert (await adds.add(batch(f"a{i}", 2))).changed == 2
        assert filer.forms == ["messages", "columns", "columns"]  # the first ack told it
        await server.stop(grace=None)
        filer.columns, filer.forms = False, []  # an older matcher in its place: it reads messages only
        server, _ = await serve(port, filer)
        await first_after_restart(adds, "b")
        for i in range(2):
            assert (await adds.add(batch(f"c{i}"))).changed == 1
        assert set(filer.forms) == {"messages"} and filer.filed[-2:] == ["c0.0", "c1.0"]
    finally:
        await adds.close()
        await ch.close()
        await server.stop(grace=None)
