"""The batch decoder against the slow path it stands in for (`bluedove.core.model.parse_batch`):
on random bodies, good and bad, it accepts exactly what the slow path accepts, with the same
ids, values and payloads, and refuses with the same status, code and field. Also: the packed
Forward parts read back as they were written, and the batch candidates equal `candidates`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.core.errors import ApiError
from bluedove.core.model import parse_batch
from bluedove.core.partition import modes
from bluedove.core.partition.segments import equal_partition
from bluedove.core.space import Dimension, Space
from bluedove.core.wire import Part, bodies, body_template, encode_part, iso_time, new_ids
from bluedove.dispatcher.publish.decode import Decoder

SPACE = Space((Dimension("x0", 0.0, 1000.0), Dimension("speed", -5.0, 5.0), Dimension("t", 0.0, 1.0)))

value = st.one_of(st.floats(-10, 1100), st.integers(-10, 1100), st.sampled_from([0, 999.9999, 1000, -5, 5, 1e400]),
                  st.booleans(), st.none(), st.text(max_size=3))
payload = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                       | st.text(max_size=20),
                       lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                       max_leaves=8)


@st.composite
def message(draw):
    names = list(SPACE.names)
    attrs = {}
    for i, name in enumerate(names):
        if draw(st.integers(0, 30)) == 0:
            continue  # a missing dimension
        lo, hi = SPACE.dimensions[i].min, SPACE.dimensions[i].max
        attrs[name] = draw(st.floats(lo, hi, exclude_max=True) | value) if draw(st.booleans()) \
            else draw(st.floats(lo, hi, exclude_max=True))
    if draw(st.integers(0, 30)) == 0:
        attrs["x9"] = 1.0
    body = {"attributes": attrs if draw(st.integers(0, 40)) else draw(value)}
    if draw(st.booleans()):
        body["payload"] = draw(payload)
    if draw(st.booleans()):
        body["id"] = draw(st.from_regex(r"[A-Za-z0-9._:~-]{1,10}", fullmatch=True) | st.text(max_size=4)
                          | st.integers())
    if draw(st.integers(0, 40)) == 0:
        body["extra"] = 1
    return body


def outcome(fn):
    try:
        return "ok", fn()
    except ApiError as e:
        return "error", (e.status, e.code, e.field)


def slow(body, max_payload):
    parsed = parse_batch(body, SPACE, 5, max_payload)
    return [(mid, list(p), pl) for mid, p, pl in parsed]


def fast(raw, max_payload):
    b = Decoder(SPACE, 5, max_payload).batch(raw)
    return [(mid, p, json.loads(pl)) for mid, p, pl in zip(b.ids, b.points.tolist(), b.payloads)]


@settings(max_examples=500, deadline=None)
@given(st.lists(message(), min_size=0, max_size=6), st.sampled_from([64, 1024]), st.booleans())
def test_the_decoder_accepts_and_refuses_as_the_slow_path_does(msgs, max_payload, spaced):
    body = {"messages": msgs}
    raw = json.dumps(body, indent=1 if spaced else None).encode()  # whitespace inside payloads too
    want = outcome(lambda: slow(json.loads(raw), max_payload))
    got = outcome(lambda: fast(raw, max_payload))
    if want[0] == "ok" and got[0] == "ok":
        assert got[1] == want[1]
    else:
        assert got == want


@pytest.mark.parametrize("raw,status,field", [
    (b"", 422, "messages"),
    (b"{", 400, None),
    (b'{"messages": []}', 422, "messages"),
    (b'{"messages": [{"attributes": {"x0": 1, "speed": 0, "t": 1.0}}]}', 422, "messages[0].attributes.t"),
    (b'{"messages": [{"attributes": {"x0": 1, "speed": 0, "t": 0}, "payload": ' + b"[" * 5000 + b"]" * 5000 + b"}]}",
     400, None),
])
def test_bodies_the_fast_path_refuses_get_the_slow_paths_error(raw, status, field):
    with pytest.raises(ApiError) as e:
        Decoder(SPACE, 5).batch(raw)
    assert (e.value.status, e.value.field) == (status, field)


def test_a_payload_keeps_its_text_and_nan_in_a_payload_is_refused():
    d = Decoder(SPACE)
    b = d.batch(b'{"messages": [{"attributes": {"x0": 1, "speed": 0, "t": 0}, "payload": {"a": [1, 2.50]}}]}')
    assert b.payloads == [b'{"a": [1, 2.50]}'] and b.ids == [None] and b.points.tolist() == [[1.0, 0.0, 0.0]]
    with pytest.raises(ApiError) as e:  # Python's json reads NaN; JSON has none, strict parsers refuse it
        d.one(b'{"attributes": {"x0": 1, "speed": 0, "t": 0}, "payload": NaN}')
    assert (e.value.status, e.value.code, e.value.field) == (422, "invalid_message", "payload")


def test_packed_parts_read_back_as_written_and_the_bodies_are_json():
    rng = np.random.default_rng(3)
    points = rng.random((7, 3))
    ids = [i.encode() for i in new_ids(7)]
    payloads = [b"null", b'{"n":1}', b'"\\u00e9t\xc3\xa9"', b"[1,2]", b"3", b"true", b'{"a":{"b":[]}}']
    bs = bodies(body_template(SPACE.names), ids, points, payloads, iso_time(0.0))
    client = np.array([1, 0, 1, 0, 0, 1, 1], dtype=bool)
    wire = encode_part(2, points, ids, bs, client)
    part = Part.from_packed(type(wire).FromString(wire.SerializeToString()), 3)
    assert part.dim == 2 and part.n == 7 and (part.points == points).all() and (part.client == client).all()
    for i in range(7):
        assert part.id(i) == ids[i].decode() and part.body(i) == bs[i]
        doc = json.loads(bs[i])
        assert doc["id"] == ids[i].decode() and doc["published_at"] == "1970-01-01T00:00:00.000000Z"
        assert [doc["attributes"][n] for n in SPACE.names] == points[i].tolist()  # every double exact
        assert doc["payload"] == json.loads(payloads[i])
    assert len(set(new_ids(1000))) == 1000 and all(len(i) == 32 for i in new_ids(5))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 7), st.lists(st.tuples(st.floats(0, 1000, exclude_max=True), st.floats(-5, 5, exclude_max=True),
                                             st.floats(0, 1, exclude_max=True)), min_size=1, max_size=20),
       st.sampled_from(modes.MODES))
def test_batch_candidates_are_candidates_of_each_message(n_members, points, mode):
    table = equal_partition(SPACE, {f"m{i}": f"a:{i}" for i in range(n_members)})
    members, cand_m, cand_d = modes.candidates_batch(mode, table, np.array(points))
    for i, p in enumerate(points):
        got = [(int(cand_d[i, j]), members[cand_m[i, j]]) for j in range(cand_m.shape[1])]
        assert got == modes.candidates(mode, table, p)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=3, max_size=3), min_size=1,
                max_size=30))
def test_every_value_of_a_stored_body_reads_back_as_the_same_double(rows):
    """The bodies' values come from one msgspec encode split at its commas: any finite double
    (exponents, -0.0, subnormals) reads back exactly, in its dimension's place."""
    points = np.array(rows, dtype=np.float64)
    ids = [i.encode() for i in new_ids(len(rows))]
    bs = bodies(body_template(SPACE.names), ids, points, [b"null"] * len(rows), iso_time(0.0))
    for i, b in enumerate(bs):
        doc = json.loads(b)
        assert doc["id"] == ids[i].decode()
        got = [doc["attributes"][n] for n in SPACE.names]
        assert got == points[i].tolist() and [np.signbit(g) for g in got] == np.signbit(points[i]).tolist()
