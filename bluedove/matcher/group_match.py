"""A set's walk of groups (bluedove/matcher/groups.py) to the subscriptions matched: each
group's filter checked once per message, the members listed only for the groups kept.

1. Every group of filter boxes the walk met has its filter's code checked against its members'
   (`valid` while no member joined or left and the book changed no subscription's filter:
   its `epoch`). A group whose members disagree (a state no write leaves for long: rows whose
   subscription the book forgot) sends the batch through `refine`, entry by entry, as before.
2. Pairs of (message, filter) are made once each, and checked in one batch
   (bluedove/matcher/filter_check.py).
3. The kept groups' members are listed. A filter of several boxes may meet a message in more
   than one group, or hold a subscription twice in one (two of its boxes equal): then, and only
   then, its members are counted once by their serial in the book (a stamp per subscription
   read at random: 8 µs of an `orders` message when every filter of several boxes paid it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from bluedove.core.jit import compiled
from bluedove.matcher.filter_book import FilterBook, refine
from bluedove.matcher.groups import Groups
from bluedove.matcher.matches import Directory, Matches

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
MIXED = -2  # a group's code when its members' filters differ


def match_groups(directory: Directory, groups: Groups, book: FilterBook | None, gids: Ints, counts: Ints,
                 attributes: Callable[[int], dict[str, Any]]) -> tuple[Ints, Ints]:
    """The walk's groups by point (gids, counts per point) as the entries matched by point
    (ids, counts), each filter checked with `attributes(point)` (`refine`'s contract)."""
    if book is None or not directory.n_checked or not len(gids):
        return groups.expand(gids, counts, directory.code)
    ids, counts, _ = _match(directory, groups, book, gids, counts, attributes, False)
    return ids, counts


def count_groups(directory: Directory, groups: Groups, book: FilterBook | None, gids: Ints, counts: Ints,
                 attributes: Callable[[int], dict[str, Any]]) -> Matches:
    """`match_groups` counted alone (a matcher that only counts): each point's matches and
    distinct queues, with no entry listed where the filters are checked by group."""
    if book is None or not directory.n_checked or not len(gids):
        return directory.matches(*groups.expand(gids, counts, directory.code), deliveries=False)
    ids, counts, fanout = _match(directory, groups, book, gids, counts, attributes, True)
    if fanout is None:
        return directory.matches(ids, counts, deliveries=False)
    return Matches(counts, fanout, _NONE, _NONE, _NONE, _NONE, _NO_SIDS, directory.names)


_NONE = np.zeros(0, dtype=np.int64)
_NO_SIDS = np.empty(0, dtype=object)


def _match(directory: Directory, groups: Groups, book: FilterBook, gids: Ints, counts: Ints,
           attributes: Callable[[int], dict[str, Any]], count_only: bool) -> tuple[Ints, Ints, Ints | None]:
    """(ids, counts per point, each point's distinct queues if `count_only`, else None); entry
    by entry (`refine`, no distinct queues) when a group's members differ."""
    if groups.judged[0] is not book or groups.judged[1] != book.epoch:
        groups.valid[:] = False
        groups.judged = (book, book.epoch)
    if not _judge(directory, groups, book, gids):
        return *refine(directory, book, *groups.expand(gids, counts, directory.code), attributes), None
    base = book.stamp(len(counts))
    which, pair_msg, pair_code, pair_once = _pairs(gids, counts, groups.checked, groups.code, book.code_seen,
                                                   book.code_pair, book.twice, base)
    exact = book.compiled.exact.a[pair_code].astype(np.bool_)  # the boxes decide: held, nothing to read
    if exact.all():
        held = exact
    else:
        held = np.ones(len(pair_code), dtype=np.bool_)
        ask = ~exact
        held[ask] = book.compiled.check(pair_msg[ask], pair_code[ask], attributes)
    ids, per, fanout = _kept(gids, counts, which, held, pair_once, groups, directory, book.seen,
                             book.stamp(len(counts)), count_only)
    return ids, per, fanout if count_only else None


def _judge(directory: Directory, groups: Groups, book: FilterBook, gids: Ints) -> bool:
    """Each filter group the walk met given its members' code; False if one's members differ."""
    stale = _stale(gids, groups.checked, groups.valid, groups.n)
    g = groups
    if len(stale):
        missing = _resolve(stale, g.head, g.nxt, g.size, directory.serial, book.codes, g.code, g.valid, False)
        if len(missing):  # entries whose subscription's serial was not looked up yet
            for iid in missing.tolist():
                directory.serial[iid] = book.serial_of(directory.sid[iid])
            _resolve(stale, g.head, g.nxt, g.size, directory.serial, book.codes, g.code, g.valid, True)
    return not _any_mixed(gids, groups.checked, groups.code)


@compiled
def _stale(gids: Ints, checked: Bools, valid: Bools, n_groups: int) -> Ints:
    """The distinct filter groups among `gids` whose code is not judged."""
    out = np.empty(len(gids), dtype=np.int64)
    met = np.zeros(n_groups, dtype=np.bool_)
    n = 0
    for g in gids:
        if checked[g] and not valid[g] and not met[g]:
            met[g] = True
            out[n] = g
            n += 1
    return out[:n]


@compiled
def _resolve(stale: Ints, head: Ints, nxt: Ints, size: Ints, serial: Ints, codes: Ints, code: Ints,
             valid: Bools, looked_up: bool) -> Ints:
    """Judge each group of `stale`: the code all its members' filters have (-1: the book holds
    none of them; MIXED: they differ). A member whose serial is not looked up (-1) leaves its
    group unjudged and is listed, unless `looked_up` (then -1 means the book does not hold it)."""
    total = 0
    for g in stale:
        total += size[g]
    missing = np.empty(total, dtype=np.int64)
    n = 0
    for g in stale:
        first, c0, gap = True, -1, False
        i = head[g]
        while i >= 0:
            s = serial[i]
            if s < 0 and not looked_up:
                gap = True
                missing[n] = i
                n += 1
            c = codes[s] if s >= 0 else -1
            if first:
                c0, first = c, False
            elif c != c0:
                c0 = MIXED
            i = nxt[i]
        if not gap:
            code[g], valid[g] = c0, True
    return missing[:n]


@compiled
def _any_mixed(gids: Ints, checked: Bools, code: Ints) -> bool:
    for g in gids:  # noqa: SIM110 (numba compiles a loop, not any() over a generator)
        if checked[g] and code[g] == MIXED:
            return True
    return False


@compiled
def _pairs(gids: Ints, counts: Ints, checked: Bools, code: Ints, code_seen: Ints, code_pair: Ints, twice: Bools,
           base: int) -> tuple[Ints, Ints, Ints, Bools]:
    """Per group met (`which`): -2 kept whole (plain subscriptions), -1 dropped (a filter the
    book no longer holds), else the index of its (message, filter) pair to check; per pair,
    whether its members are to be counted once (its filter met in two groups, or `twice`)."""
    n = len(gids)
    which = np.empty(n, dtype=np.int64)
    pair_msg = np.empty(n, dtype=np.int64)
    pair_code = np.empty(n, dtype=np.int64)
    once = np.empty(n, dtype=np.bool_)
    n_pairs = j = 0
    for m in range(len(counts)):
        stamp = base + m
        for _ in range(counts[m]):
            g = gids[j]
            if not checked[g]:
                which[j] = -2
            elif code[g] < 0:
                which[j] = -1
            else:
                c = code[g]
                if code_seen[c] != stamp:
                    code_seen[c] = stamp
                    code_pair[c] = n_pairs
                    pair_msg[n_pairs] = m
                    pair_code[n_pairs] = c
                    once[n_pairs] = twice[c]
                    n_pairs += 1
                else:
                    once[code_pair[c]] = True
                which[j] = code_pair[c]
            j += 1
    return which, pair_msg[:n_pairs], pair_code[:n_pairs], once[:n_pairs]


def _kept(gids: Ints, counts: Ints, which: Ints, held: Bools, pair_once: Bools, groups: Groups,
          directory: Directory, seen: Ints, base: int, count_only: bool) -> tuple[Ints, Ints, Ints]:
    """The members of the groups kept, by point, each subscription once a point: (ids, counts
    per point, 0s); or, `count_only`, no ids, and each point's distinct queues for the 0s."""
    g, d = groups, directory
    g.ready(d.code)
    return _kept_members(gids, counts, which, held, pair_once, g.head, g.nxt, g.size, g.start, g.stop, g.flat,
                         g.flat_queue, g.fresh, d.code, d.serial, seen, base, len(d.names), count_only)


@compiled
def _kept_size(gids: Ints, which: Ints, held: Bools, size: Ints) -> int:
    """The members of the groups kept, repeats included."""
    total = 0
    for j in range(len(gids)):
        w = which[j]
        if w == -2 or (w >= 0 and held[w]):
            total += size[gids[j]]
    return total


@compiled
def _kept_members(gids: Ints, counts: Ints, which: Ints, held: Bools, pair_once: Bools, head: Ints, nxt: Ints,
                  size: Ints, start: Ints, stop: Ints, flat: Ints, flat_queue: npt.NDArray[np.int32], fresh: Bools,
                  queue: npt.NDArray[np.int32], serial: Ints, seen: Ints, base: int, n_queues: int,
                  count_only: bool) -> tuple[Ints, Ints, Ints]:
    out = np.empty(0 if count_only else _kept_size(gids, which, held, size), dtype=np.int64)
    per = np.zeros(len(counts), dtype=np.int64)
    fanout = np.zeros(len(counts), dtype=np.int64)
    met = np.full(n_queues if count_only else 0, -1, dtype=np.int64)  # queue -> the last point it was met at
    j = n = 0
    for m in range(len(counts)):
        stamp = base + m
        for _ in range(counts[m]):
            w = which[j]
            g = gids[j]
            j += 1
            if not (w == -2 or (w >= 0 and held[w])):
                continue
            once = w >= 0 and pair_once[w]
            if fresh[g] and not once:  # the common case: the flat copy, in order
                if count_only:
                    per[m] += stop[g] - start[g]
                    for x in range(start[g], stop[g]):
                        q = flat_queue[x]
                        if met[q] != m:
                            met[q] = m
                            fanout[m] += 1
                else:
                    for x in range(start[g], stop[g]):
                        out[n] = flat[x]
                        n += 1
                continue
            x, i = start[g], head[g]
            if fresh[g]:
                i = flat[x] if x < stop[g] else -1
            while i >= 0:
                if not once or seen[serial[i]] != stamp:
                    if once:
                        seen[serial[i]] = stamp
                    if count_only:
                        per[m] += 1
                        q = queue[i]
                        if met[q] != m:
                            met[q] = m
                            fanout[m] += 1
                    else:
                        out[n] = i
                        n += 1
                if fresh[g]:
                    x += 1
                    i = flat[x] if x < stop[g] else -1
                else:
                    i = nxt[i]
        if not count_only:
            per[m] = n
    if not count_only:
        for m in range(len(counts) - 1, 0, -1):
            per[m] -= per[m - 1]
    return out[:n], per, fanout
