"""Publish bodies of a typed space (docs/api.md, "Typed attributes"): the decoder against the
slow path (`bluedove.core.model.parse_batch`) on random bodies, good and bad; every refusal
names its field (`attributes.<name>`, `messages[i].attributes.<name>`) and a batch with one
bad message yields none; the stored bodies carry the attributes as published (strings and
booleans as given, numbers as their doubles, an optional attribute left out left out), and a
space of numbers keeps its bodies byte for byte. gRPC messages: test_decode_grpc_values.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.core.attributes import NUMBER
from bluedove.core.errors import ApiError
from bluedove.core.model import parse_batch
from bluedove.core.space import Space, default_space
from bluedove.core.wire import body_template
from bluedove.dispatcher.operations.publish import outgoing
from bluedove.dispatcher.publish.decode import Batch, Decoder

SPACE = Space.from_json({"attributes": [
    {"name": "status", "type": "string"},
    {"name": "amount", "type": "number", "min": 0, "max": 1000},
    {"name": "express", "type": "boolean", "optional": True},
    {"name": "coupon", "type": "string", "optional": True},
    {"name": "weight", "type": "number", "min": -5, "max": 5, "optional": True},
], "partition": ["amount", "status", "express"]})
ORDER = {"status": "shipped", "amount": 12.5}

strings = st.one_of(st.sampled_from(["", "a", "abcdef", "abcdefgh", "é", "\x00", "日本語", "x" * 256]),
                    st.text(max_size=8))
wrong = st.one_of(st.none(), st.booleans(), st.integers(-10, 2000), st.floats(), st.text(max_size=3),
                  st.sampled_from(["é" * 129, "x" * 257, "a\ud800", 1e400, [1], {"a": 1}]))


@st.composite
def attributes(draw) -> dict:
    out = {}
    for a in SPACE.schema:
        if (a.optional and draw(st.booleans())) or draw(st.integers(0, 40)) == 0:
            continue  # left out (a required one: refused)
        if draw(st.integers(0, 15)) == 0:
            out[a.name] = draw(wrong)
        elif a.type == NUMBER:
            out[a.name] = draw(st.floats(a.min, a.max, exclude_max=True) | st.integers(int(a.min), int(a.max) - 1))
        else:
            out[a.name] = draw(strings if a.type == "string" else st.booleans())
    if draw(st.integers(0, 40)) == 0:
        out["colour"] = "red"
    return dict(draw(st.permutations(list(out.items()))))  # in any order


@st.composite
def message(draw) -> dict:
    body: dict = {"attributes": draw(attributes())}
    if draw(st.booleans()):
        body["payload"] = draw(st.none() | st.integers(-5, 5) | st.text(max_size=5) | st.lists(st.booleans()))
    if draw(st.booleans()):
        body["id"] = draw(st.from_regex(r"[A-Za-z0-9._:~-]{1,10}", fullmatch=True) | st.text(max_size=3))
    return body


def as_stored(attrs: dict) -> dict:
    """What a delivery carries: the space's attributes in its order, numbers as doubles."""
    return {a.name: float(attrs[a.name]) if a.type == NUMBER else attrs[a.name] for a in SPACE.schema
            if a.name in attrs}


def outcome(fn):
    try:
        return "ok", fn()
    except ApiError as e:
        return "error", (e.status, e.code, e.field)


def slow(body: dict) -> list:
    parsed = parse_batch(body, SPACE, 5)
    return [(mid, list(p), pl, as_stored(m["attributes"])) for (mid, p, pl), m in zip(parsed, body["messages"])]


def fast(raw: bytes) -> list:
    b = Decoder(SPACE, 5).batch(raw)
    assert b.attributes is not None
    return [(mid, p, json.loads(pl), json.loads(a)) for mid, p, pl, a in
            zip(b.ids, b.points.tolist(), b.payloads, b.attributes)]


