"""The filters a matcher checks after its index (docs/design.md, "Typed attributes").

A subscription whose filter is several boxes, or needs a check the boxes cannot make
(`not_in`, say), is held as one index entry per box (`<id>#<i>`: bluedove/core/filters.py).
When a point's message lands in such an entry, the matcher counts the subscription once and
asks its filter whether the message's attributes match (`Directory.refine`,
bluedove/matcher/matches.py). The book keeps those filters by subscription id, for every set
of the matcher and across its reloads: it learns one wherever the matcher learns such a
subscription (the catalogue, a dispatcher's direct call, an old owner's export) and forgets
it when the subscription is removed.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bluedove.core.filters import Filter
from bluedove.core.model import Subscription, build_subscription
from bluedove.core.space import Space
from bluedove.core.wire import Part
from bluedove.matcher.matches import Directory


class FilterBook:
    """Subscription id -> its filter and predicates, for the subscriptions held as several
    boxes or checked after the index."""

    def __init__(self, space: Space) -> None:
        self.space = space
        self._by_id: dict[str, tuple[Filter, dict[str, Any]]] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def learn(self, sub: Subscription) -> None:
        if sub.filter is not None:
            self._by_id[sub.id] = (sub.filter, sub.predicates)

    def learn_all(self, predicates: dict[str, dict[str, Any]]) -> None:
        """Learn {id: predicates} (an old owner's export)."""
        for sub_id, preds in predicates.items():
            self.learn(build_subscription(sub_id, "", preds, self.space))

    def forget(self, sub_ids: Sequence[str]) -> None:
        for sub_id in sub_ids:
            self._by_id.pop(sub_id, None)

    def predicates(self, sub_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """{id: predicates} of those of `sub_ids` the book holds."""
        return {s: self._by_id[s][1] for s in sub_ids if s in self._by_id}

    def holds(self, sub_id: str, attributes: Callable[[], dict[str, Any]]) -> bool:
        """Whether `sub_id`'s filter matches the message whose `attributes()` these are. A
        filter the book does not know matches nothing: it was removed meanwhile."""
        got = self._by_id.get(sub_id)
        if got is None:
            return False
        f = got[0]
        return f.exact or f.matches(attributes())


def refine(directory: Directory, book: FilterBook | None, ids: np.ndarray, counts: np.ndarray,
           parts: list[Part]) -> tuple[np.ndarray, np.ndarray]:
    """A set's walk over the points of `parts` (in order), with each filter's boxes counted
    once per message and kept where the filter holds; a message's attributes are read from
    its stored body, once, only if a filter asks. A set without filters: as it was."""
    if book is None or not directory.n_checked or not len(ids):
        return ids, counts
    starts = [0]
    for p in parts:
        starts.append(starts[-1] + p.n)
    cache: dict[int, dict[str, Any]] = {}

    def attributes_of(point: int) -> Callable[[], dict[str, Any]]:
        def read() -> dict[str, Any]:
            if point not in cache:
                i = bisect.bisect_right(starts, point) - 1
                cache[point] = json.loads(parts[i].body(point - starts[i]))["attributes"]
            return cache[point]
        return read

    return directory.refine(ids, counts, lambda p, sid: book.holds(sid, attributes_of(p)))
