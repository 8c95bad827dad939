"""Hostile input on the gRPC API (bluedove.v1.PubSub), on a real cluster: hypothesis builds bad
requests for every method (wrong, extreme, NaN/inf, huge or empty fields, unknown dimensions,
over-long strings, NULs, wrong ids and tokens; payloads with lone surrogate escapes, NaN,
Infinity, numbers past a double or past 64 bits), requests whose string fields hold bytes that
are not UTF-8, random bytes sent as raw serialized requests, and streams that end early. Every
answer must be a proper status (OK, INVALID_ARGUMENT, NOT_FOUND, UNAUTHENTICATED, ...), never
UNKNOWN or INTERNAL; a rejected request must change nothing (no delivery appears in a queue
subscribed to the whole space, the catalogue keeps its size); what is delivered is strict JSON
(docs/api.md, "Publishing"); and health is SERVING afterwards.

BLUEDOVE_FUZZ_EXAMPLES sets the examples per test (default 60, three times that for the typed
requests of the ten unary methods: about a minute in all);
BLUEDOVE_FUZZ_REPORT names a JSON file the figures (requests tried, statuses seen) go to.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections import Counter

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bluedove.store.client import sync_client
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import catalogue_size

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("BLUEDOVE_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
PROPER = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
          grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED}
SERVER_FAULT = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}  # the gRPC "5xx"
SERVICE = "/bluedove.v1.PubSub/"
METHODS = ("GetSpace", "CreateQueue", "DeleteQueue", "Subscribe", "Unsubscribe", "GetSubscription", "Publish",
           "PublishBatch", "PublishStream", "Poll", "Ack", "Listen", "SubscribeBatch")
STATS: Counter = Counter()  # "tried", "tried:<method>", "<STATUS>"


class World:
    """The cluster under fuzz and what must not change: a sentinel queue subscribed to the whole
    space (any message published reaches it), its token, and the catalogue's size."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.channel = grpc.insecure_channel(cluster.grpc_address)
        self.stub = pb_grpc.PubSubStub(self.channel)
        self.redis = sync_client(cluster.store_url)
        q = self.stub.CreateQueue(pb.CreateQueueRequest())
        self.queue, self.token = q.queue, q.token
        self.sub = self.stub.Subscribe(pb.SubscribeRequest(queue=self.queue), metadata=self.md(self.token)).id
        self.space = {d.name: (d.min, d.max) for d in self.stub.GetSpace(pb.GetSpaceRequest()).dimensions}
        self.baseline = catalogue_size(self.redis)

    @staticmethod
    def md(token: str | None) -> tuple:
        return () if token is None else (("authorization", f"Bearer {token}"),)

    def raw(self, method: str, stream_out: bool = False, stream_in: bool = False):
        """The method with identity (de)serializers: requests and replies as bytes."""
        kind = {(False, False): self.channel.unary_unary, (False, True): self.channel.unary_stream,
                (True, False): self.channel.stream_unary}[(stream_in, stream_out)]
        return kind(SERVICE + method, request_serializer=None, response_deserializer=None)

    def sentinel_deliveries(self) -> int:
        """Deliveries waiting in the sentinel queue (taken and acked); each payload strict JSON."""
        got = self.stub.Poll(pb.PollRequest(queue=self.queue, max=1000, wait=0), metadata=self.md(self.token))
        for m in got.messages:
            strict_json(m.payload or "null")
        if got.messages:
            self.stub.Ack(pb.AckRequest(queue=self.queue, receipts=[m.receipt for m in got.messages]),
                          metadata=self.md(self.token))
        return len(got.messages)

    def outcome(self, method: str, code: grpc.StatusCode, detail: str) -> None:
        """Count the answer; after a rejection check that nothing changed, after a success
        take the new state as the baseline."""
        STATS["tried"] += 1
        STATS[f"tried:{method}"] += 1
        STATS[code.name] += 1
        assert code not in SERVER_FAULT, f"{method}: {code.name} {detail}"
        stopped = method == "Listen" and code == grpc.StatusCode.DEADLINE_EXCEEDED  # the test's 0.5 s
        assert code in PROPER or stopped, f"{method}: unexpected {code.name} {detail}"
        if code == grpc.StatusCode.OK or method in ("Poll", "Listen", "Ack"):
            self.sentinel_deliveries()  # a valid publish reached it: fine
            self.baseline = catalogue_size(self.redis)
            return
        # A stream keeps the batches before its bad element (messages[i]): at most i deliveries.
        at = re.search(r"^messages\[(\d+)\]", detail) if method == "PublishStream" else None
        allowed = int(at.group(1)) if at else 0
        got = self.sentinel_deliveries()
        assert got <= allowed, f"{method} was rejected ({code.name}: {detail[:200]}) yet {got} messages were delivered"
        assert catalogue_size(self.redis) == self.baseline, f"{method} was rejected yet the catalogue changed"

    def close(self) -> None:
        self.channel.close()
        self.redis.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("fuzz"), matchers=2)
    w = World(c)
    yield w
    health = health_pb2_grpc.HealthStub(w.channel)
    status = health.Check(health_pb2.HealthCheckRequest(service="bluedove.v1.PubSub"), timeout=10).status
    w.close()
    c.stop()
    assert_no_children(c)
    _report()
    assert status == health_pb2.HealthCheckResponse.SERVING


