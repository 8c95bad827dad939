"""Equal boxes held once (bluedove/matcher/groups.py) and matched by group
(bluedove/matcher/group_match.py): a set's trees hold each distinct box a single time, each
group's filter is checked once a message, and each subscription is still matched exactly once,
only where its own filter holds: through adds, removals, filter changes, a book learnt late,
a book that forgot a filter whose rows remain, and members read from the flat copy or the lists."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.core.model import Subscription, build_subscription
from bluedove.core.space import Dimension, Space
from bluedove.matcher.filter_book import FilterBook
from bluedove.matcher.index import PackThresholds, SubscriptionSet

SPACE = Space((Dimension("x", 0, 10), Dimension("y", 0, 10)))
GRID = [0.0, 1.0, 2.0, 2.5, 5.0, 7.0, 9.0]
# A small pool, so that subscriptions share filters and boxes: plain ranges, several boxes, a
# check the boxes cannot make (`not_in`), and equal boxes in one filter (two alternatives that
# differ only where the boxes do not look: both are the box x in [1, 5)).
POOL = [
    {"x": [1.0, 5.0]},
    {"x": [1.0, 5.0], "y": [0.0, 7.0]},
    {"x": {"in": [1.0, 2.5, 7.0]}},
    {"x": {"not_in": [2.0]}, "y": [2.0, 9.0]},
    {"any_of": [{"x": [1.0, 5.0], "y": {"not_in": [2.5]}}, {"x": [1.0, 5.0], "y": {"not_in": [7.0]}}]},
    {"any_of": [{"x": [0.0, 2.5]}, {"y": [2.0, 5.0]}]},
    {"y": {"gt": 2.0, "lte": 7.0}},
]


def _sub(sid: str, pool_index: int) -> Subscription:
    return build_subscription(sid, f"q{int(sid[1:]) % 3}", POOL[pool_index], SPACE)


def _add(s: SubscriptionSet, sub: Subscription, bulk: bool) -> None:
    rows = sub.rows()
    if bulk and rows:
        s.add_many([r[0] for r in rows], [sub.queue] * len(rows), np.array([r[1] for r in rows]),
                   np.array([r[2] for r in rows]))
    else:
        for key, lo, hi in rows:
            s.add(key, sub.queue, lo, hi)


def _remove(s: SubscriptionSet, sub: Subscription) -> None:
    for key, _, _ in sub.rows():
        s.remove(key)


def _matched(s: SubscriptionSet, points: list[tuple[float, float]]) -> list[list[str]]:
    """Each point's matches, with repeats kept (a subscription must come once)."""
    pts = np.array(points, dtype=np.float64)
    ids, counts = s.match(pts, lambda p: dict(zip(SPACE.names, pts[p].tolist())))
    out, pos = [], 0
    for c in counts.tolist():
        out.append(sorted(str(s.directory.sid[i]) for i in ids[pos:pos + c].tolist()))
        pos += c
    return out


def _holds(sub: Subscription, point: tuple[float, float]) -> bool:
    """The core's exact answer: the filter on the message's attributes, else the box."""
    return sub.filter.matches(dict(zip(SPACE.names, point))) if sub.filter is not None else sub.matches(point)


def _oracle(live: dict[str, Subscription], points: list[tuple[float, float]]) -> list[list[str]]:
    return [sorted(sid for sid, sub in live.items() if _holds(sub, p)) for p in points]


def _check(s: SubscriptionSet, live: dict[str, Subscription], points: list[tuple[float, float]]) -> None:
    """The entries matched, and the count alone (matches, distinct queues), against the oracle."""
    want = _oracle(live, points)
    assert _matched(s, points) == want
    pts = np.array(points, dtype=np.float64)
    m = s.count(pts, lambda p: dict(zip(SPACE.names, pts[p].tolist())))
    assert m.counts.tolist() == [len(w) for w in want]
    assert m.fanout.tolist() == [len({live[x].queue for x in w}) for w in want]


@settings(max_examples=120, deadline=None)
@given(st.lists(st.integers(0, len(POOL) - 1), min_size=1, max_size=16),
       st.lists(st.tuples(st.sampled_from(GRID), st.sampled_from(GRID)), min_size=1, max_size=12),
       st.booleans(), st.data())
