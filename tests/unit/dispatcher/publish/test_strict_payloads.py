"""Payloads are strict JSON (docs/api.md, "Publishing"), on every publish path the decoder serves
(REST single and batch, gRPC Publish, PublishBatch and PublishStream): what strict parsers could
not read back is refused with 422 `invalid_message` naming the payload, and what they can is
kept as the text it arrived in. Before, all of these were accepted: a lone surrogate escape or
bytes that are not UTF-8 were stored as bytes no poll could decode (every poll of the queue
answered 500 / UNKNOWN), NaN and 1e400 were relayed as text strict parsers refuse, and a
5,000-digit integer made the poll unreadable by Python's json. Also: gRPC attribute keys are
checked as REST's, and oversized numbers in attributes are a 422 naming the field.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.core.errors import ApiError
from bluedove.core.model import INT_MAX, INT_MIN, NotStrict, check_text, suspect
from bluedove.core.space import Dimension, Space
from bluedove.dispatcher.publish.decode import Decoder, loads_body
from bluedove.v1 import pubsub_pb2 as pb

SPACE = Space(tuple(Dimension(f"x{i}", 0.0, 1000.0) for i in range(4)))
ATTRS = {"x0": 1.0, "x1": 2.0, "x2": 3.0, "x3": 4.0}
GOOD = b'{"n": 1}'

# JSON text a lenient parser reads, a strict one does not
REFUSED = [
    b'"a\\ud800b"', b'"\\udc80"', b'{"\\udfff": 1}', b'["ok", "\\ud800\\u0041"]',  # lone surrogate escapes
    b'"a\xffb"', b'"a\xed\xa0\x80b"', b'"\xc3"',  # not UTF-8 (the second: a surrogate encoded)
    b"NaN", b"Infinity", b"-Infinity", b"[1, NaN]",
    b"1e400", b"-1e400", b"1" + b"0" * 400 + b".5", b'{"x": 2.5E+309}',
    b"18446744073709551616", b"-9223372036854775809", b"1" * 5000, b"[" + b"9" * 25 + b"]",
]
# strict JSON at the edges: kept as sent
KEPT = [
    b"18446744073709551615", b"-9223372036854775808", b"1700000000000000000", b"12345678901234567890",
    b"1e308", b"-1.7976931348623157e308", b"1e-400", b"0.00012345678901234567", b'"\\ud83d\\ude00"',
    b'"\\\\ud800"', '"caf\u00e9 \U0001F600"'.encode(), b'"\\u0000"', b"[1e-05, 2E+2, 0.5e10]",
]


def rest_one(payload: bytes) -> bytes:
    return b'{"attributes": ' + json.dumps(ATTRS).encode() + b', "payload": ' + payload + b"}"


def rest_batch(payload: bytes, at: int = 3) -> bytes:
    msgs = [rest_one(payload if i == at else GOOD) for i in range(5)]
    return b'{"messages": [' + b", ".join(msgs) + b"]}"


def pb_message(payload: bytes) -> pb.Message:
    return pb.Message(attributes=ATTRS, payload=payload.decode())


def refusal(fn) -> tuple[int, str, str | None]:
    with pytest.raises(ApiError) as e:
        fn()
    return e.value.status, e.value.code, e.value.field


@pytest.mark.parametrize("payload", REFUSED)
def test_a_payload_strict_parsers_refuse_is_422_naming_it_on_every_path(payload):
    d = Decoder(SPACE)
    assert refusal(lambda: d.one(rest_one(payload))) == (422, "invalid_message", "payload")
    assert refusal(lambda: d.batch(rest_batch(payload))) == (422, "invalid_message", "messages[3].payload")
    try:
        payload.decode()
    except UnicodeDecodeError:
        return  # a protobuf string is UTF-8: gRPC cannot carry it (its parser refuses the request)
    assert refusal(lambda: d.messages([pb_message(payload)], None)) == (422, "invalid_message", "payload")
    batch = [pb_message(payload if i == 3 else GOOD) for i in range(5)]
    assert refusal(lambda: d.pb_batch(batch)) == (422, "invalid_message", "messages[3].payload")
    # a PublishStream element counted from the stream's start
    assert refusal(lambda: d.messages(batch, "messages", 10)) == (422, "invalid_message", "messages[13].payload")


@pytest.mark.parametrize("payload", KEPT)
def test_strict_json_at_the_edges_is_kept_as_sent(payload):
    d = Decoder(SPACE)
    assert d.one(rest_one(payload)).payloads == [payload]
    assert d.batch(rest_batch(payload)).payloads[3] == payload
    assert d.messages([pb_message(payload)], None).payloads == [payload]


def test_a_refused_payload_names_why():
    d = Decoder(SPACE)
    for payload, words in [(b'"\\ud800"', "Unicode"), (b"NaN", "finite"), (b"1e400", "finite"),
                           (b"1" * 5000, "64 bits")]:
        with pytest.raises(ApiError) as e:
            d.one(rest_one(payload))
        assert words in e.value.message and "sys." not in e.value.message


def test_a_grpc_attribute_key_is_checked_as_rest_checks_it():
    """Before: {"x0\\x00garbage": 1, x1, x2, x3} was accepted and published as x0 = 0.0 (a protobuf
    map answers a missing key with its default)."""
    d = Decoder(SPACE)
    bad = {"x0\x00garbage": 1.0, "x1": 2.0, "x2": 3.0, "x3": 4.0}
    assert refusal(lambda: d.messages([pb.Message(attributes=bad)], None)) == \
        (422, "invalid_message", "attributes.x0\x00garbage")
    assert refusal(lambda: d.pb_batch([pb.Message(attributes=ATTRS), pb.Message(attributes=bad)])) == \
        (422, "invalid_message", "messages[1].attributes.x0\x00garbage")
    rest = b'{"attributes": {"x0\\u0000garbage": 1, "x1": 2, "x2": 3, "x3": 4}}'
    assert refusal(lambda: d.one(rest)) == (422, "invalid_message", "attributes.x0\x00garbage")


def test_an_oversized_number_in_an_attribute_is_422_naming_it_without_pythons_words():
    """Before: 400 invalid_json "... use sys.set_int_max_str_digits() to increase the limit"."""
    d = Decoder(SPACE)
    for raw in (b'{"attributes": {"x0": ' + b"1" * 5000 + b', "x1": 2, "x2": 3, "x3": 4}}',
                b'{"attributes": {"x0": -' + b"1" * 5000 + b', "x1": 2, "x2": 3, "x3": 4}}'):
        with pytest.raises(ApiError) as e:
            d.one(raw)
        assert (e.value.status, e.value.code, e.value.field) == (422, "invalid_message", "attributes.x0")
        assert "sys." not in e.value.message and "5000 digits" in e.value.message
    with pytest.raises(ApiError) as e:
        d.batch(b'{"messages": [{"attributes": {"x0": 1, "x1": 1e400, "x2": 3, "x3": 4}}]}')
    assert e.value.field == "messages[0].attributes.x1"


def test_a_body_reads_long_integers_and_bytes_that_are_not_utf8_without_refusing_it_whole():
    body = loads_body(b'{"a": ' + b"7" * 5000 + b', "b": "x\xffy", "c": 12}')
    assert repr(body["a"]) == "an integer of 5000 digits" and body["b"] == "x\udcffy" and body["c"] == 12
    assert loads_body('{"a": 1}'.encode("utf-16")) == {"a": 1}  # what json.loads read before, still read
    with pytest.raises(ApiError) as e:
        loads_body(b'{"a": 1')
    assert (e.value.status, e.value.code) == (400, "invalid_json")


def stdlib_body(raw: bytes):
    """loads_body as it read every body before msgspec went first: json.loads alone."""
    from bluedove.dispatcher.publish.decode import loads
    try:
        return "ok", loads(raw.decode(json.detect_encoding(raw), "surrogateescape"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return "refused", None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=15)


@settings(max_examples=300, deadline=None)
@given(json_values, st.sampled_from(["compact", "spaced", "ascii"]), st.lists(st.tuples(st.integers(0), st.binary(
    min_size=0, max_size=3)), max_size=2))
def test_a_body_reads_as_json_loads_read_it(value, style, edits):
    """msgspec reads a body first; what it refuses is read by json.loads, as before: every body
    gives the value json.loads gives, or is refused as json.loads refuses it. The bodies: JSON
    of any value (NaN, Infinity, long integers, non-ASCII), with a few bytes replaced."""
    text = json.dumps(value, separators=(",", ":") if style == "compact" else None, ensure_ascii=style == "ascii")
    raw = text.encode("utf-8", "surrogatepass")
    for at, junk in edits:
        at %= len(raw) + 1
        raw = raw[:at] + junk + raw[at + len(junk):]
    want = stdlib_body(raw)
    try:
        got = ("ok", loads_body(raw))
    except ApiError as e:
        assert (e.status, e.code) == (400, "invalid_json")
        got = ("refused", None)
    assert repr(got) == repr(want)  # (repr: NaN is not equal to itself)


# -- the prefilter and the exact check --------------------------------------------------------------
def strict_number(text: str) -> bool:
    """The reference: an integer within 64 bits, or a number a double holds finitely."""
    if not any(c in text for c in ".eE"):
        return INT_MIN <= int(text) <= INT_MAX
    return math.isfinite(float(Decimal(text)))


digits = st.text("0123456789", min_size=1, max_size=30).map(lambda s: s.lstrip("0") or "0")
numbers = st.builds(lambda sign, i, frac, exp: sign + i + frac + exp, st.sampled_from(["", "-"]), digits,
                    st.one_of(st.just(""), digits.map(lambda s: "." + s)),
                    st.one_of(st.just(""), st.builds(lambda e, s, n: e + s + n, st.sampled_from("eE"),
                                                     st.sampled_from(["", "+", "-"]),
                                                     st.integers(0, 1000).map(str))))


@settings(max_examples=1000, deadline=None)
@given(st.lists(numbers, min_size=1, max_size=4), st.sampled_from([", ", ",", " , "]))
def test_what_the_prefilter_passes_is_strict_and_the_exact_check_is_exact(nums, sep):
    text = ("[" + sep.join(nums) + "]").encode()
    want = all(strict_number(n) for n in nums)
    if not suspect(text):
        assert want, text  # the prefilter never lets a bad number through
    try:
        check_text(text)
        got = True
    except NotStrict:
        got = False
    assert got == want, text


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=20)
       | st.lists(st.integers(INT_MIN, INT_MAX), max_size=20))
def test_what_encoders_write_is_kept_as_written(values):
    text = json.dumps(values).encode()
    check_text(text)
    assert Decoder(SPACE).one(rest_one(text)).payloads == [text]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=6), st.sampled_from(["\ud800", "\udfff", "a\udc80", "\ud83d"])),
                min_size=1, max_size=4))
def test_any_lone_surrogate_escape_sends_the_body_to_its_error(strings):
    """msgspec refuses a lone surrogate escape even in the text it skips: the fast path never
    accepts one, and the slow path names it."""
    text = json.dumps(strings).encode()  # ensure_ascii: a surrogate written as its escape
    lone = any(0xD800 <= ord(c) <= 0xDFFF for s in strings for c in s)
    d = Decoder(SPACE)
    if lone:
        assert refusal(lambda: d.batch(rest_batch(text, 0))) == (422, "invalid_message", "messages[0].payload")
    else:
        assert d.batch(rest_batch(text, 0)).payloads[0] == text