def _report() -> None:
    out = {"examples_per_test": EXAMPLES, "requests": STATS["tried"],
           "server_faults": sum(STATS[c.name] for c in SERVER_FAULT),
           "statuses": {k: v for k, v in sorted(STATS.items()) if not k.startswith("tried")},
           "per_method": {k[6:]: v for k, v in sorted(STATS.items()) if k.startswith("tried:")}}
    print("\ngRPC fuzz:", json.dumps(out))
    if path := os.environ.get("BLUEDOVE_FUZZ_REPORT"):
        with open(path, "w") as f:
            json.dump(out, f, indent=1)


def strict_json(text: str) -> None:
    """Read `text` as a strict parser would: no NaN or Infinity, integers within 64 bits, finite
    doubles, no lone surrogate."""
    def refuse(name):
        raise AssertionError(f"{name} delivered in {text[:100]!r}")

    def int64(digits):
        assert -(2**63) <= int(digits) < 2**64, f"an integer past 64 bits delivered: {digits[:40]}"
        return int(digits)

    def double(digits):
        assert math.isfinite(float(digits)), f"a number past a double delivered: {digits[:40]}"
        return float(digits)

    value = json.loads(text, parse_constant=refuse, parse_int=int64, parse_float=double)
    json.dumps(value, ensure_ascii=False).encode()


# -- strategies ----------------------------------------------------------------------------------
NAMES = st.sampled_from(["x0", "x1", "x2", "x3"])
BAD_NAMES = st.one_of(st.text(max_size=20), st.just(""), st.just("x" * 5000), st.just("x0\x00"), st.just("X0"),
                      st.sampled_from(["x0\x00garbage", "\x00", "x1\x00", "\U0001F600"]))
EDGES = st.sampled_from([0.0, -0.0, 1000.0, 999.9999999999999, 1e-300, -1e-300, 5e-324, 1e308, -1e308,
                         float("inf"), float("-inf"), float("nan"), 2.0 ** 53, -1.0])
NUMBERS = st.one_of(EDGES, st.floats(allow_nan=True, allow_infinity=True), st.floats(-10, 1010))
LONG = st.sampled_from(["x" * 300, "y" * 70_000, "\u00e9" * 5000, "\x00" * 100])
STRINGS = st.one_of(st.text(max_size=40), LONG, st.just(""), st.text(alphabet="0123456789-", max_size=12),
                    st.sampled_from(["a\x00b", "\x00", "1-1\x00"]))
# payloads lenient parsers read and strict ones refuse: lone surrogate escapes, NaN and Infinity,
# numbers past a double or past 64 bits; and their strict neighbours, which must be delivered
HOSTILE_NUMBERS = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" * 5000, "2.5E+308",
                                   "18446744073709551616", "-9223372036854775809", "18446744073709551615",
                                   "-9223372036854775808", "1e308", "1e-400", "1" + "0" * 400 + ".5"])
HOSTILE_STRINGS = st.sampled_from(['"\\ud800"', '"a\\udc80b"', '"\\udfff\\ud800"', '"\\ud800\\u0041"',
                                   '{"\\udc80": 1}', '"\\ud83d\\ude00"', '"\\\\ud800"', '"a\x00b"', '"\\u0000"'])
HOSTILE_JSON = st.recursive(st.one_of(HOSTILE_NUMBERS, HOSTILE_STRINGS), lambda c: st.one_of(
    st.lists(c, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]"),
    st.lists(c, max_size=3).map(lambda xs: "{" + ",".join(f'"k{i}":{x}' for i, x in enumerate(xs)) + "}")),
    max_leaves=4)
JSON_TEXTS = st.one_of(STRINGS, st.just("{"), st.just("null"), st.just("[1,2"), st.just('"x"'), st.just("1e999"),
                       st.just("[" * 2000 + "]" * 2000), st.just(json.dumps("z" * 300_000)), HOSTILE_JSON)
ATTRS = st.dictionaries(st.one_of(NAMES, BAD_NAMES), NUMBERS, max_size=6)


