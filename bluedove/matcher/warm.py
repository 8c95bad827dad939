"""Every compiled loop a matcher runs, compiled (or loaded from the on-disk cache) before it
joins: a first compile holds the GIL for a second or more, and a member that stops answering
that long is suspected by the others. The image's build runs this too (Dockerfile)."""

from __future__ import annotations

import numpy as np

from bluedove.core.attributes import NUMBER, STRING, Attribute
from bluedove.core.model import build_subscription
from bluedove.core.space import Space
from bluedove.matcher import levels
from bluedove.matcher.filter_book import FilterBook
from bluedove.matcher.index import SubscriptionSet


def warm_up() -> None:
    """The levels' walks (levels.warm_up), then a typed set's: a filter checked after the walk."""
    levels.warm_up()
    _typed()


def _typed() -> None:
    """Subscriptions with a condition the index cannot decide (a string prefix), matched by one
    message, as a matcher's sets run them (bluedove/matcher/group_match.py): equal boxes filed
    in a group (one by one, and in bulk), the group's filter checked, its members listed, and
    counted alone; the flat copy of the members; a set's export; a removal; and the entry by
    entry check (`refine`) that rows whose filter the book forgot go through."""
    space = Space.of((Attribute("s", STRING), Attribute("n", NUMBER, False, 0, 1)), ("n",))
    book, s = FilterBook(space), SubscriptionSet(space.k)
    s.book = book
    s.groups.flat_min = 0  # the flat copy made at the first match, so that its loops compile too
    subs = [build_subscription(f"w{i}", "q", {"s": {"prefix": "a"}, "n": [0, 1]}, space) for i in range(3)]
    for sub in subs:
        book.learn(sub)
    for key, lo, hi in subs[0].rows():
        s.add(key, subs[0].queue, lo, hi)
    rows = [r for sub in subs[1:] for r in sub.rows()]
    s.add_many([r[0] for r in rows], ["q"] * len(rows), np.array([r[1] for r in rows]), np.array([r[2] for r in rows]))
    message = {"s": "ab", "n": 0.5}
    point = np.array([[0.5]])
    assert s.match(point, lambda i: message)[1].tolist() == [3], "the warm-up's message matches its subscriptions"
    assert s.count(point, lambda i: message).fanout.tolist() == [1]
    assert s.match_ids(point)[1].tolist() == [3] and len(s.export(0, 0.0, 1.0)[0]) == 3
    book.forget(["w0"])  # its rows remain: the group's members differ, checked entry by entry
    assert s.match(point, lambda i: message)[1].tolist() == [2]
    assert s.count(point, lambda i: message).fanout.tolist() == [1]  # (the count after it)
    s.remove_many([r[0] for r in subs[0].rows()])
