"""The time-stepped simulator for saturation searches: messages ranked in numpy as `rank` does, one core per matcher."""

# What is exact and what is approximated (docs/reproduction.md, "How the simulator works"):
# - Reports are the real dispatcher's (dispatcher/cluster.py): every dispatcher refreshes every
#   matcher's per-dimension report every `report_interval_s` (phases staggered), λ and μ over the
#   last `stats_window_s` as matcher/stats.py computes them (λ arrivals/s, μ messages per second of
#   matching work, q queued), and ranks with that view until its next refresh.
# - Decisions: the messages arriving in one step of `dt_s` see the same clock; each is sent to its
#   best candidate under the policy, computed by `rank_vectorised` (a unit test checks it picks
#   what `bluedove.forwarding.rank` puts first). `per_step` sampled messages stand for the step's
#   rate·dt real ones (sampling), all of the step's messages herd like the real dispatcher's would.
# - Service: a matcher is one core (our matcher runs every index call on one thread); in a step it
#   serves min(backlog, dt) seconds of work, shared among its dimension queues in proportion to
#   their queued work (a fluid form of FIFO), messages leaving in proportion to work.

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bluedove.forwarding import COLD_COST_BASE_S, COLD_COST_PER_SUB_S
from lab.sim.engine import SimConfig


@dataclass(frozen=True)
class Step:
    dt_s: float = 0.002
    per_step: int = 256  # sampled messages per step (at most; fewer when rate·dt is smaller)


def view_terms(lam, mu, q, subs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a view of n matchers' k dimension queues (arrays (..., n, k)): each queue's cost per
    message (1/μ, or estimated from the set size with no μ yet), and per matcher its queued work
    W = Σ_j q_j/μ_j and utilisation Σ_j λ_j/μ_j, (..., n)."""
    cost = np.where(mu > 0, 1.0 / np.where(mu > 0, mu, 1.0), COLD_COST_BASE_S + COLD_COST_PER_SUB_S * subs)
    return cost, (q * cost).sum(axis=-1), (lam * cost).sum(axis=-1)


def backlog(work, load, at, now, extrapolate: bool, sent=0.0) -> np.ndarray:
    """`bluedove.forwarding.backlog` on arrays: W + sent + (Σ λ/μ − 1)(t − t') never below zero, (..., n)."""
    if not extrapolate:
        return work
    return np.maximum(0.0, work + sent + (load - 1.0) * np.maximum(0.0, np.asarray(now) - np.asarray(at))[..., None])


def matcher_time(lam, mu, q, subs, at, now, extrapolate: bool) -> np.ndarray:
    """`bluedove.forwarding.matcher_time` on arrays (..., n, k), views taken at `at` (...): the
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
        cfg, n, k, rng = self.cfg, self.n, self.k, self.rng
        dt, P = self.step.dt_s, len(self.cand)
        q = np.zeros((n, k))
        work = np.zeros((n, k))
        arrived = np.zeros((n, k))
        done = np.zeros((n, k))
        busy = np.zeros((n, k))
        D = cfg.dispatchers
        W = cfg.stats_window_s
        hist: list[tuple[float, np.ndarray, np.ndarray, np.ndarray]] = [(0.0, arrived.copy(), done.copy(), busy.copy())]
        last_mu = self.warm_mu() if cfg.warm else np.zeros((n, k))
        views = [(np.zeros((n, k)), last_mu.copy(), np.zeros((n, k)), 0.0) for _ in range(D)]
        next_view = [cfg.report_interval_s * (d + 1) / D for d in range(D)]
        subs = self.sizes.astype(np.float64)
        count = rate * dt
        S = max(1, min(self.step.per_step, int(np.ceil(count))))
        weight = count / S
        out = {"backlog": [], "busy_from_first_mark": None, "weight": weight, "dt_s": dt}
        marks = sorted(marks)
        steps = int(round(horizon_s / dt))
        rows = np.arange(S)
        disp = rows % D
        dims = np.arange(k)[None, :]
        terms, ats = None, None  # the dispatchers' views as `view_terms` arrays, rebuilt on refresh
        # adaptive dispatchers count the work they sent each matcher since their view of it
        # (`sent` of bluedove.forwarding.rank), as the real dispatcher does
        since = np.zeros((D, n))
        for j in range(steps):
            t = j * dt
            if t - hist[-1][0] >= 0.5:  # matcher/stats.py buckets of 0.5 s
                hist.append((t, arrived.copy(), done.copy(), busy.copy()))
                while len(hist) > 2 and t - hist[1][0] >= W:
                    hist.pop(0)
            for d in range(D):
                if t >= next_view[d]:
                    t0, a0, d0, b0 = hist[0]
                    span = max(min(W, t - t0), 0.5)
                    dd, db = done - d0, busy - b0
                    fresh = (dd > 0) & (db > 0)
                    last_mu[fresh] = dd[fresh] / db[fresh]
                    views[d] = ((arrived - a0) / span, last_mu.copy(), np.floor(q), t)
                    since[d] = 0.0
                    next_view[d] += cfg.report_interval_s
                    terms = None
            while marks and t >= marks[0]:
                out["backlog"].append(work.sum(axis=1))
                if out["busy_from_first_mark"] is None:
                    out["busy_from_first_mark"] = busy.sum(axis=1).copy()
                marks.pop(0)
            p = rng.integers(0, P, S)
            if self.full:
                m = rng.integers(0, n, S)
                col = np.zeros(S, dtype=np.intp)
            else:
                cand = self.cand[p]
                if cfg.policy == "random":
                    col = rank_vectorised("random", cand, rng)
                elif cfg.policy == "subscription-count":
                    col = rank_vectorised(cfg.policy, subs[cand, dims], rng)
                else:
                    if terms is None:
                        terms = view_terms(*(np.stack([v[f] for v in views]) for f in range(3)), subs)
                        ats = np.array([v[3] for v in views])
                    v_cost, v_work, v_load = terms
                    adaptive = cfg.policy == "adaptive"
                    wait = backlog(v_work, v_load, ats, t, adaptive, since)  # (D, n)
                    row = disp[:, None]
                    col = rank_vectorised(cfg.policy, wait[row, cand] + v_cost[row, cand, dims], rng)
                    if adaptive:
                        chosen = cand[rows, col]
                        np.add.at(since, (disp, chosen), v_cost[disp, chosen, col] * weight)
                m = cand[rows, col]
            flat = m * k + col
            w_add = self.cost[p, col] * weight
            work += np.bincount(flat, weights=w_add, minlength=n * k).reshape(n, k)
            got = np.bincount(flat, minlength=n * k).reshape(n, k) * weight
            q += got
            arrived += got
            total = work.sum(axis=1)
            served = np.minimum(total, dt)
            frac = np.divide(served, total, out=np.zeros(n), where=total > 0)[:, None]
            sw, sq = work * frac, q * frac
            work -= sw
            q -= sq
            busy += sw
            done += sq
        out["backlog"].append(work.sum(axis=1))
        if out["busy_from_first_mark"] is None:
            out["busy_from_first_mark"] = np.zeros(n)
        out["busy_s"] = busy.sum(axis=1) - out["busy_from_first_mark"]
        out["busy_by_dim"] = busy
        return out