VALID_ATTRS = st.fixed_dictionaries({n: st.floats(0, 999) for n in ("x0", "x1", "x2", "x3")})


def message():
    """Mostly bad; often good but for its payload (what a payload check must refuse alone)."""
    return st.one_of(st.builds(pb.Message, attributes=ATTRS, payload=JSON_TEXTS, id=STRINGS),
                     st.builds(pb.Message, attributes=VALID_ATTRS, payload=st.one_of(JSON_TEXTS, HOSTILE_JSON)))


def predicates():
    return st.dictionaries(st.one_of(NAMES, BAD_NAMES), st.builds(pb.Range, low=NUMBERS, high=NUMBERS), max_size=5)


def token(world: World):
    """No token, the sentinel's, a wrong one, garbage."""
    return st.sampled_from([None, world.token, "wrong", "", "x" * 5000, world.token + "x"])


def queue_ids(world: World):
    return st.one_of(st.just(world.queue), STRINGS)


def sub_ids(world: World):
    return st.one_of(st.just(world.sub), STRINGS)


def requests(world: World):
    """(method, request, token) for every unary method."""
    n = st.integers(-2**31, 2**31 - 1)
    return st.one_of(
        st.tuples(st.just("GetSpace"), st.just(pb.GetSpaceRequest()), token(world)),
        st.tuples(st.just("DeleteQueue"), st.builds(pb.DeleteQueueRequest, queue=STRINGS), token(world)),
        st.tuples(st.just("Subscribe"), st.builds(pb.SubscribeRequest, queue=queue_ids(world), predicates=predicates()),
                  token(world)),
        st.tuples(st.just("Unsubscribe"), st.builds(pb.SubscriptionRef, id=STRINGS), token(world)),
        st.tuples(st.just("GetSubscription"), st.builds(pb.SubscriptionRef, id=sub_ids(world)), token(world)),
        st.tuples(st.just("Publish"), message(), token(world)),
        st.tuples(st.just("PublishBatch"), st.builds(pb.PublishBatchRequest, messages=st.lists(message(), max_size=4)),
                  token(world)),
        st.tuples(st.just("Poll"), st.builds(pb.PollRequest, queue=queue_ids(world), max=n,
                                             wait=st.one_of(EDGES, st.floats(-5, 0.2))), token(world)),
        st.tuples(st.just("Ack"), st.builds(pb.AckRequest, queue=queue_ids(world),
                                            receipts=st.lists(STRINGS, max_size=5)), token(world)),
        st.tuples(st.just("SubscribeBatch"), st.builds(pb.SubscribeBatchRequest, subscriptions=st.lists(
            st.builds(pb.SubscribeRequest, queue=queue_ids(world), predicates=predicates()), max_size=4)),
            token(world)),
    )


def _call(fn, *args, **kw) -> tuple[grpc.StatusCode, str]:
    try:
        fn(*args, **kw)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""


def _wait_ok(wait: float) -> float:
    """A Poll asked to wait gets that long plus slack before the client gives up."""
    return 10.0 + (wait if 0 < wait <= 20 else 0.0)


# -- the tests -----------------------------------------------------------------------------------
def test_typed_bad_requests_get_proper_statuses_and_change_nothing(world):
    @settings(FUZZ, max_examples=3 * EXAMPLES)  # ten methods share it
    @given(st.data())
    def run(data):
        method, req, tok = data.draw(requests(world))
        timeout = _wait_ok(req.wait) if method == "Poll" else 10.0
        world.outcome(method, *_call(getattr(world.stub, method), req, metadata=world.md(tok), timeout=timeout))

    run()


def test_publish_stream_of_bad_elements(world):
    element = st.one_of(st.builds(pb.PublishStreamRequest, attributes=ATTRS, payload=JSON_TEXTS, id=STRINGS),
                        st.builds(pb.PublishStreamRequest, attributes=VALID_ATTRS, payload=HOSTILE_JSON),
                        st.builds(pb.PublishStreamRequest, messages=st.lists(message(), max_size=3)),
                        st.builds(pb.PublishStreamRequest, attributes=ATTRS, messages=st.lists(message(), max_size=2)))

    @FUZZ
    @given(st.lists(element, max_size=5))
    def run(elements):
        world.outcome("PublishStream", *_call(world.stub.PublishStream, iter(elements), timeout=10))

    run()


