"""bluedove/core/replay_match.py against an oracle written from the definition: a message of a
logged chunk is replayed when it lies in one of the subscription's boxes (lows <= x < highs),
its filter holds on its attributes when the boxes cannot say exactly, and its published_at,
floored to the millisecond, is at or after the time asked for.

The chunks are made as the service stores them (the bodies of bluedove/core/wire.py, the
points as the float64 rows `np.frombuffer` reads), on spaces of numbers with ranges and on
random typed spaces and filters (tests/unit/core/test_filters.py's), with times a microsecond
or a millisecond either side of the one asked for.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bluedove.core.attributes import BOOLEAN, NUMBER, STRING, Attribute
from bluedove.core.filters import MAX_BOXES
from bluedove.core.model import Subscription, build_subscription
from bluedove.core.replay_match import in_boxes, published_ms, replay_matches
from bluedove.core.space import Space
from bluedove.core.wire import bodies, body_template, iso_time, typed_bodies
from tests.unit.core.test_filters import filters, messages, oracle, spaces

SINCE_MS = 1_795_771_570_123  # 2026-11-27T09:26:10.123Z
# A message's time, in microseconds after SINCE_MS: before it (the floor is a millisecond
# earlier), on it, and after it.
OFFSETS_US = (-1000, -1, 0, 1, 999, 1000)
FOOL = '"published_at":"1999-01-01T00:00:00.000000Z"'
payloads = st.sampled_from([b"null", b'{"n":1}', json.dumps({"note": FOOL}).encode(), json.dumps([FOOL]).encode(),
                            b'{"published_at":"1999-01-01T00:00:00.000000Z"}'])


def stamp(us: int) -> bytes:
    """published_at of a message `us` microseconds after the epoch, in `iso_time`'s form (made
    from the whole number, so that no float rounding stands between the test and its oracle)."""
    return (datetime(1970, 1, 1) + timedelta(microseconds=us)).isoformat(timespec="microseconds").encode() + b"Z"


class Chunk:
    """A logged chunk: the points as float64 rows read from bytes, the stored bodies, and the
    bodies asked for."""

    def __init__(self, rows: list[list[float]], texts: list[bytes], k: int):
        self.points = np.frombuffer(np.array(rows, dtype=np.float64).tobytes()).reshape(len(rows), k)
        self.texts = texts
        self.asked: list[int] = []

    def body(self, i: int) -> bytes:
        self.asked.append(i)
        return self.texts[i]


def numbers_chunk(space: Space, rows: list[list[float]], times: list[int], payload: list[bytes]) -> Chunk:
    template = body_template(space.names)
    texts = [bodies(template, [b"m%d" % i], np.array([row]), [p], stamp(t))[0]
             for i, (row, t, p) in enumerate(zip(rows, times, payload))]
    return Chunk(rows, texts, space.k)


def typed_chunk(space: Space, msgs: list[dict], times: list[int], payload: list[bytes]) -> Chunk:
    rows = [[space.by_name[d.name].coordinate(m.get(d.name)) for d in space.dimensions] for m in msgs]
    attrs = [json.dumps(m, separators=(",", ":"), ensure_ascii=False).encode() for m in msgs]
    texts = [typed_bodies([b"m%d" % i], [a], [p], stamp(t))[0]
             for i, (a, t, p) in enumerate(zip(attrs, times, payload))]
    return Chunk(rows, texts, space.k)


def expected(sub: Subscription, chunk: Chunk, times: list[int], since_ms: int) -> list[int]:
    """The definition: in a box, the filter holds unless the boxes decide, published at or after."""
    out = []
    for i, (row, text) in enumerate(zip(chunk.points.tolist(), chunk.texts)):
        boxed = any(all(lo <= x < hi for lo, x, hi in zip(lows, row, highs)) for lows, highs in sub.boxes)
        f = sub.filter
        exact = f is None or f.exact or f.matches(json.loads(text)["attributes"])
        if boxed and exact and times[i] // 1000 >= since_ms:
            out.append(i)
    return out


def by_the_language(space: Space, predicates: dict, msgs: list[dict], times: list[int]) -> list[int]:
    """The messages the filter language's meaning (test_filters' oracle) matches, from SINCE_MS."""
    return [i for i, m in enumerate(msgs) if oracle(space, predicates, m) and times[i] // 1000 >= SINCE_MS]


def check(sub: Subscription, chunk: Chunk, times: list[int], since_ms: int = SINCE_MS) -> np.ndarray:
    got = replay_matches(chunk.points, chunk.body, sub, since_ms)
    assert got.dtype == np.int64 and got.ndim == 1
    assert got.tolist() == expected(sub, chunk, times, since_ms), (sub, chunk.points)
    in_a_box = [i for i, row in enumerate(chunk.points.tolist()) if sub.matches(row)]
    assert sorted(chunk.asked) == in_a_box  # a body is read only for a message in a box, once
    return got


def times_for(draw, n: int) -> list[int]:
    return [SINCE_MS * 1000 + draw(st.sampled_from(OFFSETS_US)) for _ in range(n)]


# -- published_at, from the tail --------------------------------------------------------------


@given(st.integers(-2_000_000_000_000_000, 4_000_000_000_000_000), payloads)
def test_published_ms_is_the_floor_of_the_time_in_milliseconds(us, payload):
    body = typed_bodies([b"id"], [b'{"a":1}'], [payload], stamp(us))[0]
    assert published_ms(body) == us // 1000


def test_published_ms_reads_the_form_iso_time_writes():
    for t in (0.0, 1795771570.123456, 1795771570.999999, -0.0005, 951782400.5):  # 2000-02-29
        assert published_ms(b'{"payload":1,"published_at":"' + iso_time(t) + b'"}') == math.floor(t * 1000)
    assert stamp(1795771570123456) == iso_time(1795771570.123456)
    assert published_ms(b'{"published_at":"1969-12-31T23:59:59.999999Z"}') == -1


def test_a_payload_holding_published_at_does_not_fool_the_tail():
    space = Space.from_json({"dimensions": [{"name": "x", "min": 0, "max": 10}]})
    sub = build_subscription("s", "q", {"x": [0, 10]}, space)
    payload = json.dumps({"text": FOOL, "published_at": "1999-01-01T00:00:00.000000Z"}, separators=(",", ":")).encode()
    times = [SINCE_MS * 1000 - 1, SINCE_MS * 1000]
    chunk = numbers_chunk(space, [[1.0], [2.0]], times, [payload, payload])
    assert FOOL.encode() in chunk.texts[0] and published_ms(chunk.texts[0]) == SINCE_MS - 1
    assert check(sub, chunk, times).tolist() == [1]
    again = numbers_chunk(space, [[1.0], [2.0]], times, [payload] * 2)
    assert check(sub, again, times, 946684800000).tolist() == [0, 1]  # since 2000-01-01


@pytest.mark.parametrize("body", [b'{"published_at":"2026-11-27T09:26:10.123456Z"} ', b'"2026-11-27T09:26:10.123Z"}',
                                  b'{"payload":1,"published_at":"2026-11-27T09:26:10.123456+00:00"}', b""])
def test_a_body_not_ending_with_published_at_in_its_form_is_refused(body):
    with pytest.raises(ValueError):
        published_ms(body)


# -- a space of numbers ------------------------------------------------------------------------

# Values on and beside the bounds: a range's bound is often a point's coordinate.
EDGES = [0.0, 1.0, 2.5, 5.0, math.nextafter(5.0, 0.0), math.nextafter(5.0, 10.0), 9.5, math.nextafter(10.0, 0.0)]
coords = st.one_of(st.sampled_from(EDGES), st.floats(0, 10, exclude_max=True))
bounds = st.one_of(st.sampled_from([*EDGES, 10.0, -1.0, 12.0]), st.floats(-2, 12))


@st.composite
def ranges(draw, space: Space) -> dict:
    chosen = draw(st.lists(st.sampled_from(space.names), max_size=space.k, unique=True))
    return {name: sorted(draw(st.lists(bounds, min_size=2, max_size=2, unique=True))) for name in chosen}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_ranges_in_a_space_of_numbers_match_the_oracle(data):
    k = data.draw(st.integers(1, 4))
    space = Space.from_json({"dimensions": [{"name": f"x{i}", "min": 0, "max": 10} for i in range(k)]})
    if data.draw(st.booleans()):
        predicates = data.draw(ranges(space))  # one box, clipped to the space (void when clipped away)
    else:  # several boxes, overlapping or not, that decide alone
        predicates = {"any_of": data.draw(st.lists(ranges(space).filter(bool), min_size=1, max_size=8))}
    sub = build_subscription("s", "q", predicates, space)
    n = data.draw(st.integers(1, 40))
    rows = [[data.draw(coords) for _ in range(k)] for _ in range(n)]
    times = times_for(data.draw, n)
    chunk = numbers_chunk(space, rows, times, [data.draw(payloads) for _ in range(n)])
    check(sub, chunk, times)


def test_points_on_the_lows_are_in_and_on_the_highs_are_out():
    space = Space.from_json({"dimensions": [{"name": "x", "min": 0, "max": 10}, {"name": "y", "min": 0, "max": 10}]})
    below, above = math.nextafter(2.0, 0.0), math.nextafter(4.0, 10.0)
    rows = [[2.0, 5.0], [4.0, 5.0], [below, 5.0], [math.nextafter(4.0, 0.0), 5.0], [3.0, 0.0], [3.0, 10.0],
            [above, 5.0], [0.0, 0.0], [3.0, math.nextafter(10.0, 0.0)], [5.0, 0.5], [7.0, 9.0]]
    times = [SINCE_MS * 1000] * len(rows)
    one = build_subscription("s", "q", {"x": [2, 4]}, space)
    assert check(one, numbers_chunk(space, rows, times, [b"1"] * len(rows)), times).tolist() == [0, 3, 4, 8]
    many = build_subscription("s", "q", {"any_of": [{"x": [2, 4]}, {"x": [4, 6], "y": [0, 1]}, {"y": [9, 12]}]},
                              space)
    assert len(many.boxes) == 3
    assert check(many, numbers_chunk(space, rows, times, [b"1"] * len(rows)), times).tolist() == [0, 3, 4, 8, 9, 10]
    grid = build_subscription("s", "q", {"x": {"in": [2, 4]}, "y": {"in": [5, 0]}}, space)
    assert len(grid.boxes) == 4
    assert check(grid, numbers_chunk(space, rows, times, [b"1"] * len(rows)), times).tolist() == [0, 1]


def test_a_filter_of_a_thousand_boxes_matches_the_oracle():
    space = Space.from_json({"dimensions": [{"name": f"x{i}", "min": 0, "max": 100} for i in range(4)]})
    rng = np.random.default_rng(7)
    grid = build_subscription("s", "q", {"x0": {"in": list(range(0, 100, 2))}, "x1": {"in": list(range(20))}}, space)
    alts = []
    for _ in range(MAX_BOXES):
        lows = rng.uniform(0, 90, 4).round(1)
        alts.append({f"x{d}": [float(lo), round(float(lo + rng.uniform(1, 30)), 1)] for d, lo in enumerate(lows)})
    overlapping = build_subscription("s", "q", {"any_of": alts}, space)
    assert len(grid.boxes) == len(overlapping.boxes) == MAX_BOXES
    n = 3000
    rows = np.where(rng.random((n, 4)) < 0.5, rng.integers(0, 100, (n, 4)), rng.uniform(0, 100, (n, 4)).round(1))
    times = [SINCE_MS * 1000 + int(rng.choice(OFFSETS_US)) for _ in range(n)]
    for sub in (grid, overlapping):
        got = check(sub, numbers_chunk(space, rows.tolist(), times, [b"1"] * n), times)
        assert len(got) > 10


@settings(deadline=None)  # (the first example may compile in_boxes: seconds on a busy machine)
@given(st.lists(st.tuples(st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0, 4.0]), min_size=2, max_size=2),
                          st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0, 4.0]), min_size=2, max_size=2)), max_size=12),
       st.lists(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0, 3.5, 4.0, 5.0, math.nan]), min_size=2, max_size=2),
                max_size=30))
def test_in_boxes_finds_the_points_in_any_box(box_edges, rows):
    """Boxes that share, touch and overlap, some empty; NaN is in no box."""
    boxes = tuple(((a[0], b[0]), (a[1], b[1])) for a, b in box_edges)
    points = np.array(rows, dtype=np.float64).reshape(len(rows), 2)
    want = [i for i, p in enumerate(rows) if any(all(lo <= x < hi for lo, hi, x in zip(*box, p)) for box in boxes)]
    assert in_boxes(points, boxes).tolist() == want


def test_an_empty_chunk_matches_nothing():
    space = Space.from_json({"dimensions": [{"name": "x", "min": 0, "max": 10}, {"name": "y", "min": 0, "max": 10}]})
    chunk = Chunk([], [], 2)
    assert chunk.points.shape == (0, 2)
    for predicates in ({"x": [0, 10]}, {"any_of": [{"x": [0, 1]}, {"y": [2, 3]}]}):
        got = replay_matches(chunk.points, chunk.body, build_subscription("s", "q", predicates, space), SINCE_MS)
        assert got.dtype == np.int64 and got.shape == (0,)
    assert chunk.asked == []


# -- typed spaces ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_typed_filters_match_the_oracle(data):
    space = data.draw(spaces())
    predicates = data.draw(filters(space))
    sub = build_subscription("s", "q", predicates, space)
    msgs = data.draw(st.lists(messages(space), min_size=1, max_size=12))
    times = times_for(data.draw, len(msgs))
    chunk = typed_chunk(space, msgs, times, [data.draw(payloads) for _ in msgs])
    got = check(sub, chunk, times)
    # and the definition is the filter language's meaning
    assert got.tolist() == by_the_language(space, predicates, msgs, times)


SHOP = Space.of((Attribute("sku", STRING), Attribute("sale", BOOLEAN), Attribute("tag", STRING, optional=True),
                 Attribute("price", NUMBER, min=0.0, max=100.0), Attribute("note", STRING, optional=True)),
                ("sku", "sale", "tag", "price"))
SHOP_FILTERS = [
    {"any_of": [{"sku": {"prefix": "abcdef"}, "sale": True}, {"tag": {"in": ["red", "blue"]}, "price": [10, 20]}]},
    {"sku": {"in": ["abcdefgh", "abcdefXY", "zz", "é"]}, "sale": False},
    {"sku": {"not_in": ["abcdefgh"]}, "tag": {"suffix": "d"}, "price": {"gte": 10}},
    {"any_of": [{"note": {"exists": True}}, {"tag": {"exists": False}, "sku": {"suffix": "gh"}}]},
    {"sku": {"prefix": "ab", "not_in": ["abcdefg"]}, "tag": {"in": ["red", "reddish", "blue"]}},
    {"any_of": [{"price": {"in": [5, 15, 50]}}, {"sku": {"in": ["zz", "abcdefgh"]}, "tag": {"prefix": "r"}}]},
]
SKUS = ["abcdefgh", "abcdefg", "abcdefXY", "abcdef", "ab", "zz", "é", ""]
TAGS = [None, "red", "reddish", "blue", "bled"]


def shop_messages() -> list[dict]:
    out = []
    for i, sku in enumerate(SKUS):
        for j, tag in enumerate(TAGS):
            msg = {"sku": sku, "sale": (i + j) % 2 == 0, "price": [5, 10, 15, 19.5, 20, 50][(i * 5 + j) % 6]}
            if tag is not None:
                msg["tag"] = tag
            if (i + 2 * j) % 3 == 0:
                msg["note"] = "n"
            out.append(msg)
    return out


@pytest.mark.parametrize("predicates", SHOP_FILTERS)
def test_filters_of_several_boxes_are_checked_exactly(predicates):
    sub = build_subscription("s", "q", predicates, SHOP)
    assert sub.filter is not None and not sub.filter.exact
    msgs = shop_messages()
    times = [SINCE_MS * 1000 + OFFSETS_US[i % len(OFFSETS_US)] for i in range(len(msgs))]
    payload = [json.dumps({"i": i, "quote": FOOL}).encode() for i in range(len(msgs))]
    chunk = typed_chunk(SHOP, msgs, times, payload)
    got = check(sub, chunk, times)
    assert got.tolist() == by_the_language(SHOP, predicates, msgs, times)
    boxed = sum(sub.matches(row) for row in chunk.points.tolist())
    assert boxed > len(got) > 0  # the check drops some the boxes hold


def test_a_void_subscription_matches_nothing_and_reads_no_body():
    numbers = Space.from_json({"dimensions": [{"name": "x", "min": 0, "max": 10}]})
    clipped = build_subscription("s", "q", {"x": [20, 30]}, numbers)
    no_box = build_subscription("s", "q", {"sale": {"exists": False}}, SHOP)
    assert clipped.void and no_box.void and clipped.boxes == no_box.boxes == ()
    times = [SINCE_MS * 1000] * 3
    for sub, chunk in ((clipped, numbers_chunk(numbers, [[0.0], [5.0], [9.0]], times, [b"1"] * 3)),
                       (no_box, typed_chunk(SHOP, shop_messages()[:3], times, [b"1"] * 3))):
        got = replay_matches(chunk.points, chunk.body, sub, 0)
        assert got.dtype == np.int64 and got.shape == (0,) and chunk.asked == []
