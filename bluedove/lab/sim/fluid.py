"""The time-stepped simulator for saturation searches: messages ranked in numpy as `rank` does, one core per matcher."""

# What is exact and what is approximated (docs/reproduction.md, "How the simulator works"):
# - Reports are the real dispatcher's (bluedove/dispatcher/view.py): every dispatcher refreshes every
#   matcher's per-dimension report every `report_interval_s` (phases staggered), λ and μ over the
#   last `stats_window_s` as bluedove/matcher/load.py computes them (λ arrivals/s, μ messages per second of
#   matching work, q queued), and ranks with that view until its next refresh.
# - Decisions: the messages arriving in one step of `dt_s` see the same clock; each is sent to its
#   best candidate under the policy, computed by `rank_vectorised` (a unit test checks it picks
#   what `bluedove.core.forwarding.rank` puts first). `per_step` sampled messages stand for the step's
#   rate·dt real ones (sampling), all of the step's messages herd like the real dispatcher's would.
# - Service: a matcher is one core (our matcher runs every index call on one thread); in a step it
#   serves min(backlog, dt) seconds of work, shared among its dimension queues in proportion to
#   their queued work (a fluid form of FIFO), messages leaving in proportion to work.

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bluedove.core.load import COLD_COST_BASE_S, COLD_COST_PER_SUB_S
from bluedove.lab.sim.engine import SimConfig


@dataclass(frozen=True)
class Step:
    """The fluid simulator's time step, and the most messages one step samples."""

    dt_s: float = 0.002
    per_step: int = 256  # sampled messages per step (at most; fewer when rate·dt is smaller)


