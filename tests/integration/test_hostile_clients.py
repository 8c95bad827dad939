"""Hostile clients on a real cluster, REST and gRPC: payloads strict parsers could not read back
are refused at publish, naming the field; every error renders, whatever key or value it
repeats (lone surrogates, NULs, bytes that are not UTF-8); gRPC attribute keys are checked as
REST's; and every endpoint fed such keys and values answers 4xx (INVALID_ARGUMENT, NOT_FOUND,
UNAUTHENTICATED over gRPC), never 5xx, UNKNOWN or INTERNAL, and publishes nothing.

Before: `"payload": "a\\ud800b"` (or raw bytes that are not UTF-8, NaN, 1e400, a 5,000-digit
integer) was accepted, and then every poll of the queue answered 500 (gRPC Poll UNKNOWN); an
attribute named "\\ud800" or a predicate key "\\udc80" made a 422 body that could not be encoded
(500, the connection closed); gRPC `Publish` with the key "x0\\x00garbage" and no x0 was
delivered as x0 = 0.0; a 5,000-digit integer in an attribute was a 400 quoting Python's
`sys.set_int_max_str_digits`.
"""

from __future__ import annotations

import json
from urllib.parse import quote_from_bytes

import grpc
import httpx
import pytest

from bluedove.store.client import sync_client
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.helpers import catalogue_size, new_queue

pytestmark = pytest.mark.integration

GOOD = {"x0": 1.0, "x1": 2.0, "x2": 3.0, "x3": 4.0}
JSON_HEADERS = {"content-type": "application/json"}
# payloads as JSON text (bytes: some are not UTF-8) that strict parsers refuse
BAD_PAYLOADS = [b'"a\\ud800b"', b'{"\\udc80": 1}', b'"a\xffb"', b'"\xed\xa0\x80"', b"NaN", b"-Infinity", b"1e400",
                b"1" * 5000, b"18446744073709551616"]
# keys and values as JSON string literals: lone surrogates (escaped), NULs, bytes that are not UTF-8
HOSTILE = [b'"\\ud800"', b'"x\\udc80"', b'"a\\u0000b"', b'"x0\\u0000garbage"', b'"\xff"', b'"\xed\xa0\x80x"',
           b'"\xc3"', b'"' + b"\\udfff" * 3000 + b'"']


class World:
    """The cluster and what must not change: a queue subscribed to the whole space (any message
    published reaches it), its token, and the catalogue's size."""

    def __init__(self, cluster) -> None:
        self.api = httpx.Client(base_url=cluster.url, timeout=30)
        self.queue, self.auth = new_queue(self.api)
        r = self.api.post("/v1/subscriptions", json={"queue": self.queue, "predicates": {}}, headers=self.auth)
        assert r.status_code == 201, r.text
        self.sub = r.json()["id"]
        self.channel = grpc.insecure_channel(cluster.grpc_address)
        self.stub = pb_grpc.PubSubStub(self.channel)
        self.redis = sync_client(cluster.store_url)
        self.catalogue = catalogue_size(self.redis)

    def md(self) -> tuple:
        return (("authorization", f"Bearer {self.auth['Authorization'][7:]}"),)

    def deliveries(self) -> list[dict]:
        """What reached the queue (taken and acked); the poll itself must answer 200."""
        r = self.api.get(f"/v1/queues/{self.queue}/messages", params={"max": 1000, "wait": 0.2}, headers=self.auth)
        assert r.status_code == 200, r.text
        msgs = r.json()["messages"]
        if msgs:
            self.api.post(f"/v1/queues/{self.queue}/ack", json={"receipts": [m["receipt"] for m in msgs]},
                          headers=self.auth)
        return msgs

    def assert_unchanged(self) -> None:
        assert self.deliveries() == [] and catalogue_size(self.redis) == self.catalogue

    def close(self) -> None:
        self.api.close()
        self.channel.close()
        self.redis.close()


@pytest.fixture(scope="module")
def world(cluster):
    w = World(cluster)
    yield w
    w.close()


def rest(world: World, method: str, path: str, body: bytes | None = None, headers: dict | None = None
         ) -> httpx.Response:
    """One request on a connection of its own (a 500 would close the shared one)."""
    with httpx.Client(base_url=str(world.api.base_url), timeout=30) as c:
        return c.request(method, path, content=body, headers={**JSON_HEADERS, **(headers or {})})


def assert_error(r: httpx.Response, status: int, code: str, field: str | None = None) -> dict:
    assert r.status_code == status, r.text
    body = json.loads(r.content.decode("utf-8"))["error"]  # UTF-8 JSON, whatever it repeats
    assert body["code"] == code and (field is None or body.get("field") == field), body
    return body