def test_each_subscription_matches_once_where_its_own_filter_holds(pool, points, flat, data):
    s = SubscriptionSet(2, PackThresholds(bulk_min=4, delta_min=2, ratio=2))
    s.groups.flat_min = 0 if flat else 10**9  # members read from the flat copy, or from the lists alone
    book = s.book = FilterBook(SPACE)
    live: dict[str, Subscription] = {}
    for i, p in enumerate(pool):
        sub = _sub(f"s{i}", p)
        book.learn(sub)
        _add(s, sub, data.draw(st.booleans()))
        live[sub.id] = sub
    _check(s, live, points)
    for _ in range(data.draw(st.integers(1, 3))):  # removals and filter changes between matches
        sub = data.draw(st.sampled_from(sorted(live.values(), key=lambda x: x.id))) if live else None
        if sub is None:
            break
        book.forget([sub.id])
        _remove(s, sub)
        del live[sub.id]
        if data.draw(st.booleans()):  # a new filter for the id (what a replace does)
            new = _sub(sub.id, data.draw(st.integers(0, len(POOL) - 1)))
            book.learn(new)
            _add(s, new, data.draw(st.booleans()))
            live[new.id] = new
        _check(s, live, points)


def test_equal_boxes_are_held_once_in_the_trees_and_go_with_their_last_member():
    s = SubscriptionSet(2)
    book = s.book = FilterBook(SPACE)
    subs = [_sub(f"s{i}", 2) for i in range(50)]  # one filter of three boxes, 50 subscribers
    for sub in subs:
        book.learn(sub)
        _add(s, sub, bulk=True)
    assert s._levels.live == 3 and s.groups.entries == 150
    assert _matched(s, [(2.5, 1.0)]) == [sorted(x.id for x in subs)]
    for sub in subs[:-1]:
        book.forget([sub.id])
        _remove(s, sub)
    assert s._levels.live == 3 and _matched(s, [(2.5, 1.0), (3.0, 1.0)]) == [["s49"], []]
    book.forget(["s49"])
    _remove(s, subs[-1])
    assert s._levels.live == 0 and s.groups.live == 0 and _matched(s, [(2.5, 1.0)]) == [[]]


def test_a_filter_of_equal_boxes_counts_its_subscription_once():
    s = SubscriptionSet(2)
    book = s.book = FilterBook(SPACE)
    sub = _sub("s0", 4)  # any_of: two alternatives, one box
    assert len(sub.rows()) == 2 and sub.rows()[0][1:] == sub.rows()[1][1:]
    book.learn(sub)
    _add(s, sub, bulk=False)
    assert s._levels.live == 1 and _matched(s, [(2.0, 2.5), (2.0, 7.0), (2.0, 5.0)]) == [["s0"], ["s0"], ["s0"]]


def test_rows_filed_before_the_book_knew_their_filter_are_matched_alone_and_exactly():
    s = SubscriptionSet(2)
    subs = [_sub(f"s{i}", 3) for i in range(4)]
    for sub in subs:
        _add(s, sub, bulk=True)  # no book yet: each row a group of its own
    book = s.book = FilterBook(SPACE)
    for sub in subs:
        book.learn(sub)
    assert s._levels.live == 4
    assert _matched(s, [(1.0, 2.0), (2.0, 2.0)]) == [[x.id for x in subs], []]


def test_rows_whose_filter_the_book_forgot_stop_matching_and_the_others_do_not():
    """The book forgets one subscription of a group while its rows remain (a state no write
    leaves, matched entry by entry): it stops matching; the group's others still match."""
    s = SubscriptionSet(2)
    book = s.book = FilterBook(SPACE)
    for i in range(3):
        sub = _sub(f"s{i}", 3)
        book.learn(sub)
        _add(s, sub, bulk=True)
    assert _matched(s, [(1.0, 2.0)]) == [["s0", "s1", "s2"]]
    book.forget(["s1"])
    assert _matched(s, [(1.0, 2.0)]) == [["s0", "s2"]]
    book.forget(["s0", "s2"])
    assert _matched(s, [(1.0, 2.0)]) == [[]]


def test_counting_alone_gives_each_points_matches_and_distinct_queues():
    s = SubscriptionSet(2)
    book = s.book = FilterBook(SPACE)
    for i in range(7):  # queues q0, q1, q2 by id: s0, s3, s6 share q0
        sub = _sub(f"s{i}", 0)
        book.learn(sub)
        _add(s, sub, bulk=False)
    m = s.matches(np.array([[2.0, 3.0], [6.0, 3.0]]), deliveries=False)
    assert m.counts.tolist() == [7, 0] and m.fanout.tolist() == [3, 0]
