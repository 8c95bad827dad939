"""Listen streams stay open: a few streams held through a real cluster while deliveries flow,
then through a quiet spell longer than one parked store read of a stream (LISTEN_POLL_S), then
while deliveries flow again, never end and never fail, and every delivery arrives on them once.
A subscriber sees no reconnect it did not ask for."""

from __future__ import annotations

import json
import threading
import time
import uuid

import grpc
import pytest

from bluedove.client.grpc_transport import OPTIONS
from bluedove.dispatcher.operations.queues import LISTEN_POLL_S
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration

STREAMS = 4
RATE = 4.0  # messages a second
# (seconds, publishing?): the quiet spell outlasts a parked read, which ends empty and is followed
# by the next on the same stream
PHASES = [(8.0, True), (LISTEN_POLL_S + 3, False), (5.0, True)]
REGION = {"x0": pb.Range(low=400, high=450), "x1": pb.Range(low=0, high=1000)}


def md(token: str) -> tuple:
    return (("authorization", f"Bearer {token}"),)


class Reader:
    """One Listen stream read (and each delivery acked) on a thread of its own, until cancelled:
    what it received, and how the stream ended if it did."""

    def __init__(self, stub: pb_grpc.PubSubStub, queue: str, token: str, run: str) -> None:
        self.stub, self.queue, self.token, self.run = stub, queue, token, run
        self.got: list[int] = []  # the test's message numbers, in order of arrival
        self.ended: str | None = None  # the status the stream ended with (None: still open)
        self.call = stub.Listen(pb.ListenRequest(queue=queue, max=10), metadata=md(token))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for d in self.call:
                payload = json.loads(d.payload) if d.payload else None
                if isinstance(payload, dict) and payload.get("run") == self.run:
                    self.got.append(payload["n"])
                self.stub.Ack(pb.AckRequest(queue=self.queue, receipts=[d.receipt]), metadata=md(self.token))
            self.ended = "OK"
        except grpc.RpcError as exc:
            self.ended = exc.code().name


def test_listen_streams_stay_open_while_deliveries_flow(cluster, api):
    run = uuid.uuid4().hex
    with grpc.insecure_channel(cluster.grpc_address, options=OPTIONS) as channel:
        stub = pb_grpc.PubSubStub(channel)
        readers = []
        for _ in range(STREAMS):
            sub = stub.Subscribe(pb.SubscribeRequest(predicates=REGION))
            readers.append(Reader(stub, sub.queue, sub.token, run))
        sent = 0
        for seconds, publishing in PHASES:
            start = time.monotonic()
            while time.monotonic() - start < seconds:
                if publishing:
                    r = api.post("/v1/messages", json={"attributes": {"x0": 420, "x1": 7, "x2": 1, "x3": 1},
                                                       "payload": {"run": run, "n": sent}})
                    assert r.status_code == 202, r.text
                    sent += 1
                time.sleep(1 / RATE)
                assert [x.ended for x in readers] == [None] * STREAMS, f"a stream ended after {sent} messages"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(len(x.got) < sent for x in readers):
            time.sleep(0.2)
        time.sleep(0.5)  # a late duplicate would land meanwhile
        ended = [x.ended for x in readers]
        for x in readers:
            x.call.cancel()
            x.thread.join(10)
    assert ended == [None] * STREAMS, "a Listen stream ended while held open"
    for x in readers:
        assert sorted(x.got) == list(range(sent)), f"queue {x.queue}: not every delivery exactly once"
        assert x.ended == "CANCELLED"  # ended by our cancel alone
