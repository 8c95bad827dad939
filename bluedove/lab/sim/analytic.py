"""Saturation of load-blind policies in closed form: expected work per matcher per message; the busiest
sets the rate."""

# A policy that ignores load (random, subscription-count; P2P's single candidate; full
# replication's random matcher) sends a given message to a fixed distribution of matchers. Each
# matcher then receives, per message published, an expected amount of work w_m = E_p[cost of p on m
# · P(p goes to m)] (over the pool). The paper's saturation (§IV-B) is where the busiest core is busy
# all the time: rate_sat = 1 / max_m w_m (the fluid limit of an M/G/1 queue per matcher, which is
# stable iff its utilisation is below 1). The time-stepped simulator agrees with this within its
# bisection step (tests/unit/test_sim.py).

from __future__ import annotations

import numpy as np


def work_per_message(policy: str, cand: np.ndarray, cost: np.ndarray, subs: np.ndarray, n: int) -> np.ndarray:
    """(n,) expected seconds of work each matcher gets per message published."""
    P, k = cand.shape
    out = np.zeros(n)
    if (cand < 0).all():  # full replication: any matcher, chosen at random
        out[:] = cost[:, 0].mean() / n
        return out
    if policy == "random":  # `rank` shuffles the k candidates: each is first with probability 1/k
        share = np.full((P, k), 1.0 / k)
    elif policy == "subscription-count":  # the paper's §III-B.1: argmin |S^i(CM^i)|, ties split evenly
        key = subs[cand, np.arange(k)]
        best = key == key.min(axis=1, keepdims=True)
        share = best / best.sum(axis=1, keepdims=True)
    else:
        raise ValueError(f"analytic saturation: {policy!r} depends on load; use the time-stepped simulator")
    np.add.at(out, cand.ravel(), (share * cost).ravel() / P)
    return out


def saturation(policy: str, cand: np.ndarray, cost: np.ndarray, subs: np.ndarray, n: int) -> float:
    return 1.0 / float(work_per_message(policy, cand, cost, subs, n).max())
