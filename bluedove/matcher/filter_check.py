"""The exact check after the index, for a batch of (message, filter) pairs at once.

`refine` (bluedove/matcher/filter_book.py) ends with pairs of a message and a filter to check.
Asking each filter in Python (`Filter.matches`) cost ~2.5 µs a pair, most of a typed message's
cost (docs/benchmarks.md, "Typed workloads"). Here a batch is checked in three steps:

1. every attribute the needed conditions name gets the batch's distinct values, sorted, and each
   message the rank of its value (absent: one rank past the last);
2. every distinct condition (attribute, operator, argument), registered once across the book's
   filters, becomes the set of ranks it allows: a range found by bisection for equals, `in`,
   ranges and prefixes (the strings that share a prefix are adjacent in sorted order), a scan of
   the distinct values only for `suffix`;
3. compiled code evaluates each pair's alternatives on those truths.

Values compare as Python compares them (code points for strings), so the result is
`Filter.matches`'s, which the tests check on random filters and messages.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from bluedove.core.filter_syntax import Condition
from bluedove.core.filters import Filter
from bluedove.core.jit import compiled

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


class _Grow:
    """A growable int64 array: `a[:n]` is what was appended."""

    def __init__(self) -> None:
        self.a = np.zeros(64, dtype=np.int64)
        self.n = 0

    def _room(self, size: int) -> None:
        while size > len(self.a):
            self.a = np.concatenate([self.a, np.zeros(len(self.a), dtype=np.int64)])

    def extend(self, values: Sequence[int]) -> int:
        """Append `values`; where they start."""
        start, end = self.n, self.n + len(values)
        self._room(end)
        self.a[start:end] = values
        self.n = end
        return start

    def set(self, i: int, v: int) -> None:
        self._room(i + 1)
        self.a[i] = v
        self.n = max(self.n, i + 1)


class CompiledFilters:
    """The book's filters as arrays the check walks: per code its alternatives (a range of
    `alts`), per alternative its conditions (a range of `conds`), each a condition id; a
    condition's id lives while a filter holds it, and is then reused."""

    def __init__(self) -> None:
        self.code_alts = _Grow()  # code -> [start, end) in alts, as two entries per code
        self.alts = _Grow()  # alternative -> [start, end) in conds, two entries each
        self.conds = _Grow()  # condition ids
        self.exact = _Grow()  # code -> 1: the boxes decide
        self._ids: dict[Condition, int] = {}
        self._count: list[int] = []  # condition id -> filters holding it
        self.condition: list[Condition | None] = []  # condition id -> the condition
        self._free: list[int] = []
        self._of_code: dict[int, list[int]] = {}

    def add(self, code: int, f: Filter) -> None:
        ids: list[int] = []
        bounds: list[int] = []
        for alt in f.alternatives:
            start = self.conds.extend([self._hold(c) for c in alt])
            bounds += [start, self.conds.n]
            ids += self.conds.a[start:self.conds.n].tolist()
        a0 = self.alts.extend(bounds)
        self.code_alts.set(2 * code, a0 // 2)
        self.code_alts.set(2 * code + 1, a0 // 2 + len(f.alternatives))
        self.exact.set(code, int(f.exact))
        self._of_code[code] = ids

    def drop(self, code: int) -> None:
        for cid in self._of_code.pop(code, []):
            self._count[cid] -= 1
            if not self._count[cid]:
                c = self.condition[cid]
                assert c is not None
                del self._ids[c]
                self.condition[cid] = None
                self._free.append(cid)

    def _hold(self, c: Condition) -> int:
        cid = self._ids.get(c)
        if cid is None:
            if self._free:
                cid = self._free.pop()
                self.condition[cid] = c
                self._count[cid] = 0
            else:
                cid = len(self.condition)
                self.condition.append(c)
                self._count.append(0)
            self._ids[c] = cid
        self._count[cid] += 1
        return cid

    def check(self, pair_msg: np.ndarray, pair_code: np.ndarray,
              attributes: Callable[[int], dict[str, Any]]) -> np.ndarray:
        """Whether each pair's filter (`pair_code`) matches its message (`pair_msg`, ascending;
        `attributes(message)` reads its attributes), as `Filter.matches` would say."""
        if not len(pair_msg):
            return np.zeros(0, dtype=bool)
        need = _needed(pair_code, self.code_alts.a, self.alts.a, self.conds.a, self.exact.a, len(self.condition))
        cids = np.flatnonzero(need).tolist()
        first = np.empty(len(pair_msg), dtype=bool)  # the pairs come in message order
        first[0] = True
        np.not_equal(pair_msg[1:], pair_msg[:-1], out=first[1:])
        msgs = pair_msg[first]
        local = np.cumsum(first) - 1
        if not cids:  # only filters the boxes decide
            return _evaluate(local, pair_code, self.code_alts.a, self.alts.a, self.conds.a, self.exact.a,
                             np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                             np.zeros((0, 0), np.int64), np.zeros(0, np.bool_))
        attrs = [attributes(m) for m in msgs.tolist()]
        names = sorted({self.condition[c][0] for c in cids})  # type: ignore[index]
        slot_of = {name: i for i, name in enumerate(names)}
        columns = [_column(name, attrs) for name in names]
        ranks = np.array([r for _, r in columns], dtype=np.int64).reshape(len(names), len(msgs))
        where = np.full(len(self.condition), -1, dtype=np.int64)
        where[cids] = np.arange(len(cids))
        offset = np.empty(len(cids), dtype=np.int64)
        slot = np.empty(len(cids), dtype=np.int64)
        truth = bytearray()
        for j, cid in enumerate(cids):
            name, op, arg = self.condition[cid]  # type: ignore[misc]
            s = slot_of[name]
            offset[j], slot[j] = len(truth), s
            truth += allowed(columns[s][0], op, arg)
        return _evaluate(local, pair_code, self.code_alts.a, self.alts.a, self.conds.a, self.exact.a,
                         where, offset, slot, ranks, np.frombuffer(bytes(truth), dtype=np.bool_))


def _column(name: str, attrs: list[dict[str, Any]]) -> tuple[list[Any], list[int]]:
    """The distinct values of attribute `name` in `attrs`, sorted, and each message's rank among
    them (absent: their count)."""
    values = [a.get(name) for a in attrs]
    distinct = sorted({v for v in values if v is not None})
    rank = {v: i for i, v in enumerate(distinct)}
    absent = len(distinct)
    return distinct, [absent if v is None else rank[v] for v in values]


def allowed(distinct: list[Any], op: str, arg: Any) -> bytes:
    """Which of the sorted `distinct` values meet the condition, one byte each (1: yes), and a
    last byte for a message without the attribute."""
    n = len(distinct)
    if op == "exists":
        return (b"\x01" * n + b"\x00") if arg else (b"\x00" * n + b"\x01")
    out = bytearray(n + 1)
    if op in ("eq", "in", "not_in"):
        for v in ([arg] if op == "eq" else arg):
            i = bisect.bisect_left(distinct, v)
            if i < n and distinct[i] == v:
                out[i] = 1
        if op == "not_in":
            out[:n] = bytes(1 - b for b in out[:n])
        return bytes(out)
    lo, hi = 0, n
    if op == "gte":
        lo = bisect.bisect_left(distinct, arg)
    elif op == "gt":
        lo = bisect.bisect_right(distinct, arg)
    elif op == "lt":
        hi = bisect.bisect_left(distinct, arg)
    elif op == "lte":
        hi = bisect.bisect_right(distinct, arg)
    elif op == "prefix":  # the strings starting with arg: adjacent, from the first >= arg
        lo = bisect.bisect_left(distinct, arg)
        hi = bisect.bisect_left(distinct, True, lo, n, key=lambda s: not s.startswith(arg))
    else:  # suffix
        return bytes([v.endswith(arg) for v in distinct]) + b"\x00"
    out[lo:hi] = b"\x01" * max(0, hi - lo)
    return bytes(out)


@compiled
def _needed(pair_code: Ints, code_alts: Ints, alts: Ints, conds: Ints, exact: Ints, n_conditions: int) -> Bools:
    """Which condition ids the pairs' filters name (filters the boxes decide name none)."""
    seen = np.zeros(len(exact), dtype=np.bool_)
    need = np.zeros(n_conditions, dtype=np.bool_)
    for c in pair_code:
        if seen[c] or exact[c]:
            continue
        seen[c] = True
        for a in range(code_alts[2 * c], code_alts[2 * c + 1]):
            for j in range(alts[2 * a], alts[2 * a + 1]):
                need[conds[j]] = True
    return need


@compiled
def _evaluate(local: Ints, pair_code: Ints, code_alts: Ints, alts: Ints, conds: Ints, exact: Ints, where: Ints,
              offset: Ints, slot: Ints, ranks: Ints, truth: Bools) -> Bools:
    """Each pair: any alternative of its filter whose every condition allows its message's rank."""
    out = np.empty(len(local), dtype=np.bool_)
    for p in range(len(local)):
        c, m = pair_code[p], local[p]
        if exact[c]:
            out[p] = True
            continue
        hit = False
        for a in range(code_alts[2 * c], code_alts[2 * c + 1]):
            ok = True
            for j in range(alts[2 * a], alts[2 * a + 1]):
                q = where[conds[j]]
                if not truth[offset[q] + ranks[slot[q], m]]:
                    ok = False
                    break
            if ok:
                hit = True
                break
        out[p] = hit
    return out
