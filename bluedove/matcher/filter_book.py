"""The filters a matcher checks after its index (docs/design.md, "Typed attributes").

A subscription whose filter is several boxes, or needs a check the boxes cannot make
(`not_in`, say), is held as one index entry per box (`<id>#<i>`: bluedove/core/filters.py).
When a point's message lands in such an entry, the matcher counts the subscription once and
asks its filter whether the message's attributes match (`refine`, below). The book keeps those
filters by subscription id, for every set of the matcher and across its reloads: it learns one
wherever the matcher learns such a subscription (the catalogue, a dispatcher's direct call, an
old owner's export) and forgets it when the subscription is removed.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from bluedove.core.filters import Filter
from bluedove.core.jit import compiled
from bluedove.core.model import Subscription, build_subscription
from bluedove.core.space import Space
from bluedove.core.wire import Part
from bluedove.matcher.filter_check import CompiledFilters
from bluedove.matcher.matches import Directory

Ints = npt.NDArray[np.int64]


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
        self._serial: dict[str, int] = {}
        self.codes = np.full(64, -1, dtype=np.int64)  # serial -> its filter's code (-1: forgotten)
        self.n_serials = self.n_codes = 0  # serials and codes handed out: never reused
        self.compiled = CompiledFilters()  # the distinct filters, as the batch check reads them
        # code -> its filter has two equal boxes (a set's group of them holds it twice)
        self.twice = np.zeros(64, dtype=np.bool_)
        # Moves when a subscription held loses its filter or gets another: what a set's groups
        # judged of their members' filters is judged again (bluedove/matcher/group_match.py).
        self.epoch = 0
        # `refine`'s scratch, kept between calls (it runs on the index thread alone): per serial
        # and per code the stamp of the last message that named it, and the code's pair
        self.seen = np.full(64, -1, dtype=np.int64)
        self.code_seen = np.full(64, -1, dtype=np.int64)
        self.code_pair = np.zeros(64, dtype=np.int64)
        self._stamp = 0

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
                self.seen = np.concatenate([self.seen, np.full(len(self.seen), -1, dtype=np.int64)])
        else:
            was = self._by_id[sub.id][0]
            if was == sub.filter:  # the same filter again (an add met twice): nothing changes
                self._by_id[sub.id] = (was, sub.predicates)
                return
            self._release(was)
            self.epoch += 1
        held = self._shared.get(sub.filter)
        if held is None:
            held = self._shared[sub.filter] = [sub.filter, 0, self.n_codes]
            self.compiled.add(self.n_codes, sub.filter)
            self.n_codes += 1
            if self.n_codes > len(self.code_seen):
                self.code_seen = np.concatenate([self.code_seen, np.full(len(self.code_seen), -1, dtype=np.int64)])
                self.code_pair = np.concatenate([self.code_pair, np.zeros(len(self.code_pair), dtype=np.int64)])
                self.twice = np.concatenate([self.twice, np.zeros(len(self.twice), dtype=np.bool_)])
            self.twice[held[2]] = len(set(sub.filter.boxes)) < len(sub.filter.boxes)
        held[1] += 1
        self._by_id[sub.id] = (held[0], sub.predicates)
        self.codes[serial] = held[2]

    def _release(self, f: Filter) -> None:
        held = self._shared[f]
        held[1] -= 1
        if not held[1]:
            del self._shared[f]
            self.compiled.drop(held[2])

    def _drop(self, sub_id: str) -> None:
        got = self._by_id.pop(sub_id, None)
        if got is not None:
            self._release(got[0])
            self.codes[self._serial.pop(sub_id)] = -1
            self.epoch += 1

    def stamp(self, n: int) -> int:
        """The first of `n` fresh message stamps for `refine`'s scratch."""
        base = self._stamp
        self._stamp += n
        return base

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


