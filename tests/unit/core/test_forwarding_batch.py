"""The batch ranking chooses what `bluedove.core.forwarding.rank` chooses, message after message,
on random reports: the same order for every message (ties broken by the same draws, replayed
through `rank`) and the same work charged to each matcher."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.core.forwarding import matcher_loads, rank, rank_batch
from bluedove.core.load import LoadReport, cost


class Replay(random.Random):
    """An rng whose random() returns the given draws in order."""

    def __init__(self, draws):
        super().__init__(0)
        self.draws = list(draws)

    def random(self):
        return self.draws.pop(0)


def reference(policy, cands, usable, reports, members, k, sent, now, draws):
    """What the dispatcher did per message: rank the usable candidates with `sent`, then the
    others without, and charge the first choice under adaptive."""
    dims = range(k)
    report = lambda c: reports.get((c[1], c[0]), LoadReport())  # noqa: E731
    siblings = lambda m: [reports[(m, i)] for i in dims if (m, i) in reports]  # noqa: E731
    out = []
    for i, row in enumerate(cands):
        named = [(d, members[m]) for m, d in row if m >= 0]
        c = len(row)
        good = [x for x in named if usable[members.index(x[1])]]
        rest_c = [x for x in named if not usable[members.index(x[1])]]
        g_draws = [draws[i][j] for j, (m, d) in enumerate(row) if m >= 0 and usable[m]]
        r_draws = [draws[i][c + j] for j, (m, d) in enumerate(row) if m >= 0 and not usable[m]]
        order = rank(policy, good, report, now, Replay(g_draws), siblings, sent)
        rest = rank(policy, rest_c, report, now, Replay(r_draws), siblings)
        if order and policy == "adaptive":
            d, m = order[0]
            sent[m] = sent.get(m, 0.0) + cost(report(order[0]))
        out.append(order + rest)
    return out


report_st = st.builds(
    LoadReport,
    lam=st.sampled_from([0.0, 10.0, 250.0]) | st.floats(0, 5000),
    mu=st.sampled_from([0.0, 100.0, 1000.0]) | st.floats(0, 20000),
    q=st.integers(0, 50),
    subs=st.sampled_from([0, 100]) | st.integers(0, 10000),
    at=st.sampled_from([0.0, 1.0]) | st.floats(0, 2),
)


@st.composite
def cases(draw):
    members_n = draw(st.integers(1, 6))
    k = draw(st.integers(1, 4))
    members = [f"m{i}" for i in range(members_n)]
    reports = {}
    for m in members:
        for d in range(k):
            if draw(st.booleans()) or draw(st.booleans()):
                reports[(m, d)] = draw(report_st)
    n = draw(st.integers(1, 12))
    c = draw(st.integers(1, max(k, members_n)))
    cands = [[(draw(st.integers(-1 if j else 0, members_n - 1)), draw(st.integers(0, k - 1))) for j in range(c)]
             for _ in range(n)]
    usable = [draw(st.booleans()) for _ in members]
    sent = {m: draw(st.sampled_from([0.0, 0.001]) | st.floats(0, 0.01)) for m in members if draw(st.booleans())}
    now = draw(st.floats(0, 3))
    seed = draw(st.integers(0, 2**32 - 1))
    return members, k, reports, cands, usable, sent, now, seed


@settings(max_examples=400, deadline=None)
@given(cases(), st.sampled_from(["adaptive", "response-time", "subscription-count"]))
def test_the_batch_ranks_as_rank_does_message_after_message(case, policy):
    members, k, reports, cands, usable, sent, now, seed = case
    c = len(cands[0])
    draws = np.random.default_rng(seed).random((len(cands), 2 * c))
    if seed % 2:  # coarse draws: equal keys with equal draws keep the candidates' order, in both
        draws = np.floor(draws * 2) / 2
    expected_sent = dict(sent)
    expected = reference(policy, cands, usable, reports, members, k, expected_sent, now, draws.tolist())

    loads = matcher_loads(members, k, reports)
    sent_arr = np.array([sent.get(m, 0.0) for m in members])
    cand_m = np.array([[m for m, _ in row] for row in cands])
    cand_d = np.array([[d for _, d in row] for row in cands])
    order, count = rank_batch(policy, cand_m, cand_d, np.array(usable), loads, sent_arr, now, draws)
    got = [[(int(cand_d[i, j]), members[cand_m[i, j]]) for j in order[i, :count[i]]] for i in range(len(cands))]
    assert got == expected
    assert sent_arr.tolist() == [expected_sent.get(m, 0.0) for m in members]  # bit for bit


def test_under_adaptive_a_batch_spreads_over_equal_matchers_as_it_charges_them():
    """Two idle matchers of equal cost: each message's charge makes the other the better choice."""
    members = ["a", "b"]
    reports = {(m, 0): LoadReport(lam=0.0, mu=1000.0, q=0, subs=10, at=0.0) for m in members}
    loads = matcher_loads(members, 1, reports)
    cand_m = np.array([[0, 1]] * 10)
    cand_d = np.zeros((10, 2), dtype=np.int64)
    sent = np.zeros(2)
    order, count = rank_batch("adaptive", cand_m, cand_d, np.ones(2, bool), loads, sent,
                              0.0, np.random.default_rng(1).random((10, 4)))
    firsts = [int(cand_m[i, order[i, 0]]) for i in range(10)]
    assert sorted(firsts) == [0] * 5 + [1] * 5 and list(count) == [2] * 10
    assert sent.tolist() == [0.005, 0.005]
