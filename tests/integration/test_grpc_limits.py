"""The gRPC API's message limit against a real dispatcher: deliberate, the REST body cap plus
1 MiB (so both APIs take the same largest request), and a request over it answered
RESOURCE_EXHAUSTED with the API's `bluedove-error-code` (payload_too_large, as REST's 413) and a
message naming the limit; one far over refused by grpc before it is read. A Poll answer over
grpc's default 4 MiB reaches the SDK (docs/api.md, "Limits" and "gRPC").

Before: the server took grpc's default 4 MiB, whatever the REST cap, and refused a larger
request with grpc's own RESOURCE_EXHAUSTED and no `bluedove-error-code`; the SDK's channel read
at most 4 MiB, so a Poll answering more failed (LimitExceeded) after handing its deliveries out.
"""

from __future__ import annotations

import time

import grpc
import httpx
import psutil
import pytest

from bluedove.client import Client
from bluedove.client.errors import PayloadTooLarge
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.conftest import start_cluster
from tests.integration.helpers import new_queue

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
CAP = 6 * MIB  # the module's BLUEDOVE_MAX_BODY_BYTES: over grpc's default 4 MiB
LIMIT = CAP + MIB  # the gRPC message limit it makes
GOOD = {"x0": 1.0, "x1": 2.0, "x2": 3.0, "x3": 4.0}
PAYLOAD = '"' + "p" * 250_000 + '"'  # JSON text under the 256 KiB payload limit
FAR = 100_000_000