def message(payload: bytes = b"null", attrs: bytes | None = None, extra: bytes = b"") -> bytes:
    return b'{"attributes": ' + (attrs or json.dumps(GOOD).encode()) + b', "payload": ' + payload + extra + b"}"


def grpc_error(fn, *args, **kw) -> tuple[grpc.StatusCode, str, dict]:
    try:
        fn(*args, timeout=10, **kw)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or "", dict(exc.trailing_metadata() or ())
    return grpc.StatusCode.OK, "", {}


# -- strict payloads -----------------------------------------------------------------------------
@pytest.mark.parametrize("payload", BAD_PAYLOADS)
def test_a_payload_strict_parsers_refuse_is_422_on_every_publish_path_and_polls_stay_whole(world, payload):
    assert_error(rest(world, "POST", "/v1/messages", message(payload)), 422, "invalid_message", "payload")
    batch = b'{"messages": [' + message() + b", " + message(payload) + b"]}"
    assert_error(rest(world, "POST", "/v1/messages:batch", batch), 422, "invalid_message", "messages[1].payload")
    try:
        text = payload.decode()
    except UnicodeDecodeError:
        text = None  # a protobuf string is UTF-8: gRPC cannot carry these bytes
    if text is not None:
        bad, good = pb.Message(attributes=GOOD, payload=text), pb.Message(attributes=GOOD)
        for call, arg, field in [(world.stub.Publish, bad, "payload"),
                                 (world.stub.PublishBatch, pb.PublishBatchRequest(messages=[good, bad]),
                                  "messages[1].payload"),
                                 (world.stub.PublishStream, iter([pb.PublishStreamRequest(messages=[bad])]),
                                  "messages[0].payload")]:
            code, _, meta = grpc_error(call, arg)
            assert code == grpc.StatusCode.INVALID_ARGUMENT and meta.get("bluedove-error-field") == field, (code, meta)
            assert meta.get("bluedove-error-code") == "invalid_message"
    world.assert_unchanged()  # nothing stored, and the poll answers 200


def test_strict_payloads_at_the_edges_are_delivered_as_sent(world):
    edges = [b"18446744073709551615", b"-9223372036854775808", b"1e308", b'"\\ud83d\\ude00 a\\u0000b"',
             '"caf\u00e9"'.encode()]
    for p in edges:
        assert rest(world, "POST", "/v1/messages", message(p)).status_code == 202
    world.stub.Publish(pb.Message(attributes=GOOD, payload='"\\ud83d\\ude00"'), timeout=10)
    got = [m["payload"] for m in world.deliveries()]
    assert sorted(map(repr, got)) == sorted(map(repr, [json.loads(p) for p in edges] + ["\U0001F600"]))


# -- gRPC attribute keys, oversized numbers, errors that repeat a client's key ---------------------
def test_a_grpc_attribute_key_with_a_nul_is_refused_as_over_rest(world):
    bad = {"x0\x00garbage": 1.0, "x1": 2.0, "x2": 3.0, "x3": 4.0}
    for call, arg, field in [(world.stub.Publish, pb.Message(attributes=bad), "attributes.x0\\x00garbage"),
                             (world.stub.PublishBatch, pb.PublishBatchRequest(messages=[pb.Message(attributes=bad)]),
                              "messages[0].attributes.x0\\x00garbage")]:
        code, details, meta = grpc_error(call, arg)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and meta["bluedove-error-field"] == field, (code, details)
    assert_error(rest(world, "POST", "/v1/messages", message(attrs=b'{"x0\\u0000garbage": 1, "x1": 2, "x2": 3, '
                                                                    b'"x3": 4}')),
                 422, "invalid_message", "attributes.x0\x00garbage")
    world.assert_unchanged()


def test_an_oversized_number_in_an_attribute_or_a_bound_is_422_naming_it(world):
    big = b"1" * 5000
    body = assert_error(rest(world, "POST", "/v1/messages", message(attrs=b'{"x0": ' + big + b', "x1": 2, "x2": 3, '
                                                                          b'"x3": 4}')),
                        422, "invalid_message", "attributes.x0")
    assert "sys." not in body["message"] and "5000 digits" in body["message"]
    sub = b'{"queue": "%s", "predicates": {"x0": [0, %s]}}' % (world.queue.encode(), big)
    body = assert_error(rest(world, "POST", "/v1/subscriptions", sub, world.auth), 422, "invalid_subscription",
                        "predicates.x0[1]")
    assert "sys." not in body["message"]
    world.assert_unchanged()


