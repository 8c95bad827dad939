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
from bluedove.sim.engine import SimConfig


@dataclass(frozen=True)
class Step:
    dt_s: float = 0.002
    per_step: int = 256  # sampled messages per step (at most; fewer when rate·dt is smaller)


def processing_time(lam, mu, q, at, subs, now: float, extrapolate: bool) -> np.ndarray:
    """`bluedove.forwarding.processing_time` on arrays: seed 001 §III-B, (q_t + 1)/μ with
    q_t = q_t' + (λ_t' − μ_t')(t − t') never below zero; with no μ yet, estimated from the set size."""
    qt = np.maximum(0.0, q + (lam - mu) * np.maximum(0.0, now - at)) if extrapolate else q
    cold = (qt + 1.0) * (COLD_COST_BASE_S + COLD_COST_PER_SUB_S * subs)
    return np.where(mu > 0, (qt + 1.0) / np.where(mu > 0, mu, 1.0), cold)


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
        stacked, ats = None, None  # the dispatchers' views as (D, n, k) arrays, rebuilt on refresh
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
                    next_view[d] += cfg.report_interval_s
                    stacked = None
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
                    if stacked is None:
                        stacked = tuple(np.stack([v[f] for v in views]) for f in range(3))
                        ats = np.array([v[3] for v in views])
                    ix = (disp[:, None], cand, dims)
                    keys = processing_time(stacked[0][ix], stacked[1][ix], stacked[2][ix], ats[disp][:, None],
                                           subs[cand, dims], t, cfg.policy == "adaptive")
                    col = rank_vectorised(cfg.policy, keys, rng)
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
