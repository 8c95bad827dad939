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
        # Equal filters share one object and a code ([filter, subscriptions holding it, code]),
        # so that `refine` checks a message against each distinct filter once; each subscription
        # has a serial for as long as the book holds it (docs/benchmarks.md, "Typed workloads").
        self._shared: dict[Filter, list[Any]] = {}
        self.filters: dict[int, Filter] = {}  # code -> shared filter
        self._serial: dict[str, int] = {}
        self.codes = np.full(64, -1, dtype=np.int64)  # serial -> its filter's code (-1: forgotten)
        self.n_serials = self.n_codes = 0  # serials and codes handed out: never reused

    def __len__(self) -> int:
        return len(self._by_id)

    @property
    def by_id(self) -> dict[str, tuple[Filter, dict[str, Any]]]:
        """Subscription id -> (its filter, shared with equal ones; its predicates). Read only."""
        return self._by_id

    def serial_of(self, sub_id: str) -> int:
        """`sub_id`'s serial (-1: the book does not hold it)."""
        return self._serial.get(sub_id, -1)

    def learn(self, sub: Subscription) -> None:
        if sub.filter is None:
            return
        serial = self._serial.get(sub.id)
        if serial is None:
            serial = self._serial[sub.id] = self.n_serials
            self.n_serials += 1
            if serial >= len(self.codes):
                self.codes = np.concatenate([self.codes, np.full(len(self.codes), -1, dtype=np.int64)])
        else:
            self._release(self._by_id[sub.id][0])
        held = self._shared.get(sub.filter)
        if held is None:
            held = self._shared[sub.filter] = [sub.filter, 0, self.n_codes]
            self.filters[self.n_codes] = sub.filter
            self.n_codes += 1
        held[1] += 1
        self._by_id[sub.id] = (held[0], sub.predicates)
        self.codes[serial] = held[2]

    def _release(self, f: Filter) -> None:
        held = self._shared[f]
        held[1] -= 1
        if not held[1]:
            del self._shared[f]
            del self.filters[held[2]]

    def _drop(self, sub_id: str) -> None:
        got = self._by_id.pop(sub_id, None)
        if got is not None:
            self._release(got[0])
            self.codes[self._serial.pop(sub_id)] = -1

    def learn_all(self, predicates: dict[str, dict[str, Any]]) -> None:
        """Learn {id: predicates} (an old owner's export)."""
        for sub_id, preds in predicates.items():
            self.learn(build_subscription(sub_id, "", preds, self.space))

    def forget(self, sub_ids: Sequence[str]) -> None:
        for sub_id in sub_ids:
            self._drop(sub_id)

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
    its stored body, once, only if a filter asks. The entries of filters are grouped with
    arrays: a message is checked once against each distinct filter its entries name, in
    Python; the rest is numpy (docs/benchmarks.md, "Typed workloads"). A set without filters:
    as it was."""
    if book is None or not directory.n_checked or not len(ids):
        return ids, counts
    flagged = directory.checked[ids]
    if not flagged.any():
        return ids, counts
    m = len(counts)
    fi = np.flatnonzero(flagged)
    iids = ids[fi]
    serial = _serials(directory, book, iids)
    at = np.repeat(np.arange(m, dtype=np.int64), counts)[fi]
    known = serial >= 0  # an entry of a subscription the book no longer holds matches nothing
    codes = np.where(known, book.codes[np.maximum(serial, 0)], -1)
    # the first entry of each (message, subscription): a subscription counts once per message
    _, first = np.unique(at * (book.n_serials + 1) + serial, return_index=True)
    first = first[codes[first] >= 0]
    pairs, which = np.unique(at[first] * (book.n_codes + 1) + codes[first], return_inverse=True)
    held = _check(book, pairs.tolist(), book.n_codes + 1, parts)
    keep = ~flagged
    keep[fi[first]] = held[which.ravel()]
    at_all = np.repeat(np.arange(m, dtype=np.int64), counts)[keep]
    return ids[keep], np.bincount(at_all, minlength=m).astype(np.int64, copy=False)


def _serials(directory: Directory, book: FilterBook, iids: np.ndarray) -> np.ndarray:
    """Each entry's subscription serial, looked up in the book once per entry and kept."""
    serial: np.ndarray = directory.serial[iids]
    miss = serial < 0
    if miss.any():
        for iid in np.unique(iids[miss]).tolist():
            directory.serial[iid] = book.serial_of(directory.sid[iid])
        serial = directory.serial[iids]
    return serial


def _check(book: FilterBook, pairs: list[int], n_codes: int, parts: list[Part]) -> np.ndarray:
    """Whether each (message, filter) pair, as `message * n_codes + code`, holds."""
    starts = [0]
    for p in parts:
        starts.append(starts[-1] + p.n)
    cache: dict[int, dict[str, Any]] = {}
    out = np.empty(len(pairs), dtype=bool)
    for j, key in enumerate(pairs):
        point, code = divmod(key, n_codes)
        f = book.filters[code]
        if f.exact:
            out[j] = True
            continue
        attrs = cache.get(point)
        if attrs is None:
            i = bisect.bisect_right(starts, point) - 1
            attrs = cache[point] = json.loads(parts[i].body(point - starts[i]))["attributes"]
        out[j] = f.matches(attrs)
    return out
