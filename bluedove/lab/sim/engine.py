"""The discrete-event simulator: dispatchers forward each message with the real `rank`, matchers serve FIFO.

A matcher is one core (our matcher runs every index call on one thread) serving its k
dimension queues in arrival order; a message's service time comes from the fitted cost
model for the set it is matched against. Every `report_interval_s / dispatchers` seconds one
dispatcher fetches every matcher's per-dimension report — λ and μ over the last
`stats_window_s`, q now — as `bluedove/dispatcher/view.py` does, and ranks candidates with it
until its next fetch. To keep large clusters tractable a simulated message may stand for
`weight` real ones (same point, `weight` times the work); `weight` is 1 when the budget allows.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from bluedove.core.forwarding import rank
from bluedove.core.load import LoadReport
from bluedove.core.load import cost as expected_cost
from bluedove.lab.sim.costmodel import CostModel
from bluedove.lab.sim.layouts import Layout, make_pool_arrays


@dataclass(frozen=True)
class SimConfig:
    """One simulation's settings: policy, dispatchers, report timing, failover and seed."""

    policy: str = "adaptive"
    dispatchers: int = 2  # the paper's §IV-B: two dispatchers for twenty matchers
    report_interval_s: float = 1.0  # DispatcherSettings.load_interval_s
    stats_window_s: float = 5.0  # MatcherSettings.stats_window_s (the paper's w)
    failover: bool = True  # ours: a failed call goes to the next candidate; False: the paper's loss
    retry_s: float = 0.002  # a refused connection to a dead matcher, then the next candidate
    detect_s: float = 2.0  # without failover: until dispatchers learn a matcher is gone
    warm: bool = False  # stepped simulator: every set has already reported its μ (it was fed before); else cold
    seed: int = 1


@dataclass
class RunResult:
    """One simulated run: each message's arrival and response time, each matcher's busy time."""

    t: np.ndarray  # arrival time of each simulated message
    rt: np.ndarray  # response time (NaN when lost)
    weight: float  # real messages per simulated one
    busy_s: np.ndarray  # per matcher: seconds of matching finished in [warmup, horizon]
    span_s: float  # horizon - warmup
    members: int
    events: list = field(default_factory=list)  # (time, text)


class Pool:
    """Sample message points with their matches; per layout, candidates and the features of
    each (message, candidate set) pair that the cost model needs (`costmodel.FEATURES`)."""

    def __init__(self, points: np.ndarray, matches: np.ndarray, coverage: np.ndarray | None = None,
                 n_subs: int = 0) -> None:
        self.points, self.matches = points, matches
        # (P, k) subscriptions holding each point's value on each dimension (all sets alike)
        self.coverage = np.zeros_like(points) if coverage is None else coverage
        self.n_subs = n_subs

    @classmethod
    def of(cls, w, points: np.ndarray) -> "Pool":
        matches, cov = make_pool_arrays(w, points)
        return cls(points, matches, cov, w.n_subs)

    def scaled(self, f: float) -> "Pool":
        """The same messages against f times the subscriptions (drawn alike): matches and coverage scale by f."""
        return Pool(self.points, self.matches * f, self.coverage * f, int(round(self.n_subs * f)))

    def features(self, layout: Layout) -> tuple[np.ndarray, dict]:
        """(P, k') candidates (-1: any matcher) and {feature: (P, k') array}."""
        cand = layout.candidates(self.points)
        P = len(self.points)
        if layout.table is None:  # a full replica: one set of everything, searched whole
            size = np.full((P, 1), float(layout.sizes[0, 0]))
            searched = size
        else:
            size = layout.sizes[cand, np.arange(layout.k)].astype(np.float64)
            searched = np.minimum(self.coverage[:, : layout.k], size)
        ones = np.ones_like(size)
        return cand, {"one": ones, "size": size, "searched": searched, "log_size": np.log1p(size),
                      "matches": self.matches[:, None] * ones}

    def costs(self, layout: Layout, model: CostModel) -> tuple[np.ndarray, np.ndarray]:
        cand, feats = self.features(layout)
        return cand, model.cost(feats)