def test_listen_with_bad_requests(world):
    @FUZZ
    @given(queue_ids(world), st.integers(-2**31, 2**31 - 1), token(world))
    def run(queue, max_n, tok):
        call = world.stub.Listen(pb.ListenRequest(queue=queue, max=max_n), metadata=world.md(tok), timeout=0.5)
        code, detail = grpc.StatusCode.OK, ""
        try:
            for _ in call:
                pass
        except grpc.RpcError as exc:
            code, detail = exc.code(), exc.details() or ""
        world.outcome("Listen", code, detail)

    run()


def test_bytes_that_are_not_utf8_in_a_string_field(world):
    """A string field (a queue, an id, a receipt, an attribute or predicate key, a payload) whose
    bytes are not UTF-8: the request is not the method's message (INVALID_ARGUMENT)."""
    mark = "QQQQ"  # swapped for 4 other bytes: the field's length prefix stays right
    built = {"Publish": [pb.Message(attributes={"x0": 1, "x1": 2, "x2": 3, "x3": 4}, id=mark),
                         pb.Message(attributes={mark: 1, "x1": 2, "x2": 3, "x3": 4}),
                         pb.Message(attributes={"x0": 1, "x1": 2, "x2": 3, "x3": 4}, payload=f'"{mark}"')],
             "PublishBatch": [pb.PublishBatchRequest(messages=[pb.Message(attributes={mark: 1.0})])],
             "Subscribe": [pb.SubscribeRequest(queue=mark), pb.SubscribeRequest(predicates={mark: pb.Range(high=1)})],
             "Poll": [pb.PollRequest(queue=mark)], "Ack": [pb.AckRequest(queue=world.queue, receipts=[mark])],
             "DeleteQueue": [pb.DeleteQueueRequest(queue=mark)], "GetSubscription": [pb.SubscriptionRef(id=mark)],
             "Unsubscribe": [pb.SubscriptionRef(id=mark)]}
    not_utf8 = st.binary(min_size=4, max_size=4).filter(lambda b: not _utf8(b)) | st.sampled_from(
        [b"\xed\xa0\x80Q", b"QQQ\xc3", b"\xff\xfe\xfd\xfc", b"Q\xc0\x80Q"])

    @FUZZ
    @given(st.sampled_from(sorted(built)), st.data(), not_utf8, token(world))
    def run(method, data, bad, tok):
        raw = data.draw(st.sampled_from(built[method])).SerializeToString()
        assert raw.count(mark.encode()) == 1
        call = world.raw(method)
        world.outcome(method, *_call(call, raw.replace(mark.encode(), bad), metadata=world.md(tok), timeout=10))

    run()


def _utf8(b: bytes) -> bool:
    try:
        b.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_random_bytes_as_requests(world):
    streams = {"PublishStream": (True, False), "Listen": (False, True)}

    @FUZZ
    @given(st.sampled_from(METHODS), st.one_of(st.binary(max_size=200), st.just(b"\xff" * 10),
                                               st.just(b"\x0a\xff\xff\xff\xff\x0f")), token(world))
    def run(method, body, tok):
        stream_in, stream_out = streams.get(method, (False, False))
        fn = world.raw(method, stream_out=stream_out, stream_in=stream_in)
        arg = iter([body, body]) if stream_in else body
        if stream_out:
            def consume():
                for _ in fn(arg, metadata=world.md(tok), timeout=0.5):
                    pass
            world.outcome(method, *_call(consume))
        else:
            world.outcome(method, *_call(fn, arg, metadata=world.md(tok), timeout=10))

    run()


def test_streams_that_end_early(world):
    """A PublishStream cancelled or failing part way, a Listen dropped at once: the rest of the
    stream is not published, the server answers the next call."""
    good = pb.PublishStreamRequest(attributes={"x0": 1, "x1": 2, "x2": 3, "x3": 4})

    def broken():
        yield good
        raise RuntimeError("the client gives up mid-stream")

    # The client library ends the call itself (it answers its caller UNKNOWN "Exception iterating
    # requests!", a status the server never sent): not counted as an answer of the server.
    with pytest.raises(grpc.RpcError) as e:
        world.stub.PublishStream(broken(), timeout=10)
    assert "iterating requests" in (e.value.details() or "")
    fut = world.stub.PublishStream.future(iter([good] * 3), timeout=10)
    fut.cancel()
    listen = world.stub.Listen(pb.ListenRequest(queue=world.queue), metadata=world.md(world.token))
    listen.cancel()
    time.sleep(1.0)  # a cut stream the server is still finishing must not race the checks below
    assert world.sentinel_deliveries() <= 1 + 3  # at most what was sent before the cuts
    world.outcome("GetSpace", *_call(world.stub.GetSpace, pb.GetSpaceRequest(), timeout=10))
    world.outcome("Poll", *_call(world.stub.Poll, pb.PollRequest(queue=world.queue), metadata=world.md(world.token),
                                 timeout=10))
