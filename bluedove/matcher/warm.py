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
    """One subscription with a condition the index cannot decide (a string prefix), matched by
    one message: the walk's entries paired with their filters, the filters checked, kept."""
    space = Space.of((Attribute("s", STRING), Attribute("n", NUMBER, False, 0, 1)), ("n",))
    book, s = FilterBook(space), SubscriptionSet(space.k)
    sub = build_subscription("w", "q", {"s": {"prefix": "a"}, "n": [0, 1]}, space)
    book.learn(sub)
    s.book = book
    for key, lo, hi in sub.rows():
        s.add(key, sub.queue, lo, hi)
    message = {"s": "ab", "n": 0.5}
    ids, counts = s.match(np.array([[0.5]]), lambda i: message)
    assert counts.tolist() == [1], "the warm-up's message matches its one subscription"
