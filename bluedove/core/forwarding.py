"""Performance-aware forwarding (the BlueDove paper §III-B): order a message's candidate matchers.

`rank` orders one message's candidates under a policy (`POLICIES`); `rank_batch` makes the
same choices for a whole batch at once, message after message, in one compiled loop over
arrays. Both are pure: the caller passes the time and the random draws' source; the load
arithmetic they share is in `bluedove/core/load.py`.

Why a batch loop: a dispatcher that ranks a batch of 200 messages with `rank` spends 13-16 µs
per message in Python (docs/benchmarks.md). The estimate itself is cheap arithmetic over a few
numbers per matcher, so `matcher_loads` reduces each matcher's reports once per batch to arrays
(its queued work W, its load L, the time of its newest report, the cost of a message along each
dimension), and the loop over messages runs compiled. It stays a loop, not one vector
operation: under `adaptive` each message's choice is charged to its matcher (`sent`) before the
next message is ranked, as `rank`'s caller does, so message i's order depends on messages
0..i-1. Same rules as `rank` with `siblings` and the caller's charging: usable candidates first,
by key then by a random draw, one entry per distinct matcher; then the unusable ones ranked the
same way without `sent`, as a last resort; the first usable choice charged. The random draws
come in as an array so that a test can replay them through `rank` and compare
(tests/unit/core/test_forwarding_batch.py). `random` is left to `rank`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bluedove.core.jit import compiled
from bluedove.core.load import COLD_COST_BASE_S, COLD_COST_PER_SUB_S, LoadReport, backlog, cost, processing_time

POLICIES = ("adaptive", "response-time", "subscription-count", "random")

Candidate = tuple[int, str]  # (dimension, member id)


def rank(
    policy: str,
    candidates: Sequence[Candidate],
    reports: Callable[[Candidate], LoadReport],
    now: float,
    rng: random.Random,
    siblings: Callable[[str], Sequence[LoadReport]] | None = None,
    sent: Mapping[str, float] | None = None,
) -> list[Candidate]:
    """Candidates ordered best first under `policy`, one entry per distinct matcher.

    A matcher that is a candidate along several dimensions appears once, with its best
    dimension, so the rest of the list is the failover order across distinct matchers.
    With `siblings` (member id → the reports of all its dimension queues), `adaptive` and
    `response-time` estimate per matcher (`matcher_time`); without, per queue (the paper's).
    With `sent` as well (member id → work this dispatcher sent it since its report), `adaptive`
    counts that work (`backlog`); the caller adds `cost` of its choice there.
    """
    if policy == "random":
        order = list(candidates)
        rng.shuffle(order)
    else:
        key: Callable[[Candidate], float]
        if policy in ("adaptive", "response-time"):
            ex = policy == "adaptive"
            if siblings is None:
                key = lambda c: processing_time(reports(c), now, extrapolate=ex)  # noqa: E731
            else:
                memo: dict[str, float] = {}

                def key(c: Candidate) -> float:
                    m = c[1]
                    if m not in memo:
                        extra = sent.get(m, 0.0) if sent is not None and ex else 0.0
                        memo[m] = backlog(siblings(m), now, ex, extra)
                    return memo[m] + cost(reports(c))
        elif policy == "subscription-count":
            key = lambda c: reports(c).subs  # noqa: E731
        else:
            raise ValueError(f"unknown forwarding policy {policy!r}; choose one of {POLICIES}")
        # Ties broken at random so equal candidates share the load.
        order = sorted(candidates, key=lambda c: (key(c), rng.random()))
    seen: set[str] = set()
    out = []
    for c in order:
        if c[1] not in seen:
            seen.add(c[1])
            out.append(c)
    return out


# policy codes of the compiled loop, and the arrays it takes
_Floats = npt.NDArray[np.float64]
_Ints = npt.NDArray[np.int64]
_Bools = npt.NDArray[np.bool_]
ADAPTIVE, RESPONSE_TIME, SUBSCRIPTION_COUNT = 0, 1, 2
BATCH_POLICIES = {"adaptive": ADAPTIVE, "response-time": RESPONSE_TIME, "subscription-count": SUBSCRIPTION_COUNT}


@dataclass
class MatcherLoads:
    """Each matcher's reports reduced for the loop; index i stands for `members[i]`."""

    members: list[str]
    work: np.ndarray  # Σ_j q_j/μ_j: seconds of queued work at the report (0 without reports)
    load: np.ndarray  # Σ_j λ_j/μ_j: seconds of work arriving per second
    at: np.ndarray  # the newest report's time
    has: np.ndarray  # bool: the matcher has a report
    cost: np.ndarray  # (members, k): seconds one message costs along each dimension (1/μ or cold)
    subs: np.ndarray  # (members, k): subscriptions held along each dimension


def matcher_loads(members: Sequence[str], k: int, reports: Mapping[tuple[str, int], LoadReport]) -> MatcherLoads:
    """`reports` ((member, dimension) -> report) reduced per matcher, with the same float
    operations in the same order as `bluedove.core.load.backlog`, so that the keys agree to
    the last bit."""
    n = len(members)
    work, load, at = np.zeros(n), np.zeros(n), np.zeros(n)
    has = np.zeros(n, dtype=np.bool_)
    cost = np.full((n, k), COLD_COST_BASE_S)  # LoadReport(): μ 0, no subscriptions
    subs = np.zeros((n, k), dtype=np.int64)
    for i, m in enumerate(members):
        w, ld, t, first = 0.0, 0.0, 0.0, True
        for d in range(k):
            r = reports.get((m, d))
            if r is None:
                continue
            c = 1.0 / r.mu if r.mu > 0 else COLD_COST_BASE_S + COLD_COST_PER_SUB_S * r.subs
            cost[i, d], subs[i, d] = c, r.subs
            w += r.q * c
            ld += r.lam * c
            if first or r.at > t:
                t, first = r.at, False
        work[i], load[i], at[i], has[i] = w, ld, t, not first
    return MatcherLoads(list(members), work, load, at, has, cost, subs)


@compiled
def _key(policy: int, m: int, d: int, loads_work: _Floats, loads_load: _Floats, loads_at: _Floats, loads_has: _Bools,
         cost: _Floats, subs: _Ints, now: float, extra: float) -> float:
    if policy == 2:
        return float(subs[m, d])
    if not loads_has[m]:
        b = extra
    else:
        w = loads_work[m] + extra
        if policy == 0:
            dt = now - loads_at[m]
            if dt < 0.0:
                dt = 0.0
            b = w + (loads_load[m] - 1.0) * dt
            if not b > 0.0:
                b = 0.0
        else:
            b = w
    key: float = b + cost[m, d]
    return key


@compiled
def _order(policy: int, row_m: _Ints, row_d: _Ints, want_usable: bool, usable: _Bools, sent: _Floats, with_sent: bool,
           draws: _Floats, loads_work: _Floats, loads_load: _Floats, loads_at: _Floats, loads_has: _Bools,
           cost: _Floats, subs: _Ints, now: float, out: _Ints, at: int) -> int:
    """Rank the candidates of one message whose usability is `want_usable` into `out[at:]`;
    returns the new end. An insertion sort on (key, draw): a message has few candidates."""
    c = row_m.shape[0]
    keys = np.empty(c)
    idx = np.empty(c, dtype=np.int64)
    n = 0
    for j in range(c):
        m = row_m[j]
        if m < 0 or usable[m] != want_usable:
            continue
        extra = sent[m] if with_sent else 0.0
        key = _key(policy, m, row_d[j], loads_work, loads_load, loads_at, loads_has, cost, subs, now, extra)
        p = n
        while p > 0 and (keys[p - 1] > key or (keys[p - 1] == key and draws[idx[p - 1]] > draws[j])):
            keys[p] = keys[p - 1]
            idx[p] = idx[p - 1]
            p -= 1
        keys[p] = key
        idx[p] = j
        n += 1
    end = at
    for p in range(n):  # one entry per matcher: its best dimension
        j = idx[p]
        dup = False
        for q in range(at, end):
            if row_m[out[q]] == row_m[j]:
                dup = True
                break
        if not dup:
            out[end] = j
            end += 1
    return end


@compiled
def _rank_all(policy: int, cand_m: _Ints, cand_d: _Ints, usable: _Bools, sent: _Floats, draws: _Floats,
              loads_work: _Floats, loads_load: _Floats, loads_at: _Floats, loads_has: _Bools, cost: _Floats,
              subs: _Ints, now: float, out: _Ints, count: _Ints) -> None:
    n, c = cand_m.shape
    adaptive = policy == 0
    for i in range(n):
        row_m, row_d = cand_m[i], cand_d[i]
        good = _order(policy, row_m, row_d, True, usable, sent, adaptive, draws[i, :c], loads_work, loads_load,
                      loads_at, loads_has, cost, subs, now, out[i], 0)
        count[i] = _order(policy, row_m, row_d, False, usable, sent, False, draws[i, c:], loads_work, loads_load,
                          loads_at, loads_has, cost, subs, now, out[i], good)
        if adaptive and good > 0:
            j = out[i, 0]
            sent[row_m[j]] += cost[row_m[j], row_d[j]]


def rank_batch(policy: str, cand_m: np.ndarray, cand_d: np.ndarray, usable: np.ndarray, loads: MatcherLoads,
               sent: np.ndarray, now: float, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every message's candidates best first, as `rank` orders them message after message.

    `cand_m`/`cand_d` (messages × candidates): each candidate's matcher (an index into
    `loads.members`, -1 for none) and dimension; `usable` per matcher; `sent` per matcher, the
    work this dispatcher sent it since its report, updated in place under `adaptive` (each
    message's first usable choice charged); `draws` (messages × 2·candidates) in [0, 1): the
    tie-breaks of the usable ranking, then of the last-resort one. Returns (order, count):
    order[i, :count[i]] are indices into message i's candidates."""
    code = BATCH_POLICIES[policy]
    n, c = cand_m.shape
    out = np.full((n, max(c, 1)), -1, dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    _rank_all(code, np.ascontiguousarray(cand_m, dtype=np.int64), np.ascontiguousarray(cand_d, dtype=np.int64),
              np.ascontiguousarray(usable, dtype=np.bool_), sent, np.ascontiguousarray(draws, dtype=np.float64),
              loads.work, loads.load, loads.at, loads.has, loads.cost, loads.subs, float(now), out, count)
    return out, count


def warm_up() -> None:
    """Compile (or load from the cache) the loop now, before the first publish waits for it."""
    loads = matcher_loads(["a"], 1, {})
    rank_batch("adaptive", np.zeros((1, 1), dtype=np.int64), np.zeros((1, 1), dtype=np.int64),
               np.ones(1, dtype=np.bool_), loads, np.zeros(1), 0.0, np.zeros((1, 2)))


@dataclass
class Ranking:
    """A batch's candidates and their order: message i's choice number a is candidate
    `order[i, a]` (a < count[i]), i.e. dimension cand_d[i, j] of matcher members[cand_m[i, j]]."""

    members: list[str]
    cand_m: np.ndarray
    cand_d: np.ndarray
    order: np.ndarray
    count: np.ndarray

    def choice(self, rows: np.ndarray, attempt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(matcher index, dimension) of each row's choice number attempt[row]."""
        j = self.order[rows, attempt]
        return self.cand_m[rows, j], self.cand_d[rows, j]

    def listed(self, i: int) -> list[tuple[int, str]]:
        """Message i's ranking as `rank` gives it: [(dimension, member)], best first."""
        return [(int(self.cand_d[i, j]), self.members[self.cand_m[i, j]]) for j in self.order[i, :self.count[i]]]

    @classmethod
    def from_lists(cls, ranked: list[list[tuple[int, str]]]) -> "Ranking":
        """From per-message rankings (a policy ranked by `rank`, or a test's)."""
        members = sorted({m for r in ranked for _, m in r})
        at = {m: i for i, m in enumerate(members)}
        c = max((len(r) for r in ranked), default=0) or 1
        cand_m = np.full((len(ranked), c), -1, dtype=np.int64)
        cand_d = np.zeros((len(ranked), c), dtype=np.int64)
        for i, r in enumerate(ranked):
            cand_m[i, :len(r)] = [at[m] for _, m in r]
            cand_d[i, :len(r)] = [d for d, _ in r]
        order = np.broadcast_to(np.arange(c, dtype=np.int64), (len(ranked), c)).copy()
        return cls(members, cand_m, cand_d, order, np.array([len(r) for r in ranked], dtype=np.int64))

    def replace(self, rows: np.ndarray, new: "Ranking") -> "Ranking":
        """This ranking with `rows` ranked as `new` ranks them (new's row r for rows[r])."""
        members = self.members + [m for m in new.members if m not in self.members]
        at = {m: i for i, m in enumerate(members)}
        remap = np.array([at[m] for m in new.members] + [-1], dtype=np.int64)  # -1 stays -1
        c = max(self.cand_m.shape[1], new.cand_m.shape[1])

        def wide(a: np.ndarray, fill: int) -> np.ndarray:
            return np.pad(a, ((0, 0), (0, c - a.shape[1])), constant_values=fill)

        cand_m, cand_d, order = wide(self.cand_m, -1), wide(self.cand_d, 0), wide(self.order, -1)
        cand_m[rows] = remap[wide(new.cand_m, -1)]
        cand_d[rows], order[rows] = wide(new.cand_d, 0), wide(new.order, -1)
        count = self.count.copy()
        count[rows] = new.count
        return Ranking(members, cand_m, cand_d, order, count)