@settings(max_examples=400, deadline=None)
@given(st.lists(message(), min_size=1, max_size=5))
def test_the_decoder_accepts_and_refuses_typed_bodies_as_the_slow_path_does(msgs):
    raw = json.dumps({"messages": msgs}).encode()
    want = outcome(lambda: slow(json.loads(raw)))
    got = outcome(lambda: fast(raw))
    assert got == want
    if got[0] == "ok":
        for (_, _, _, attrs), m in zip(got[1], msgs):
            assert list(attrs) == [a.name for a in SPACE.schema if a.name in m["attributes"]]  # left out: left out
            assert all(type(v) is {"number": float, "string": str, "boolean": bool}[SPACE.by_name[n].type]
                       for n, v in attrs.items())


@pytest.mark.parametrize("attrs, field, words", [
    ({"amount": 1}, "status", "missing attribute 'status'"),
    ({**ORDER, "status": 5}, "status", "status is a string"),
    ({**ORDER, "status": "é" * 129}, "status", "at most 256 bytes"),
    ({**ORDER, "amount": "12"}, "amount", "amount is a number"),
    ({**ORDER, "amount": 1000}, "amount", "outside [0, 1000)"),
    ({**ORDER, "amount": -0.5}, "amount", "outside [0, 1000)"),
    ({**ORDER, "express": 1}, "express", "express is a boolean"),
    ({**ORDER, "coupon": None}, "coupon", "coupon is a string"),
    ({**ORDER, "colour": "red"}, "colour", "unknown attribute 'colour'"),
])
def test_every_refusal_names_its_attribute_and_a_batch_with_one_yields_none(attrs, field, words):
    d = Decoder(SPACE)
    with pytest.raises(ApiError) as one:
        d.one(json.dumps({"attributes": attrs}).encode())
    assert (one.value.status, one.value.code, one.value.field) == (422, "invalid_message", f"attributes.{field}")
    assert words in one.value.message
    good = {"attributes": ORDER}
    with pytest.raises(ApiError) as batch:
        d.batch(json.dumps({"messages": [good, good, {"attributes": attrs}, good]}).encode())
    assert batch.value.field == f"messages[2].attributes.{field}"


def test_bodies_carry_the_attributes_as_published():
    d = Decoder(SPACE)
    raw = json.dumps({"messages": [
        {"attributes": {"coupon": "", "amount": 7, "status": "日本\x00", "express": False}, "payload": {"a": 1}},
        {"attributes": {"status": "", "amount": 999.25}, "id": "o-1"},
    ]}, ensure_ascii=False).encode()
    batch = d.batch(raw)
    out = outgoing(SimpleNamespace(body_template=body_template(SPACE.names), stamp=b""), batch, 0.0)
    first, second = (json.loads(b) for b in out.bodies)
    assert first["attributes"] == {"status": "日本\x00", "amount": 7.0, "express": False, "coupon": ""}
    assert list(first["attributes"]) == ["status", "amount", "express", "coupon"] and first["payload"] == {"a": 1}
    assert second == {"id": "o-1", "attributes": {"status": "", "amount": 999.25}, "payload": None,
                      "published_at": "1970-01-01T00:00:00.000000Z"}  # express and coupon left out
    assert out.points.tolist()[1] == [999.25, 0.0, 0.0]  # absent express: its dimension's low
    assert d.one(json.dumps({"attributes": ORDER}).encode()).attributes == [b'{"status":"shipped","amount":12.5}']
    both = Batch.concat([batch, d.one(b'{"attributes": {"status": "x", "amount": 1}}')], SPACE.k)
    assert both.attributes is not None and both.attributes[2] == b'{"status":"x","amount":1.0}'


def test_a_space_of_numbers_keeps_its_bodies_byte_for_byte():
    space = default_space()
    batch = Decoder(space).one(b'{"attributes": {"x3": 4, "x0": 1.5, "x1": 0, "x2": 999.0}, "payload": [1, 2.50], '
                               b'"id": "n-1"}')
    assert batch.attributes is None
    [body] = outgoing(SimpleNamespace(body_template=body_template(space.names), stamp=b""), batch, 0.0).bodies
    assert body == (b'{"id":"n-1","attributes":{"x0":1.5,"x1":0.0,"x2":999.0,"x3":4.0},"payload":[1, 2.50],'
                    b'"published_at":"1970-01-01T00:00:00.000000Z"}')
