"""A set's answer for a run of points, kept as arrays.

The walk (`SubscriptionSet.match_ids`) gives internal ids per point. Turning them into
Python dicts of `{queue: [subscription ids]}`, one per point, cost ~1.2 µs per match: at
40,000 `paper` subscriptions (~147 matches per message) more than all the rest of a matcher.
Here the ids become queue codes by one array lookup; a point's matches and its deliveries
(distinct queues) are counted with numpy; the subscription ids are fetched (one array
gather) only when the deliveries are to be written, and Python objects are made only per
delivery, where a delivery's JSON text is made anyway.

`Directory` is the lookup a set keeps beside its trees: internal id -> queue code and
subscription id, in arrays grown by doubling. An entry may be one box of a subscription's
filter (its key `<id>#<i>`, bluedove/core/filters.py): such entries are flagged, and `refine`
counts them once per point and subscription and keeps only those whose filter holds.
Internal ids are never reused, so the arrays grow with every subscription a set ever held
(13 bytes each); a set is rebuilt fresh on a reload or hand-off.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from operator import itemgetter
from typing import Iterator, Mapping

import numpy as np

from bluedove.core.filters import BOX_SEP, sub_of
from bluedove.core.jit import compiled


class Directory:
    """Internal id -> (queue code, subscription id); queue code -> queue name; and how many
    live subscriptions each queue has in the set (a filter's boxes count once: `refine` leaves
    one per message), to know when a point's matches can share a queue (then deliveries are
    fewer than matches and need grouping)."""

    def __init__(self) -> None:
        self.code = np.full(64, -1, dtype=np.int32)  # internal id -> queue code; -1: none (removed)
        self.sid = np.empty(64, dtype=object)  # internal id -> subscription id
        self.checked = np.zeros(64, dtype=bool)  # internal id -> one box of a filter (see `refine`)
        # internal id -> its subscription's serial in the matcher's book of filters, once looked
        # up (-1: not yet; bluedove/matcher/filter_book.py `refine`)
        self.serial = np.full(64, -1, dtype=np.int64)
        self.n_checked = 0  # live entries so flagged
        self.names: list[str] = []  # queue code -> queue name (append only)
        self._codes: dict[str, int] = {}
        self._live = np.zeros(16, dtype=np.int32)  # queue code -> live subscriptions in the set
        self._boxes: dict[tuple[int, str], int] = {}  # (queue code, subscription) -> its filter's live boxes
        self.shared = 0  # queue codes with two or more live subscriptions

    def put(self, first: int, keys: list[str], queues: list[str]) -> None:
        """Internal ids first, first + 1, … are the entries `keys` (subscription ids, or a
        filter's box keys) of `queues`."""
        n = len(keys)
        end = first + n
        if end > len(self.code):
            size = max(end, 2 * len(self.code))
            self.code = np.concatenate([self.code, np.full(size - len(self.code), -1, dtype=np.int32)])
            self.sid = np.concatenate([self.sid, np.empty(size - len(self.sid), dtype=object)])
            self.checked = np.concatenate([self.checked, np.zeros(size - len(self.checked), dtype=bool)])
            self.serial = np.concatenate([self.serial, np.full(size - len(self.serial), -1, dtype=np.int64)])
        sids = self._flag(first, keys)
        if n == 1:  # a live insert: no arrays to build
            c = self._code_of(queues[0])
            self.code[first], self.sid[first] = c, sids[0]
            if not self.checked[first] or self._box_added(c, sids[0]):
                self._live[c] += 1
                self.shared += int(self._live[c] == 2)
            return
        if queues.count(queues[0]) == n:  # one queue's batch (a :batch names one): one lookup
            codes = np.full(n, self._code_of(queues[0]), dtype=np.int32)
        else:
            codes = np.fromiter((self._code_of(q) for q in queues), dtype=np.int32, count=n)
        self.code[first:end] = codes
        self.sid[first:end] = sids
        flagged = self.checked[first:end]
        if flagged.any():  # a filter's boxes count once for their queue
            new = [self._box_added(c, sid) for c, sid in zip(codes[flagged].tolist(), np.asarray(sids)[flagged])]
            codes = np.concatenate([codes[~flagged], codes[flagged][np.array(new, dtype=bool)]])
        touched = np.unique(codes)
        was = np.count_nonzero(self._live[touched] >= 2)
        np.add.at(self._live, codes, 1)
        self.shared += int(np.count_nonzero(self._live[touched] >= 2) - was)

    def _box_added(self, c: int, sid: str) -> bool:
        """A box of subscription `sid`'s filter filed for queue code c: whether it is the first."""
        n = self._boxes.get((c, sid), 0)
        self._boxes[(c, sid)] = n + 1
        return n == 0

    def _flag(self, first: int, keys: list[str]) -> list[str]:
        """The subscription ids of entries `keys` at `first`…; the boxes of filters flagged."""
        if not any(BOX_SEP in k for k in keys):
            return keys
        flags = np.fromiter((BOX_SEP in k for k in keys), dtype=bool, count=len(keys))
        self.checked[first:first + len(keys)] = flags
        self.n_checked += int(flags.sum())
        return [sub_of(k) for k in keys]

    def drop(self, iid: int) -> None:
        c = int(self.code[iid])
        if c < 0:
            return
        last = True
        if self.checked[iid]:
            self.checked[iid] = False
            self.serial[iid] = -1
            self.n_checked -= 1
            key = (c, self.sid[iid])
            self._boxes[key] -= 1
            last = not self._boxes[key]
            if last:
                del self._boxes[key]
        self.code[iid] = -1
        self.sid[iid] = None
        if not last:  # the subscription keeps other boxes for the queue
            return
        self._live[c] -= 1
        if self._live[c] == 1:
            self.shared -= 1

    def _code_of(self, queue: str) -> int:
        c = self._codes.get(queue)
        if c is None:
            c = self._codes[queue] = len(self.names)
            self.names.append(queue)
            if c >= len(self._live):
                self._live = np.concatenate([self._live, np.zeros(len(self._live), dtype=np.int32)])
        return c

    def matches(self, ids: np.ndarray, counts: np.ndarray, deliveries: bool = True) -> "Matches":
        """`match_ids`' answer (ids, counts per point) as a `Matches`; `deliveries=False`
        skips fetching the subscription ids (a matcher that only counts)."""
        m = len(counts)
        if not len(ids):
            zero = np.zeros(m, dtype=np.int64)
            return Matches(zero, zero, _EMPTY, _EMPTY, _EMPTY, _EMPTY, _NO_SIDS, self.names)
        if not deliveries and self.shared == 0:  # counting alone: one delivery per match
            return Matches(counts, counts, _EMPTY, _EMPTY, _EMPTY, _EMPTY, _NO_SIDS, self.names)
        if not deliveries:  # counting alone: each point's distinct queues, in one pass
            live, fanout = _count(ids, counts, self.code, len(self.names))
            return Matches(live, fanout, _EMPTY, _EMPTY, _EMPTY, _EMPTY, _NO_SIDS, self.names)
        codes = self.code[ids]
        at = np.repeat(np.arange(m, dtype=np.int64), counts)
        gone = codes < 0
        if gone.any():  # not expected (the walk sees only live boxes); never deliver to a removed one
            keep = ~gone
            ids, codes, at = ids[keep], codes[keep], at[keep]
            counts = np.bincount(at, minlength=m).astype(np.int64, copy=False)
        if self.shared == 0:  # every match a queue of its own within its point: one delivery each
            g = len(ids)
            starts = np.arange(g, dtype=np.int64)
            sids = self.sid[ids] if deliveries else _NO_SIDS
            return Matches(counts, counts, at, codes, starts, starts + 1, sids, self.names)
        key = at * len(self.names) + codes
        order = np.argsort(key, kind="stable")
        key = key[order]
        starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
        ends = np.append(starts[1:], len(key))
        d_at = at[order][starts]
        fanout = np.bincount(d_at, minlength=m).astype(np.int64, copy=False)
        sids = self.sid[ids[order]] if deliveries else _NO_SIDS
        return Matches(counts, fanout, d_at, codes[order][starts], starts, ends, sids, self.names)


@compiled
def _count(ids: np.ndarray, counts: np.ndarray, code: np.ndarray, n_queues: int) -> tuple[np.ndarray, np.ndarray]:
    """Per point: its live matches (never a removed entry's) and their distinct queues."""
    seen = np.full(n_queues, -1, dtype=np.int64)
    live = np.zeros(len(counts), dtype=np.int64)
    fanout = np.zeros(len(counts), dtype=np.int64)
    j = 0
    for m in range(len(counts)):
        for _ in range(counts[m]):
            c = code[ids[j]]
            j += 1
            if c < 0:
                continue
            live[m] += 1
            if seen[c] != m:
                seen[c] = m
                fanout[m] += 1
    return live, fanout


_EMPTY = np.zeros(0, dtype=np.int64)
_NO_SIDS = np.empty(0, dtype=object)


@dataclass
class Matches:
    """Per point: `counts` (subscriptions matched) and `fanout` (distinct queues: its
    deliveries). Deliveries d, ascending by point: point `at[d]`, queue `names[code[d]]`,
    subscription ids `sids[start[d]:end[d]]` (empty when fetched without them)."""

    counts: np.ndarray
    fanout: np.ndarray
    at: np.ndarray
    code: np.ndarray
    start: np.ndarray
    end: np.ndarray
    sids: np.ndarray
    names: list[str]

    def __len__(self) -> int:
        return len(self.counts)

    def part(self, lo: int, hi: int) -> "Matches":
        """Points lo..hi-1 alone, numbered from 0."""
        a, b = np.searchsorted(self.at, [lo, hi]).tolist()
        s0, s1 = (int(self.start[a]), int(self.end[b - 1])) if b > a else (0, 0)
        return Matches(self.counts[lo:hi], self.fanout[lo:hi], self.at[a:b] - lo, self.code[a:b],
                       self.start[a:b] - s0, self.end[a:b] - s0, self.sids[s0:s1] if len(self.sids) else self.sids,
                       self.names)

    def deliveries(self) -> Iterator[tuple[int, str, list[str]]]:
        """(point, queue, [subscription ids]) for every delivery, ascending by point."""
        names, sids = self.names, self.sids.tolist()
        for p, c, s, e in zip(self.at.tolist(), self.code.tolist(), self.start.tolist(), self.end.tolist()):
            yield p, names[c], sids[s:e]

    def delivery_rows(self) -> tuple[list[int], list[str], list[str]]:
        """Every delivery as three columns: its point, its queue, and the JSON text of its
        subscription ids (what the store writes). Built a column at a time: a single-id
        delivery, the common case, makes no list of its own."""
        g = len(self.at)
        if not g:
            return [], [], []
        codes = self.code.tolist()
        queues = list(itemgetter(*codes)(self.names)) if g > 1 else [self.names[codes[0]]]
        if len(self.sids) == g:  # one subscription per delivery
            ids = self.sids.tolist()
            if _plain("".join(ids)):
                texts = ['["' + x + '"]' for x in ids]
            else:
                texts = [json.dumps([x], separators=(",", ":")) for x in ids]
        else:
            sids = self.sids.tolist()
            texts = [json_strings(sids[s:e]) for s, e in zip(self.start.tolist(), self.end.tolist())]
        return self.at.tolist(), queues, texts

    def as_dicts(self, empty: Mapping[str, list[str]]) -> list[Mapping[str, list[str]]]:
        """Per point {queue: [subscription ids]} (`empty` for a point that matched nothing)."""
        out: list[Mapping[str, list[str]]] = [empty] * len(self.counts)
        for p, queue, ids in self.deliveries():
            if out[p] is empty:
                out[p] = {}
            out[p][queue] = ids  # type: ignore[index]
        return out


def _plain(text: str) -> bool:
    """`text` goes into a JSON string as it is (no quote, backslash or control character)."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


def json_strings(items: list[str]) -> str:
    """`json.dumps(items)` (compact) for a list of strings, by joining them when none needs
    escaping, as the service's hex subscription ids never do (json.dumps was ~5 % of a loaded
    matcher's CPU)."""
    joined = '","'.join(items)
    if joined.isascii() and joined.isprintable() and "\\" not in joined and joined.count('"') == 2 * len(items) - 2:
        return f'["{joined}"]'
    return json.dumps(items, separators=(",", ":"))