class Limits:
    """A private one-matcher cluster with the module's cap, a queue subscribed to the whole
    space (whatever is published reaches it), and a gRPC stub."""

    def __init__(self, tmp) -> None:
        self.c = start_cluster(tmp, matchers=1, child_env={"BLUEDOVE_MAX_BODY_BYTES": str(CAP)})
        self.api = httpx.Client(base_url=self.c.url, timeout=60)
        self.queue, self.auth = new_queue(self.api)
        r = self.api.post("/v1/subscriptions", json={"queue": self.queue, "predicates": {}}, headers=self.auth)
        assert r.status_code == 201, r.text
        self.channel = grpc.insecure_channel(self.c.grpc_address, options=[("grpc.max_receive_message_length", -1)])
        self.stub = pb_grpc.PubSubStub(self.channel)

    def depth(self) -> int:
        r = self.api.get(f"/v1/queues/{self.queue}", headers=self.auth)
        assert r.status_code == 200, r.text
        return int(r.json()["depth"])

    def wait_depth(self, n: int, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while self.depth() < n and time.monotonic() < deadline:
            time.sleep(0.1)
        assert self.depth() == n

    def fresh(self) -> None:
        """A new empty queue instead of the last test's (deleted, with what it holds)."""
        r = self.api.delete(f"/v1/queues/{self.queue}", headers=self.auth)
        assert r.status_code == 204, r.text
        self.queue, self.auth = new_queue(self.api)
        r = self.api.post("/v1/subscriptions", json={"queue": self.queue, "predicates": {}}, headers=self.auth)
        assert r.status_code == 201, r.text

    def pid(self) -> int:
        return next(ch.pid for ch in self.c.children if ch.role == "dispatcher")

    def reset_peak(self) -> int:
        """Resets the dispatcher's peak RSS (VmHWM) to its RSS now, and returns that."""
        with open(f"/proc/{self.pid()}/clear_refs", "w") as f:
            f.write("5")
        return int(psutil.Process(self.pid()).memory_info().rss)

    def peak(self) -> int:
        with open(f"/proc/{self.pid()}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

    def close(self) -> None:
        self.channel.close()
        self.api.close()
        self.c.stop()


@pytest.fixture(scope="module")
def cluster_limits(tmp_path_factory):
    w = Limits(tmp_path_factory.mktemp("grpc-limits"))
    yield w
    w.close()


@pytest.fixture
def limits(cluster_limits):
    cluster_limits.fresh()
    return cluster_limits


def batch(n: int) -> pb.PublishBatchRequest:
    return pb.PublishBatchRequest(messages=[pb.Message(attributes=GOOD, payload=PAYLOAD) for _ in range(n)])


def batch_json(n: int) -> bytes:
    one = b'{"attributes": {"x0": 1, "x1": 2, "x2": 3, "x3": 4}, "payload": ' + PAYLOAD.encode() + b"}"
    return b'{"messages": [' + b",".join([one] * n) + b"]}"


def failure(fn, *args) -> tuple[grpc.StatusCode, str, dict]:
    try:
        fn(*args, timeout=60)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or "", dict(exc.trailing_metadata() or ())
    return grpc.StatusCode.OK, "", {}


def test_the_largest_rest_body_is_a_grpc_request_too(limits):
    req, rest = batch(22), batch_json(22)
    assert 4 * MIB < req.ByteSize() < CAP and len(rest) < CAP
    r = limits.api.post("/v1/messages:batch", content=rest, headers={"content-type": "application/json"})
    assert r.status_code == 202, r.text
    assert len(limits.stub.PublishBatch(req, timeout=60).ids) == 22
    limits.wait_depth(44)


def test_a_request_over_the_limit_is_resource_exhausted_with_the_apis_code_naming_the_limit(limits):
    big = batch(32)
    assert LIMIT < big.ByteSize() < 2 * LIMIT
    small = pb.PublishStreamRequest(messages=[pb.Message(attributes=GOOD, payload="1")])
    over_stream = pb.PublishStreamRequest(messages=big.messages)
    cases = [(limits.stub.PublishBatch, big, None),
             (limits.stub.Publish, pb.Message(attributes=GOOD, payload='"' + "p" * LIMIT + '"'), None),
             (limits.stub.PublishStream, iter([small, over_stream]), "messages[1]"),
             (limits.stub.Poll, pb.PollRequest(queue="q" * (LIMIT + 1)), None)]
    for call, arg, field in cases:
        code, details, meta = failure(call, arg)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (call, code, details)
        assert meta.get("bluedove-error-code") == "payload_too_large", (call, meta)
        assert meta.get("bluedove-error-field") == field and str(LIMIT) in details, (call, meta, details)
    time.sleep(0.5)
    assert limits.depth() <= 1  # nothing over the limit published (the stream's first element may be)


def test_a_request_far_over_the_limit_is_refused_before_it_is_read(limits):
    """grpc refuses it on its length alone: RESOURCE_EXHAUSTED without our metadata, and the
    dispatcher never holds its 100 MB. The measure is the peak RSS while the call runs (the
    kernel's high-water mark, reset first), over three tries: had grpc read the message, every
    try would peak 100 MB or more over where it began; whatever else the process does at that
    moment (a few MB usually, once 33) shows in one try, not in all."""
    peaks = []
    for _ in range(3):
        before = limits.reset_peak()
        code, details, meta = failure(limits.stub.Publish, pb.Message(attributes=GOOD, payload="p" * FAR))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "bluedove-error-code" not in meta, (code, details, meta)
        peaks.append(limits.peak() - before)
    assert min(peaks) < FAR // 4, peaks
    assert len(limits.stub.GetSpace(pb.GetSpaceRequest(), timeout=10).dimensions) == 4
    assert limits.depth() == 0


def test_the_sdk_says_payload_too_large_for_a_request_over_the_limit_however_large(limits):
    with Client(f"grpc://{limits.c.grpc_address}") as client:
        for n in (32, FAR // 250_000):  # over the limit; far over it (grpc's own refusal)
            with pytest.raises(PayloadTooLarge):
                client.publish_many([(GOOD, "p" * 250_000)] * n)
    assert limits.depth() == 0


def test_the_sdk_polls_an_answer_over_grpcs_default_4_mib(limits):
    r = limits.api.post("/v1/messages:batch", content=batch_json(20), headers={"content-type": "application/json"})
    assert r.status_code == 202, r.text
    limits.wait_depth(20)
    with Client(f"grpc://{limits.c.grpc_address}") as client:
        queue = client.queue(limits.queue, limits.auth["Authorization"][7:])
        got = client.poll(queue, max=1000)
        assert len(got) == 20 and all(len(d.payload) == 250_000 for d in got)
        client.ack(queue, got)
    assert limits.depth() == 0