def refine(directory: Directory, book: FilterBook | None, ids: np.ndarray, counts: np.ndarray,
           attributes: Callable[[int], dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """A set's walk (`match_ids`' answer: ids by point, counts per point) with each filter's
    boxes counted once per point and kept where the filter holds on the point's message,
    whose attributes `attributes(point)` gives (`reader`: from the stored bodies), asked once
    and only if a filter needs them. One compiled pass finds each message's first
    entry of each subscription and the distinct filters to check; the check is
    bluedove/matcher/filter_check.py's (docs/benchmarks.md, "Typed workloads"). A set without
    filters: as it was."""
    if book is None or not directory.n_checked or not len(ids):
        return ids, counts
    base = book.stamp(len(counts))
    which, pair_msg, pair_code, missing = _pairs(ids, counts, directory.checked, directory.serial, book.codes,
                                                 book.seen, book.code_seen, book.code_pair, base)
    if len(missing):  # entries whose subscription's serial was not looked up yet
        for iid in np.unique(missing).tolist():
            directory.serial[iid] = book.serial_of(directory.sid[iid])
        base = book.stamp(len(counts))
        which, pair_msg, pair_code, _ = _pairs(ids, counts, directory.checked, directory.serial, book.codes,
                                               book.seen, book.code_seen, book.code_pair, base)
    held = book.compiled.check(pair_msg, pair_code, attributes)
    keep, kept = _keep(which, held, counts)
    return ids[keep], kept


class _Body(msgspec.Struct):
    """What the check reads of a stored body: its attributes (the rest is skipped unread)."""

    attributes: dict[str, Any]


_BODY = msgspec.json.Decoder(_Body)


def reader(parts: list[Part]) -> Callable[[int], dict[str, Any]]:
    """Point i of `parts` (in order) -> its message's attributes, read from its stored body
    (msgspec, reading `attributes` alone: json.loads of the whole body was a third of a typed
    message's check)."""
    starts = [0]
    for p in parts:
        starts.append(starts[-1] + p.n)
    if len(parts) == 1:
        body = parts[0].body
        return lambda point: _BODY.decode(body(point)).attributes

    def attributes(point: int) -> dict[str, Any]:
        i = bisect.bisect_right(starts, point) - 1
        return _BODY.decode(parts[i].body(point - starts[i])).attributes
    return attributes


@compiled
def _pairs(ids: Ints, counts: Ints, checked: npt.NDArray[np.bool_], serial: Ints, codes: Ints, seen: Ints,
           code_seen: Ints, code_pair: Ints, base: int) -> tuple[Ints, Ints, Ints, Ints]:
    """Per entry of the walk (`which`): -2 kept as it is (no filter), -1 dropped (a subscription
    counted already for this message, one the book no longer holds, or one whose serial is not
    looked up: listed in `missing`), else the index of its (message, filter) pair to check.
    `seen`/`code_seen` hold stamps (`base` + message) so that they are never cleared."""
    n = len(ids)
    which = np.empty(n, dtype=np.int64)
    pair_msg = np.empty(n, dtype=np.int64)
    pair_code = np.empty(n, dtype=np.int64)
    missing = np.empty(n, dtype=np.int64)
    n_pairs = n_missing = j = 0
    for m in range(len(counts)):
        stamp = base + m
        for _ in range(counts[m]):
            iid = ids[j]
            which[j] = -2
            if checked[iid]:
                which[j] = -1
                s = serial[iid]
                if s == -1:
                    missing[n_missing] = iid
                    n_missing += 1
                elif s >= 0 and codes[s] >= 0 and seen[s] != stamp:
                    seen[s] = stamp
                    c = codes[s]
                    if code_seen[c] != stamp:
                        code_seen[c] = stamp
                        code_pair[c] = n_pairs
                        pair_msg[n_pairs] = m
                        pair_code[n_pairs] = c
                        n_pairs += 1
                    which[j] = code_pair[c]
            j += 1
    return which, pair_msg[:n_pairs], pair_code[:n_pairs], missing[:n_missing]


@compiled
def _keep(which: Ints, held: npt.NDArray[np.bool_], counts: Ints) -> tuple[npt.NDArray[np.bool_], Ints]:
    """The entries kept (no filter, or their pair held) and how many per message."""
    keep = np.empty(len(which), dtype=np.bool_)
    kept = np.zeros(len(counts), dtype=np.int64)
    j = 0
    for m in range(len(counts)):
        for _ in range(counts[m]):
            w = which[j]
            k = w == -2 or (w >= 0 and held[w])
            keep[j] = k
            if k:
                kept[m] += 1
            j += 1
    return keep, kept
