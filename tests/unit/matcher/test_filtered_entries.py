"""A set holding subscriptions with filters (bluedove/matcher/filter_book.py `refine`):
each box of a filter is an entry of its own, and a point's matches name each subscription
once, only where its filter holds. Checked against the filters on random workloads, with
removals, in numeric spaces (the boxes of `in`, `not_in` and `any_of`)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.core.model import build_subscription
from bluedove.core.space import Dimension, Space
from bluedove.matcher.filter_book import FilterBook, refine
from bluedove.matcher.index import PackThresholds, SubscriptionSet

SPACE = Space((Dimension("x", 0, 10), Dimension("y", 0, 10)))
GRID = [0.0, 1.0, 2.0, 2.5, 5.0, 7.0, 9.0]  # points land on the values filters name, and between
values = st.sampled_from(GRID)


@st.composite
def predicates(draw) -> dict:
    def condition():
        return draw(st.one_of(
            st.tuples(values, values).filter(lambda p: p[0] < p[1]).map(list),
            st.builds(lambda xs: {"in": xs}, st.lists(values, min_size=1, max_size=3)),
            st.builds(lambda xs: {"not_in": xs}, st.lists(values, min_size=1, max_size=2)),
            st.builds(lambda a, b: {"gt": a, "lte": b}, values, values), values))

    def mapping():
        return {n: condition() for n in draw(st.lists(st.sampled_from(["x", "y"]), max_size=2, unique=True))}

    out = mapping()
    if draw(st.booleans()):
        out["any_of"] = [mapping() for _ in range(draw(st.integers(1, 3)))]
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(predicates(), min_size=1, max_size=12), st.lists(st.tuples(values, values), min_size=1, max_size=15),
       st.data())
def test_each_subscription_matches_once_and_only_where_its_filter_holds(filters, points, data):
    subs = [build_subscription(f"s{i}", f"q{i % 3}", p, SPACE) for i, p in enumerate(filters)]
    s = SubscriptionSet(2, PackThresholds(bulk_min=4, delta_min=2, ratio=2))  # packs mid-way too
    live = {sub.id: sub for sub in subs}
    book = FilterBook(SPACE)
    for sub in subs:
        book.learn(sub)
        rows = sub.rows()
        if rows and data.draw(st.booleans()):
            s.add_many([r[0] for r in rows], [sub.queue] * len(rows), np.array([r[1] for r in rows]),
                       np.array([r[2] for r in rows]))
        else:
            for key, lows, highs in rows:
                s.add(key, sub.queue, lows, highs)
    for sub in data.draw(st.lists(st.sampled_from(subs), max_size=4, unique_by=lambda x: x.id)):
        for key, _, _ in sub.rows():
            s.remove(key)
        del live[sub.id]
        book.forget([sub.id])
    pts = np.array(points, dtype=np.float64)
    attrs = [{"x": x, "y": y} for x, y in points]
    ids, counts = s.match_ids(pts)
    m = s.directory.matches(*refine(s.directory, book, ids, counts, lambda p: attrs[p]))
    got = sorted((p, sid) for p, _q, sids in m.deliveries() for sid in sids)
    want = sorted((p, sub.id) for p in range(len(points)) for sub in live.values()
                  if (sub.filter.matches(attrs[p]) if sub.filter is not None else sub.matches(points[p])))
    assert got == want
    assert m.counts.tolist() == [sum(1 for q, _ in want if q == p) for p in range(len(points))]


def test_a_set_without_filters_is_answered_as_it_was():
    s = SubscriptionSet(2)
    s.add("a", "q", (0, 0), (5, 5))
    ids, counts = s.match_ids(np.array([[1.0, 1.0]]))
    out = refine(s.directory, FilterBook(SPACE), ids, counts, lambda p: {})
    assert out[0] is ids and out[1] is counts  # not even looked at


def test_a_filters_boxes_count_once_for_their_queue():
    s = SubscriptionSet(2)
    s.add_many(["f#0", "f#1", "f#2"], ["q"] * 3, np.array([[0, 0], [2, 0], [4, 0]]), np.array([[1, 1], [3, 1], [5, 1]]))
    assert s.directory.shared == 0  # one subscription in q: a message's matches are each a queue of their own
    s.add("g", "q", (0, 0), (9, 9))
    assert s.directory.shared == 1  # two subscriptions share q
    s.remove("g")
    s.remove("f#0")
    assert s.directory.shared == 0
    s.add("h#0", "q", (6, 0), (7, 1))  # a second filter in q, box by box
    assert s.directory.shared == 1
    for key in ("f#1", "f#2"):
        s.remove(key)
    assert s.directory.shared == 0