@pytest.mark.parametrize("method,path,body,field", [
    ("POST", "/v1/messages", message(attrs=b'{"\\ud800": 1, "x0": 1, "x1": 2, "x2": 3, "x3": 4}'),
     "attributes.\\ud800"),
    ("POST", "/v1/messages", message(attrs=b'{"\xff": 1, "x0": 1, "x1": 2, "x2": 3, "x3": 4}'), "attributes.\\udcff"),
    ("POST", "/v1/subscriptions", b'{"queue": "Q", "predicates": {"\\udc80": [0, 1]}}', "predicates.\\udc80"),
    ("POST", "/v1/queues", b'{"\\udc80": 1}', "\\udc80"),
    ("POST", "/v1/queues/Q/ack", b'{"receipts": [], "\\ud800": 1}', "\\ud800"),
])
def test_an_error_repeating_a_lone_surrogate_renders_and_keeps_the_connection(world, method, path, body, field):
    with httpx.Client(base_url=str(world.api.base_url), timeout=30) as c:
        headers = {**JSON_HEADERS, **world.auth}
        r = c.request(method, path.replace("Q", world.queue), content=body.replace(b"Q", world.queue.encode()),
                      headers=headers)
        assert_error(r, 422, r.json()["error"]["code"], field)
        assert c.get("/v1/space").status_code == 200  # the same connection, still open
    world.assert_unchanged()


# -- every endpoint, fed hostile keys and values -------------------------------------------------
def rest_requests(q: bytes, v: bytes) -> list[tuple[str, str, bytes | None]]:
    """(method, path, body) for every REST endpoint with the JSON string `v` as a key or a value
    somewhere it is not valid; `q` a real queue (so the token check passes and the body is read)."""
    k = v  # as a key
    sub_ok = b'"predicates": {}'
    return [
        ("POST", "/v1/messages", message(attrs=b"{" + k + b': 1, "x0": 1, "x1": 2, "x2": 3, "x3": 4}')),
        ("POST", "/v1/messages", message(attrs=b'{"x0": ' + v + b', "x1": 2, "x2": 3, "x3": 4}')),
        ("POST", "/v1/messages", message(extra=b', "id": ' + v)),
        ("POST", "/v1/messages", message(extra=b", " + k + b": 1")),
        ("POST", "/v1/messages:batch", b'{"messages": [' + message(extra=b', "id": ' + v) + b"]}"),
        ("POST", "/v1/messages:batch", b'{"messages": [], ' + k + b": 1}"),
        ("POST", "/v1/subscriptions", b'{"queue": ' + v + b", " + sub_ok + b"}"),
        ("POST", "/v1/subscriptions", b'{"queue": "' + q + b'", "predicates": {' + k + b": [0, 1]}}"),
        ("POST", "/v1/subscriptions", b'{"queue": "' + q + b'", "predicates": {"x0": [' + v + b", 1]}}"),
        ("POST", "/v1/subscriptions", b'{"queue": "' + q + b'", ' + sub_ok + b", " + k + b": 1}"),
        ("POST", "/v1/subscriptions:batch", b'{"subscriptions": [{"queue": "' + q + b'", "predicates": {' + k
         + b": [0, 1]}}]}"),
        ("POST", "/v1/subscriptions:batch", b'{"subscriptions": [{"queue": ' + v + b", " + sub_ok + b"}]}"),
        ("POST", "/v1/queues", b"{" + k + b": 1}"),
        ("POST", "/v1/queues", b'{"max_undelivered": ' + v + b"}"),
        ("POST", "/v1/queues", b'{"dead_letter": {"queue": ' + v + b', "max_deliveries": 3}}'),
        ("POST", "/v1/queues", b'{"dead_letter": {"queue": "' + q + b'", ' + k + b": 3}}"),
        ("POST", f"/v1/queues/{q.decode()}/ack", b'{"receipts": [' + v + b"]}"),
        ("POST", f"/v1/queues/{q.decode()}/ack", b'{"receipts": [], ' + k + b": 1}"),
    ]


def path_requests(raw: bytes) -> list[tuple[str, str, bytes | None]]:
    """The endpoints that take an id in their path, the id `raw` bytes percent-encoded."""
    p = quote_from_bytes(raw, safe="")
    return [("GET", f"/v1/queues/{p}", None), ("DELETE", f"/v1/queues/{p}", None),
            ("GET", f"/v1/queues/{p}/messages?max=1", None), ("POST", f"/v1/queues/{p}/ack", b'{"receipts": []}'),
            ("GET", f"/v1/subscriptions/{p}", None), ("DELETE", f"/v1/subscriptions/{p}", None)]


