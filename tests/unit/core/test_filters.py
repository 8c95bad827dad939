"""bluedove/core/filters.py against an oracle: the filter language's meaning (docs/design.md,
"Typed attributes") written directly, on random typed spaces, filters and messages.

Three properties: the filter matches exactly what the oracle matches; every message the
oracle matches lies in one of the filter's boxes (the index never misses one); and when the
filter says its boxes alone decide, every message in a box matches. The strings come from a
small alphabet with long shared beginnings, so that many share their encoded bytes.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bluedove.core.attributes import BOOLEAN, NUMBER, STRING, WIDTH, Attribute
from bluedove.core.filters import Filter, parse_filter
from bluedove.core.space import Space

# Strings with shared beginnings longer than the encoded width, empty ones, NULs, non-ASCII:
# mostly from a small pool, so that a message's value often equals a filter's.
_POOL = ["", "a", "a\x00", "ab", "abcdef", "abcdef\x00", "abcdefg", "abcdefgh", "abcdeg", "é", "éa", "\x00", "zz"]
strings = st.one_of(st.sampled_from(_POOL), st.builds(lambda stem, tail: stem + tail, st.sampled_from(_POOL),
                                                      st.text(alphabet="ab\x00é€", max_size=3)))
numbers = st.one_of(st.sampled_from([0.0, 1.0, 2.5, 5.0, 9.999999999999998, 10.0, -1.0]),
                    st.floats(-1, 11, allow_nan=False))


@st.composite
def spaces(draw) -> Space:
    n = draw(st.integers(1, 4))
    attrs = []
    for i in range(n):
        kind = draw(st.sampled_from([NUMBER, STRING, BOOLEAN]))
        optional = draw(st.booleans())
        attrs.append(Attribute(f"a{i}", kind, optional, 0.0, 10.0) if kind == NUMBER else Attribute(f"a{i}", kind,
                                                                                                   optional))
    names = [a.name for a in attrs]
    partition = draw(st.lists(st.sampled_from(names), min_size=1, max_size=n, unique=True))
    return Space.of(tuple(attrs), tuple(partition))


def _value(a: Attribute):
    return {NUMBER: numbers.filter(lambda v: 0 <= v < 10), STRING: strings, BOOLEAN: st.booleans()}[a.type]


def _compare(a: Attribute):
    return {NUMBER: numbers, STRING: strings, BOOLEAN: st.booleans()}[a.type]


@st.composite
def conditions(draw, a: Attribute):
    v = _compare(a)
    if a.type == BOOLEAN:
        return draw(st.one_of(st.booleans(), st.builds(lambda x: {"eq": x}, st.booleans()),
                              st.builds(lambda x: {"exists": x}, st.booleans())))
    forms = [v, st.builds(lambda x: {"eq": x}, v),
             st.builds(lambda xs: {"in": xs}, st.lists(v, min_size=1, max_size=4)),
             st.builds(lambda xs: {"not_in": xs}, st.lists(v, min_size=1, max_size=3)),
             st.builds(lambda x: {"exists": x}, st.booleans()),
             st.builds(lambda lo, lop, hi, hop: {lop: lo, hop: hi}, v, st.sampled_from(["gt", "gte"]), v,
                       st.sampled_from(["lt", "lte"])),
             st.builds(lambda x, op: {op: x}, v, st.sampled_from(["gt", "gte", "lt", "lte"]))]
    if a.type == NUMBER:
        forms.append(st.tuples(numbers, numbers).filter(lambda p: p[0] < p[1]).map(list))
    else:
        forms += [st.builds(lambda x: {"prefix": x}, strings), st.builds(lambda x: {"suffix": x}, strings),
                  st.builds(lambda p, x: {"prefix": p, "not_in": [x]}, strings, strings)]
    return draw(st.one_of(forms))


@st.composite
def filters(draw, space: Space):
    def mapping():
        chosen = draw(st.lists(st.sampled_from(space.schema), max_size=3, unique_by=lambda a: a.name))
        return {a.name: draw(conditions(a)) for a in chosen}

    out = mapping()
    if draw(st.booleans()):
        out["any_of"] = [mapping() for _ in range(draw(st.integers(1, 3)))]
    return out


@st.composite
def messages(draw, space: Space):
    out = {}
    for a in space.schema:
        if a.optional and draw(st.booleans()):
            continue
        out[a.name] = draw(_value(a))
    return out


# -- the oracle: the language's meaning, written directly -----------------------------------


def _key(a: Attribute, v):
    return v.encode() if a.type == STRING else v  # strings compare byte-wise, as UTF-8


def _one(a: Attribute, cond, v) -> bool:
    if isinstance(cond, dict) and "exists" in cond and cond["exists"] is False:
        return v is None
    if v is None:
        return False
    if isinstance(cond, list):
        return cond[0] <= v < cond[1]
    if not isinstance(cond, dict):
        return v == cond
    ok = True
    for op, arg in cond.items():
        if op == "eq":
            ok &= v == arg
        elif op == "in":
            ok &= any(v == x for x in arg)
        elif op == "not_in":
            ok &= all(v != x for x in arg)
        elif op == "prefix":
            ok &= v.encode().startswith(arg.encode())
        elif op == "suffix":
            ok &= v.encode().endswith(arg.encode())
        elif op in ("gt", "gte", "lt", "lte"):
            x, y = _key(a, v), _key(a, arg)
            ok &= {"gt": x > y, "gte": x >= y, "lt": x < y, "lte": x <= y}[op]
    return ok


def oracle(space: Space, predicates: dict, msg: dict) -> bool:
    def all_hold(mapping: dict) -> bool:
        return all(_one(space.by_name[n], c, msg.get(n)) for n, c in mapping.items() if n != "any_of")

    return all_hold(predicates) and ("any_of" not in predicates or any(all_hold(m) for m in predicates["any_of"]))


def _in_a_box(f: Filter, space: Space, msg: dict) -> bool:
    point = [space.by_name[d.name].coordinate(msg.get(d.name)) for d in space.dimensions]
    return any(all(lo <= x < hi for lo, x, hi in zip(lows, point, highs)) for lows, highs in f.boxes)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_filter_matches_what_the_oracle_does_and_its_boxes_hold_every_match(data):
    space = data.draw(spaces())
    predicates = data.draw(filters(space))
    f = parse_filter(predicates, space)
    for _ in range(8):
        msg = data.draw(messages(space))
        want = oracle(space, predicates, msg)
        assert f.matches(msg) == want, (predicates, msg)
        if want:
            assert _in_a_box(f, space, msg), (predicates, msg, f.boxes)  # the index never misses one
        elif f.exact:
            assert not _in_a_box(f, space, msg), (predicates, msg)  # the boxes alone decide


def test_strings_that_share_their_encoded_bytes_do_not_match_by_accident():
    space = Space.of((Attribute("sku", STRING),), ("sku",))
    long = "abcdefgh"
    f = parse_filter({"sku": long}, space)
    assert not f.exact and len(f.boxes) == 1
    twins = ["abcdefXY", "abcdef", "abcdefgh\x00", "abcdefghi"]
    assert all(_in_a_box(f, space, {"sku": t}) for t in twins)  # one cell for all of them...
    assert [f.matches({"sku": t}) for t in [long, *twins]] == [True, False, False, False, False]  # ...one match
    assert len(long.encode()) > WIDTH


def test_numeric_filters_need_no_check_after_the_index():
    space = Space.from_json({"dimensions": [{"name": "x", "min": 0, "max": 10}, {"name": "y", "min": 0, "max": 10}]})
    for predicates in ({"x": [1, 2]}, {"x": {"gt": 1, "lte": 2}}, {"x": {"in": [1, 3]}, "y": 4},
                       {"any_of": [{"x": [0, 1]}, {"y": [5, 6]}]}):
        assert parse_filter(predicates, space).exact, predicates
    gt = parse_filter({"x": {"gt": 1, "lte": 2}}, space)
    assert gt.boxes == (((math.nextafter(1, 2), 0.0), (math.nextafter(2, 3), 10.0)),)
    assert not parse_filter({"x": {"not_in": [1]}}, space).exact