def view_terms(lam, mu, q, subs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a view of n matchers' k dimension queues (arrays (..., n, k)): each queue's cost per
    message (1/μ, or estimated from the set size with no μ yet), and per matcher its queued work
    W = Σ_j q_j/μ_j and utilisation Σ_j λ_j/μ_j, (..., n)."""
    cost = np.where(mu > 0, 1.0 / np.where(mu > 0, mu, 1.0), COLD_COST_BASE_S + COLD_COST_PER_SUB_S * subs)
    return cost, (q * cost).sum(axis=-1), (lam * cost).sum(axis=-1)


def backlog(work, load, at, now, extrapolate: bool, sent=0.0) -> np.ndarray:
    """`bluedove.core.load.backlog` on arrays: W + sent + (Σ λ/μ − 1)(t − t') never below zero, (..., n)."""
    if not extrapolate:
        return work
    return np.maximum(0.0, work + sent + (load - 1.0) * np.maximum(0.0, np.asarray(now) - np.asarray(at))[..., None])


def matcher_time(lam, mu, q, subs, at, now, extrapolate: bool) -> np.ndarray:
    """`bluedove.core.load.matcher_time` on arrays (..., n, k), views taken at `at` (...): the
    matcher's backlog, then the message's own cost."""
    cost, work, load = view_terms(lam, mu, q, subs)
    return backlog(work, load, at, now, extrapolate)[..., None] + cost


def rank_vectorised(policy: str, keys: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Column (dimension) of each row's first choice; `keys` (S, k) is the policy's key per
    candidate (ignored for random). Ties broken at random, as `rank` does."""
    S, k = keys.shape
    if policy == "random":
        return rng.integers(0, k, S)
    tie = rng.random((S, k))
    best = keys.min(axis=1, keepdims=True)
    return np.argmax(np.where(keys == best, tie + 1.0, 0.0), axis=1)


class FluidSim:
    """One layout, one pool's candidates and costs; `run(rate, horizon_s)` returns per-matcher state."""

    def __init__(self, cand: np.ndarray, cost: np.ndarray, sizes: np.ndarray, n: int, cfg: SimConfig,
                 step: Step = Step()) -> None:
        self.cand, self.cost, self.sizes, self.n, self.cfg, self.step = cand, cost, sizes, n, cfg, step
        self.k = cand.shape[1]
        self.full = bool((cand < 0).all())
        self.subs = sizes.astype(np.float64)  # the sets' sizes, as the reports carry them
        self.dims = np.arange(self.k)[None, :]
        self.rng = np.random.default_rng(cfg.seed)

    def warm_mu(self) -> np.ndarray:
        """(n, k) what each set would report as μ after being fed: 1 / its mean cost over the pool
        messages whose candidate it is (0 for a set no message can reach)."""
        n, k = self.n, self.k
        out = np.zeros((n, k))
        if self.full:
            return out
        for i in range(k):
            total = np.bincount(self.cand[:, i], weights=self.cost[:, i], minlength=n)
            count = np.bincount(self.cand[:, i], minlength=n)
            out[:, i] = np.divide(count, total, out=np.zeros(n), where=total > 0)
        return out

    def run(self, rate: float, horizon_s: float, marks: tuple[float, ...] = ()) -> dict:
        """Hold `rate` msg/s; returns backlog (seconds of queued work per matcher) at each mark
        and at the end, and busy seconds per matcher between the first mark and the end."""
        n, k, dt = self.n, self.k, self.step.dt_s
        state = _Matchers.empty(n, k)
        views = _Views(self.cfg, self.warm_mu() if self.cfg.warm else np.zeros((n, k)))
        sample = _Sample.of(rate, self.step, self.cfg.dispatchers)
        out = {"backlog": [], "busy_from_first_mark": None, "weight": sample.weight, "dt_s": dt}
        marks = sorted(marks)
        for j in range(int(round(horizon_s / dt))):
            t = j * dt
            views.update(t, state)
            while marks and t >= marks[0]:
                _mark(out, state)
                marks.pop(0)
            p, m, col = self._route(sample, t, views)
            state.receive(m * k + col, self.cost[p, col] * sample.weight, sample.weight)
            state.serve(dt)
        out["backlog"].append(state.work.sum(axis=1))
        if out["busy_from_first_mark"] is None:
            out["busy_from_first_mark"] = np.zeros(n)
        out["busy_s"] = state.busy.sum(axis=1) - out["busy_from_first_mark"]
        out["busy_by_dim"] = state.busy
        return out

    def _route(self, sample: _Sample, t: float, views: _Views) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One step's sampled messages (pool rows), the matcher each goes to and on which
        dimension, as its dispatcher's policy ranks them."""
        rng, S = self.rng, sample.size
        p = rng.integers(0, len(self.cand), S)
        if self.full:
            return p, rng.integers(0, self.n, S), np.zeros(S, dtype=np.intp)
        cand = self.cand[p]
        subs, dims = self.subs, self.dims
        policy = self.cfg.policy
        if policy == "random":
            col = rank_vectorised("random", cand, rng)
        elif policy == "subscription-count":
            col = rank_vectorised(policy, subs[cand, dims], rng)
        else:
            adaptive = policy == "adaptive"
            v_cost, wait = views.waits(t, subs, adaptive)  # (D, n, k), (D, n)
            row = sample.disp[:, None]
            col = rank_vectorised(policy, wait[row, cand] + v_cost[row, cand, dims], rng)
            if adaptive:
                views.charge(sample, cand[sample.rows, col], col)
        return p, cand[sample.rows, col], col


@dataclass(frozen=True)
class _Sample:
    """A step's messages: `size` sampled ones, each standing for `weight` real ones (rate·dt in
    all), row r sent by dispatcher r mod D."""

    size: int
    weight: float
    rows: np.ndarray
    disp: np.ndarray

    @classmethod
    def of(cls, rate: float, step: Step, dispatchers: int) -> _Sample:
        count = rate * step.dt_s
        size = max(1, min(step.per_step, int(np.ceil(count))))
        rows = np.arange(size)
        return cls(size, count / size, rows, rows % dispatchers)


@dataclass
class _Matchers:
    """The matchers' state, (n, k) per dimension queue: messages queued (q) and their work, and
    what has arrived, been done and kept the matcher busy (seconds) so far."""

    q: np.ndarray
    work: np.ndarray
    arrived: np.ndarray
    done: np.ndarray
    busy: np.ndarray

    @classmethod
    def empty(cls, n: int, k: int) -> _Matchers:
        return cls(*(np.zeros((n, k)) for _ in range(5)))

    def receive(self, flat: np.ndarray, work: np.ndarray, weight: float) -> None:
        """Messages into the queues `flat` (matcher·k + dimension), with their `work`."""
        n, k = self.q.shape
        self.work += np.bincount(flat, weights=work, minlength=n * k).reshape(n, k)
        got = np.bincount(flat, minlength=n * k).reshape(n, k) * weight
        self.q += got
        self.arrived += got

    def serve(self, dt: float) -> None:
        """`dt` of service: each matcher does min(backlog, dt) seconds of work, shared among its
        queues in proportion to their queued work, messages leaving in proportion to work."""
        total = self.work.sum(axis=1)
        served = np.minimum(total, dt)
        frac = np.divide(served, total, out=np.zeros(len(total)), where=total > 0)[:, None]
        sw, sq = self.work * frac, self.q * frac
        self.work -= sw
        self.q -= sq
        self.busy += sw
        self.done += sq


class _Views:
    """The dispatchers' views of the matchers: each refreshes every matcher's report every
    report_interval_s (phases staggered) from the stats window's history, kept in buckets of
    0.5 s as bluedove/matcher/load.py does, and ranks with it until its next refresh. Adaptive
    dispatchers count the work they sent each matcher since (`sent` of bluedove.core.forwarding.rank)."""

    def __init__(self, cfg: SimConfig, mu: np.ndarray) -> None:
        n, k = mu.shape
        D = cfg.dispatchers
        self.cfg = cfg
        self.hist: list[tuple[float, np.ndarray, np.ndarray, np.ndarray]] = [
            (0.0, np.zeros((n, k)), np.zeros((n, k)), np.zeros((n, k)))]  # (t, arrived, done, busy)
        self.last_mu = mu
        self.views = [(np.zeros((n, k)), mu.copy(), np.zeros((n, k)), 0.0) for _ in range(D)]  # λ, μ, q, at
        self.next_view = [cfg.report_interval_s * (d + 1) / D for d in range(D)]
        self.since = np.zeros((D, n))
        self._terms: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # `view_terms` of the views
        self._ats: np.ndarray | None = None

    def update(self, t: float, state: _Matchers) -> None:
        """At `t`: a new history bucket every 0.5 s, and the views that are due refreshed."""
        if t - self.hist[-1][0] >= 0.5:
            self.hist.append((t, state.arrived.copy(), state.done.copy(), state.busy.copy()))
            while len(self.hist) > 2 and t - self.hist[1][0] >= self.cfg.stats_window_s:
                self.hist.pop(0)
        for d in range(len(self.views)):
            if t >= self.next_view[d]:
                self._refresh(d, t, state)

    def _refresh(self, d: int, t: float, state: _Matchers) -> None:
        t0, a0, d0, b0 = self.hist[0]
        span = max(min(self.cfg.stats_window_s, t - t0), 0.5)
        dd, db = state.done - d0, state.busy - b0
        fresh = (dd > 0) & (db > 0)
        self.last_mu[fresh] = dd[fresh] / db[fresh]
        self.views[d] = ((state.arrived - a0) / span, self.last_mu.copy(), np.floor(state.q), t)
        self.since[d] = 0.0
        self.next_view[d] += self.cfg.report_interval_s
        self._terms = None

    def waits(self, t: float, subs: np.ndarray, adaptive: bool) -> tuple[np.ndarray, np.ndarray]:
        """Per dispatcher, its view's cost per message (D, n, k) and each matcher's backlog at
        `t` (D, n), extrapolated with the work sent since when `adaptive`."""
        if self._terms is None:
            self._terms = view_terms(*(np.stack([v[f] for v in self.views]) for f in range(3)), subs)
            self._ats = np.array([v[3] for v in self.views])
        v_cost, v_work, v_load = self._terms
        return v_cost, backlog(v_work, v_load, self._ats, t, adaptive, self.since)

    def charge(self, sample: _Sample, chosen: np.ndarray, col: np.ndarray) -> None:
        """Count the expected work of each message sent to `chosen` against its dispatcher's view."""
        v_cost = self._terms[0]
        np.add.at(self.since, (sample.disp, chosen), v_cost[sample.disp, chosen, col] * sample.weight)


def _mark(out: dict, state: _Matchers) -> None:
    """The backlogs at a mark; busy seconds so far at the first."""
    out["backlog"].append(state.work.sum(axis=1))
    if out["busy_from_first_mark"] is None:
        out["busy_from_first_mark"] = state.busy.sum(axis=1).copy()