class Simulator:
    """One run: `run(rate_fn, horizon_s, weight)`; hooks may kill matchers or change the layout."""

    def __init__(self, layout: Layout, model: CostModel, pool: Pool, cfg: SimConfig) -> None:
        self.cfg, self.model, self.pool = cfg, model, pool
        self.rng = random.Random(cfg.seed)
        self.np_rng = np.random.default_rng(cfg.seed)
        self.layout: Layout | None = None
        self.pending: tuple[float, Layout] | None = None
        self.dead: dict[int, float] = {}  # matcher -> time of death
        self.known_dead: list[set[int]] = [set() for _ in range(cfg.dispatchers)]
        self._grow(layout.n, layout.k)
        self._install(layout)
        self.views = [self._reports(0.0) for _ in range(cfg.dispatchers)]
        self.sent: list[dict[int, float]] = [{} for _ in range(cfg.dispatchers)]  # rank's `sent`, per dispatcher

    # -- state ------------------------------------------------------------------------------
    def _grow(self, n: int, k: int) -> None:
        have = len(getattr(self, "free_at", []))
        if have == 0:
            self.k = k
            self.free_at, self.fifo = [], []
            self.q, self.arrived, self.done, self.busy, self.last_mu = [], [], [], [], []
            self.history: deque = deque()
        for _ in range(have, n):
            self.free_at.append(0.0)
            self.fifo.append(deque())
            for lst in (self.q, self.arrived, self.done, self.busy, self.last_mu):
                lst.append([0.0] * k)

    def _install(self, layout: Layout) -> None:
        self._grow(layout.n, layout.k)
        self.layout = layout
        cand, cost = self.pool.costs(layout, self.model)
        self.cand = cand.tolist()
        self.cost = cost.tolist()
        self.full = layout.table is None

    def set_layout(self, layout: Layout, at: float) -> None:
        """Dispatchers use `layout` from time `at` on (after the new matcher has loaded)."""
        self._grow(layout.n, layout.k)
        self.pending = (at, layout)

    def kill(self, m: int, now: float) -> None:
        """Matcher m stops: what it has queued is lost; later calls to it fail."""
        self.dead[m] = now
        for fin, _dim, _w, _work, rec in self.fifo[m]:
            if fin > now:
                self.rt[rec] = np.nan
        self.fifo[m].clear()
        self.q[m] = [0.0] * self.k

    def _drain(self, m: int, now: float) -> None:
        f = self.fifo[m]
        while f and f[0][0] <= now:
            _fin, dim, w, work, _rec = f.popleft()
            self.q[m][dim] -= w
            self.done[m][dim] += w
            self.busy[m][dim] += work

    def _reports(self, now: float) -> list[list[LoadReport]]:
        """Every matcher's per-dimension report at `now` (bluedove/matcher/load.py: λ, μ over the window)."""
        W = self.cfg.stats_window_s
        self.history.append((now, [row[:] for row in self.arrived], [row[:] for row in self.done],
                             [row[:] for row in self.busy]))
        while len(self.history) > 1 and now - self.history[1][0] >= W:
            self.history.popleft()
        t0, a0, d0, b0 = self.history[0]
        span = max(min(W, now - t0), 1e-9)
        sizes = self.layout.sizes
        out = []
        for m in range(len(self.free_at)):
            self._drain(m, now)
            row = []
            for i in range(self.k):
                old = i < len(a0[m]) if m < len(a0) else False
                da = self.arrived[m][i] - (a0[m][i] if old else 0.0)
                dd = self.done[m][i] - (d0[m][i] if old else 0.0)
                db = self.busy[m][i] - (b0[m][i] if old else 0.0)
                if dd > 0 and db > 0:
                    self.last_mu[m][i] = dd / db
                subs = int(sizes[m, i]) if m < len(sizes) else 0
                row.append(LoadReport(lam=da / span, mu=self.last_mu[m][i], q=int(self.q[m][i]), subs=subs, at=now))
            out.append(row)
        return out

    # -- the run ----------------------------------------------------------------------------
    def run(self, rate_fn: Callable[[float], float], horizon_s: float, weight: float = 1.0, warmup_s: float = 0.0,
            hook: Callable[["Simulator", float], None] | None = None, n_max: int = 5_000_000) -> RunResult:
        D = self.cfg.dispatchers
        tick = self.cfg.report_interval_s / D
        next_tick, tick_no = tick, 0
        times: list[float] = []
        self.rt = []
        busy_at_warmup = None
        events: list = []
        expo = self.np_rng.exponential(1.0, size=min(n_max, 1 << 20)).tolist()
        picks = self.np_rng.integers(0, len(self.pool.points), size=len(expo)).tolist()
        t, j = 0.0, 0
        while True:
            rate = rate_fn(t)
            t += expo[j % len(expo)] * weight / rate
            if t >= horizon_s or j >= n_max:
                break
            while next_tick <= t:  # one dispatcher fetches reports; hooks see the clock
                if busy_at_warmup is None and next_tick >= warmup_s:
                    busy_at_warmup = self._busy_total(next_tick)
                self._tick(tick_no % D, next_tick, events, hook)
                tick_no += 1
                next_tick += tick
            p = picks[j % len(picks)]
            d = j % D
            j += 1
            order = self._order(p, d, t, weight)
            rec = len(self.rt)
            times.append(t)
            self.rt.append(np.nan)
            self._send(p, order, d, t, weight, rec)
        end_busy = self._busy_total(horizon_s)
        if busy_at_warmup is None:
            busy_at_warmup = np.zeros_like(end_busy)
        busy = end_busy - np.pad(busy_at_warmup, (0, len(end_busy) - len(busy_at_warmup)))
        return RunResult(np.array(times), np.array(self.rt, dtype=float), weight, busy, horizon_s - warmup_s,
                         len(self.free_at), events)

    def _tick(self, d: int, now: float, events: list, hook: Callable[["Simulator", float], None] | None) -> None:
        """Dispatcher d fetches every report at `now` (with the pending table once it is in use),
        learns of the matchers dead for `detect_s`; then the hook sees the clock."""
        if self.pending and self.pending[0] <= now:
            self._install(self.pending[1])
            events.append((self.pending[0], f"table with {self.layout.n} matchers in use"))
            self.pending = None
        self.views[d] = self._reports(now)
        self.sent[d] = {}
        for m, at in self.dead.items():
            if now - at >= self.cfg.detect_s:
                self.known_dead[d].add(m)
        if hook:
            hook(self, now)

    def _order(self, p: int, d: int, t: float, weight: float) -> list[tuple[int, int]]:
        """The candidates (dimension, matcher) dispatcher d tries for pool message p, best first
        (`rank` on its view); the first it believes alive is charged the message's expected cost."""
        if self.full:
            return [(0, self.rng.randrange(self.layout.n))]
        view, known, sent = self.views[d], self.known_dead[d], self.sent[d]
        cands = [(i, m) for i, m in enumerate(self.cand[p])]
        order = rank(self.cfg.policy, cands, lambda c: view[c[1]][c[0]], t, self.rng, view.__getitem__, sent)
        first = next(((dim, m) for dim, m in order if m not in known), None)
        if first is not None:  # charged before the call, as bluedove/dispatcher/view.py does
            sent[first[1]] = sent.get(first[1], 0.0) + expected_cost(view[first[1]][first[0]]) * weight
        return order

    def _send(self, p: int, order: list[tuple[int, int]], d: int, t: float, weight: float, rec: int) -> None:
        """Message `rec` (pool message p, arrived at t) into the FIFO of the first candidate of
        `order` that is alive, skipping those dispatcher d knows dead; a dead one it did not know
        of fails the call (failover: mark it down, try the next) or loses the message."""
        known = self.known_dead[d]
        costs = self.cost[p]
        delay = 0.0
        for dim, m in order:
            if m in known:
                continue
            if m in self.dead:
                if not self.cfg.failover:
                    break  # the paper's prototype: sent to a dead matcher before detection, lost
                known.add(m)  # ours: the call fails at once, mark it down, try the next one
                delay += self.cfg.retry_s
                continue
            work = costs[dim if not self.full else 0] * weight
            start = max(t + delay, self.free_at[m])
            fin = start + work
            self.free_at[m] = fin
            self.fifo[m].append((fin, dim, weight, work, rec))
            self.q[m][dim] += weight
            self.arrived[m][dim] += weight
            self.rt[rec] = fin - t
            break

    def _busy_total(self, now: float) -> np.ndarray:
        """Seconds of matching each matcher has finished by `now`, counting the one in service pro rata."""
        out = np.zeros(len(self.free_at))
        for m in range(len(self.free_at)):
            self._drain(m, now)
            extra = 0.0
            if self.fifo[m] and m not in self.dead:
                fin, _d, _w, work, _r = self.fifo[m][0]
                extra = max(0.0, work - (fin - now))
            out[m] = sum(self.busy[m]) + extra
        return out