def test_every_rest_endpoint_answers_hostile_keys_and_values_with_a_4xx_and_publishes_nothing(world):
    q = world.queue.encode()
    tried = []
    for v in HOSTILE:
        cases = rest_requests(q, v) + path_requests(v[1:-1].replace(b"\\u0000", b"\x00"))
        for method, path, body in cases:
            for headers in (world.auth, {"Authorization": b"Bearer \xff\xfe" + v[1:9]}):
                # (one connection for all: a 5xx, which may close it, fails the test anyway)
                r = world.api.request(method, path, content=body, headers={**JSON_HEADERS, **headers})
                tried.append((method, path[:40], body[:60] if body else None, r.status_code))
                assert 400 <= r.status_code < 500, (method, path, body[:200] if body else None, r.text)
                json.loads(r.content.decode("utf-8"))["error"]["code"]  # a proper error body
    assert len(tried) >= 300
    world.assert_unchanged()


def raw_with(message: bytes, placeholder: bytes, replacement: bytes) -> bytes:
    """A serialized request with a string's bytes swapped for others of the same length (the
    length prefix stays right): how a client sends bytes that are not UTF-8 in a string field."""
    assert len(placeholder) == len(replacement) and message.count(placeholder) == 1
    return message.replace(placeholder, replacement)


def test_every_grpc_method_answers_hostile_keys_and_values_with_a_proper_status_and_publishes_nothing(world):
    s, md, q = world.stub, world.md(), world.queue
    nul_key = {"x0\x00garbage": 1.0, "x1": 2.0, "x2": 3.0, "x3": 4.0}
    bad_msgs = [pb.Message(attributes=nul_key), pb.Message(attributes={**GOOD, "\x00": 1.0}),
                pb.Message(attributes=GOOD, id="a\x00b"), pb.Message(attributes=GOOD, payload='"\\ud800"'),
                pb.Message(attributes=GOOD, payload='"a\x00b"'),
                pb.Message(attributes=GOOD, payload='{"\\udc80": 1}')]
    calls = []
    for m in bad_msgs:
        calls += [(s.Publish, m, {}), (s.PublishBatch, pb.PublishBatchRequest(messages=[m]), {}),
                  (s.PublishStream, iter([pb.PublishStreamRequest(messages=[m])]), {})]
    for text in ("a\x00b", "\x00", "x0\x00", "\U0001F600\x00"):
        sub = pb.SubscribeRequest(queue=q, predicates={text: pb.Range(low=0, high=1)})
        calls += [(s.Subscribe, pb.SubscribeRequest(queue=text), md), (s.Subscribe, sub, md),
                  (s.SubscribeBatch, pb.SubscribeBatchRequest(subscriptions=[sub]), md),
                  (s.Unsubscribe, pb.SubscriptionRef(id=text), md),
                  (s.GetSubscription, pb.SubscriptionRef(id=text), md),
                  (s.DeleteQueue, pb.DeleteQueueRequest(queue=text), md), (s.Poll, pb.PollRequest(queue=text), md),
                  (s.Ack, pb.AckRequest(queue=text, receipts=["1-1"]), md),
                  (s.Ack, pb.AckRequest(queue=q, receipts=[text]), md)]
    proper = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAUTHENTICATED}
    for call, arg, meta in calls:
        code, details, trailing = grpc_error(call, arg, metadata=meta or None)
        assert code in proper, (call, arg, code, details)
        assert trailing.get("bluedove-error-code"), (call, code, details)
    # bytes that are not UTF-8 in a string field: the request is not the method's message
    for method, req in [("Publish", pb.Message(attributes=GOOD, id="QQQQ")),
                        ("Publish", pb.Message(attributes={**GOOD, "QQQQ": 1.0})),
                        ("Subscribe", pb.SubscribeRequest(queue="QQQQ")), ("Poll", pb.PollRequest(queue="QQQQ")),
                        ("Ack", pb.AckRequest(queue=q, receipts=["QQQQ"]))]:
        for bad in (b"\xff\xfe\xfd\xfc", b"\xed\xa0\x80Q", b"QQQ\xc3"):
            raw = world.channel.unary_unary(f"/bluedove.v1.PubSub/{method}", request_serializer=None,
                                            response_deserializer=None)
            code, details, trailing = grpc_error(raw, raw_with(req.SerializeToString(), b"QQQQ", bad), metadata=md)
            assert code == grpc.StatusCode.INVALID_ARGUMENT and trailing.get("bluedove-error-code") == "invalid_json", \
                (method, bad, code, details)
    listen = s.Listen(pb.ListenRequest(queue="a\x00b"), metadata=md, timeout=10)
    with pytest.raises(grpc.RpcError) as e:
        next(listen)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    world.assert_unchanged()
