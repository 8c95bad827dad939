"""bluedove/core/forwarding.py: the paper's processing-time estimate and the forwarding policies.

The paper's §III-B: q_t = q_t' + (λ − μ)(t − t'), processing time (q_t + 1)/μ, forward to the
candidate with the least.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from bluedove.core.forwarding import POLICIES, rank
from bluedove.core.load import (
    COLD_COST_BASE_S,
    COLD_COST_PER_SUB_S,
    LoadReport,
    backlog,
    extrapolated_queue,
    matcher_time,
    processing_time,
)

# -- q_t -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("report, now, expected", [
    # no time passed: the reported queue
    (LoadReport(lam=100, mu=50, q=7, at=10.0), 10.0, 7.0),
    # growing: q + (λ − μ)(t − t')
    (LoadReport(lam=100, mu=50, q=7, at=10.0), 12.0, 107.0),
    (LoadReport(lam=100, mu=0, q=0, at=0.0), 0.5, 50.0),
    (LoadReport(lam=1000.5, mu=1000, q=3, at=1.0), 5.0, 5.0),
    # draining
    (LoadReport(lam=50, mu=100, q=200, at=10.0), 12.0, 100.0),
    (LoadReport(lam=50, mu=100, q=200, at=10.0), 14.0, 0.0),  # exactly empty
    # clamped at zero: a queue cannot go negative
    (LoadReport(lam=50, mu=100, q=200, at=10.0), 20.0, 0.0),
    (LoadReport(lam=0, mu=9000, q=0, at=0.0), 100.0, 0.0),
    # balanced rates: unchanged
    (LoadReport(lam=80, mu=80, q=5, at=0.0), 60.0, 5.0),
    # a report from the future (clock skew) is taken as of now, not extrapolated backwards
    (LoadReport(lam=100, mu=50, q=7, at=10.0), 9.0, 7.0),
    (LoadReport(lam=0, mu=100, q=7, at=10.0), 5.0, 7.0),
])
def test_extrapolated_queue(report, now, expected):
    assert extrapolated_queue(report, now) == pytest.approx(expected)


# -- processing time -----------------------------------------------------------------------------


@pytest.mark.parametrize("report, now, extrapolate, expected", [
    # (q_t + 1) / μ
    (LoadReport(lam=0, mu=100, q=0, at=0.0), 0.0, True, 0.01),
    (LoadReport(lam=0, mu=100, q=9, at=0.0), 0.0, True, 0.1),
    (LoadReport(lam=200, mu=100, q=9, at=0.0), 1.0, True, 1.1),  # q_t = 9 + 100
    (LoadReport(lam=200, mu=100, q=9, at=0.0), 1.0, False, 0.1),  # response-time: stale q
    (LoadReport(lam=0, mu=100, q=9, at=0.0), 1.0, True, 0.01),  # drained to 0 by now
    (LoadReport(lam=0, mu=100, q=9, at=0.0), 1.0, False, 0.1),
    (LoadReport(lam=0, mu=100, q=9, at=0.0), 50.0, True, 0.01),  # clamped, never below 1/μ
])
def test_processing_time(report, now, extrapolate, expected):
    assert processing_time(report, now, extrapolate=extrapolate) == pytest.approx(expected)


@pytest.mark.parametrize("report, now, expected", [
    # μ = 0 (no measurement yet): cost from the subscription-set size, still times (q_t + 1)
    (LoadReport(mu=0, q=0, subs=0), 0.0, COLD_COST_BASE_S),
    (LoadReport(mu=0, q=0, subs=1000), 0.0, COLD_COST_BASE_S + 1000 * COLD_COST_PER_SUB_S),
    (LoadReport(mu=0, q=4, subs=1000), 0.0, 5 * (COLD_COST_BASE_S + 1000 * COLD_COST_PER_SUB_S)),
    (LoadReport(lam=10, mu=0, q=0, subs=0, at=0.0), 1.0, 11 * COLD_COST_BASE_S),  # q_t still grows
])
def test_processing_time_cold_start_when_mu_is_zero(report, now, expected):
    t = processing_time(report, now)
    assert t == pytest.approx(expected)
    assert t > 0  # finite and positive: never a division by zero


def test_cold_start_orders_by_set_size():
    small, big = LoadReport(subs=10), LoadReport(subs=100_000)
    assert processing_time(small, 0.0) < processing_time(big, 0.0)


def test_processing_time_defaults_to_extrapolating():
    r = LoadReport(lam=500, mu=100, q=0, at=0.0)
    assert (processing_time(r, 2.0) == processing_time(r, 2.0, extrapolate=True)
            != processing_time(r, 2.0, extrapolate=False))


# -- rank ----------------------------------------------------------------------------------------


def ranked(policy, reports: dict, now=0.0, seed=0, candidates=None):
    cands = candidates if candidates is not None else list(reports)
    return rank(policy, cands, lambda c: reports[c], now, random.Random(seed))


def test_policies_are_the_four_of_the_design():
    assert set(POLICIES) == {"adaptive", "response-time", "subscription-count", "random"}


def test_adaptive_picks_the_least_processing_time():
    reports = {
        (0, "a"): LoadReport(mu=100, q=50),  # 0.51 s
        (1, "b"): LoadReport(mu=1000, q=50),  # 0.051 s
        (2, "c"): LoadReport(mu=10, q=0),  # 0.1 s
    }
    assert ranked("adaptive", reports) == [(1, "b"), (2, "c"), (0, "a")]


def test_adaptive_sees_a_queue_grow_between_reports_where_response_time_does_not():
    # Fig. 4 of the paper: a was the better choice at the report, but its queue has grown since.
    reports = {
        (0, "a"): LoadReport(lam=2000, mu=1000, q=0, at=0.0),
        (1, "b"): LoadReport(lam=0, mu=500, q=0, at=0.0),
    }
    assert ranked("response-time", reports, now=0.5) == [(0, "a"), (1, "b")]
    assert ranked("adaptive", reports, now=0.5) == [(1, "b"), (0, "a")]
    # at the report time both agree
    assert ranked("adaptive", reports, now=0.0) == [(0, "a"), (1, "b")]


def test_subscription_count_picks_the_smallest_set():
    reports = {
        (0, "a"): LoadReport(subs=300, mu=1),
        (1, "b"): LoadReport(subs=100, mu=1, q=10_000),  # load is ignored by this policy
        (2, "c"): LoadReport(subs=200, mu=1),
    }
    assert ranked("subscription-count", reports) == [(1, "b"), (2, "c"), (0, "a")]


@pytest.mark.parametrize("policy", POLICIES)
def test_one_entry_per_distinct_matcher(policy):
    reports = {
        (0, "a"): LoadReport(mu=100, q=10, subs=10),
        (1, "b"): LoadReport(mu=100, q=20, subs=20),
        (2, "a"): LoadReport(mu=100, q=0, subs=0),
        (3, "b"): LoadReport(mu=100, q=30, subs=30),
    }
    for seed in range(20):
        out = ranked(policy, reports, seed=seed)
        assert sorted(m for _, m in out) == ["a", "b"]
        assert all(c in reports for c in out)


@pytest.mark.parametrize("policy", ["adaptive", "response-time", "subscription-count"])
def test_a_matcher_on_several_dimensions_appears_with_its_best(policy):
    reports = {
        (0, "a"): LoadReport(mu=100, q=40, subs=40),
        (1, "b"): LoadReport(mu=100, q=20, subs=20),
        (2, "a"): LoadReport(mu=100, q=0, subs=0),
        (3, "c"): LoadReport(mu=100, q=30, subs=30),
    }
    assert ranked(policy, reports) == [(2, "a"), (1, "b"), (3, "c")]


@pytest.mark.parametrize("policy", ["adaptive", "response-time", "subscription-count"])
def test_failover_order_is_best_first_across_distinct_matchers(policy):
    # k = 4 candidates, one per dimension, all distinct: the whole list is the retry order.
    reports = {(i, m): LoadReport(mu=100, q=q, subs=q)
               for i, (m, q) in enumerate([("a", 3), ("b", 1), ("c", 4), ("d", 2)])}
    assert ranked(policy, reports) == [(1, "b"), (3, "d"), (0, "a"), (2, "c")]


def test_a_single_candidate_is_the_whole_order():
    reports = {(0, "a"): LoadReport()}
    for policy in POLICIES:
        assert ranked(policy, reports) == [(0, "a")]


@pytest.mark.parametrize("policy", POLICIES)
def test_no_candidates_give_an_empty_order(policy):
    assert ranked(policy, {}) == []


@pytest.mark.parametrize("policy", ["adaptive", "response-time", "subscription-count"])
def test_ties_are_shared_not_always_given_to_the_same_matcher(policy):
    reports = {(i, m): LoadReport(mu=100, q=5, subs=5) for i, m in enumerate("abcd")}
    firsts = Counter(ranked(policy, reports, seed=seed)[0][1] for seed in range(400))
    assert set(firsts) == set("abcd")
    assert min(firsts.values()) > 50  # about 100 each


def test_random_spreads_over_every_candidate_whatever_the_load():
    reports = {
        (0, "a"): LoadReport(mu=1, q=10_000, subs=10**6),
        (1, "b"): LoadReport(mu=10_000, q=0, subs=0),
        (2, "c"): LoadReport(mu=100, q=10, subs=10),
    }
    firsts = Counter(ranked("random", reports, seed=seed)[0][1] for seed in range(600))
    assert set(firsts) == {"a", "b", "c"}
    assert min(firsts.values()) > 120  # about 200 each


def test_random_is_reproducible_with_the_same_rng():
    reports = {(i, m): LoadReport() for i, m in enumerate("abcdefgh")}
    assert ranked("random", reports, seed=7) == ranked("random", reports, seed=7)


def test_rank_does_not_reorder_the_callers_list():
    cands = [(0, "a"), (1, "b"), (2, "c")]
    before = list(cands)
    rank("random", cands, lambda c: LoadReport(), 0.0, random.Random(1))
    rank("adaptive", cands, lambda c: LoadReport(q=2 - c[0], mu=1), 0.0, random.Random(1))
    assert cands == before


@pytest.mark.parametrize("policy", ["", "Adaptive", "round-robin", "least-loaded"])
def test_unknown_policy_raises_naming_it(policy):
    with pytest.raises(ValueError) as exc:
        ranked(policy, {(0, "a"): LoadReport(), (1, "b"): LoadReport()})
    assert repr(policy) in str(exc.value)


# -- one index thread per matcher: the backlog of all its queues -------------------------------


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("extrapolate", [True, False])
def test_a_matcher_with_one_queue_is_the_papers_estimate(seed, extrapolate):
    """With a single dimension queue, backlog + 1/μ is exactly (q_t + 1)/μ of the paper (once μ is
    measured; a cold queue's estimated cost drains its backlog, where the paper's q_t only grows)."""
    rng = random.Random(seed)
    r = LoadReport(lam=rng.uniform(0, 3000), mu=rng.choice([500.0, 2500.0]), q=rng.randrange(100),
                   subs=rng.randrange(10_000), at=5.0)
    now = 5.0 + rng.uniform(0, 2)
    assert matcher_time(r, [r], now, extrapolate) == pytest.approx(processing_time(r, now, extrapolate))


def test_the_backlog_drains_at_the_matchers_spare_capacity_not_each_queues():
    # two queues each fed at half of their own rate: the one thread is fully used, nothing drains
    a = LoadReport(lam=500, mu=1000, q=100, at=0.0)
    b = LoadReport(lam=250, mu=500, q=50, at=0.0)
    assert backlog([a, b], 0.0) == pytest.approx(0.2)
    assert backlog([a, b], 3.0) == pytest.approx(0.2)
    # the paper's per-queue view would call both queues empty after 0.2 s
    assert extrapolated_queue(a, 0.2) == 0.0 and extrapolated_queue(b, 0.2) == 0.0
    # half used: the 0.2 s of work drains in 0.4 s, then stays at zero
    a2 = LoadReport(lam=250, mu=1000, q=100, at=0.0)
    b2 = LoadReport(lam=125, mu=500, q=50, at=0.0)
    assert backlog([a2, b2], 0.2) == pytest.approx(0.1)
    assert backlog([a2, b2], 0.4) == pytest.approx(0.0, abs=1e-12)
    assert backlog([a2, b2], 9.0) == 0.0
    # response-time does not extrapolate
    assert backlog([a2, b2], 9.0, extrapolate=False) == pytest.approx(0.2)
    assert backlog([], 1.0) == 0.0


def test_rank_with_siblings_puts_the_matcher_with_less_total_work_first():
    reps = {
        (0, "m1"): LoadReport(lam=10, mu=1000, q=0, at=0.0), (1, "m1"): LoadReport(lam=900, mu=1000, q=400, at=0.0),
        (0, "m2"): LoadReport(lam=10, mu=800, q=0, at=0.0), (1, "m2"): LoadReport(lam=10, mu=800, q=5, at=0.0),
    }
    siblings = lambda m: [reps[(0, m)], reps[(1, m)]]  # noqa: E731
    cands = [(0, "m1"), (1, "m2")]
    for policy in ("adaptive", "response-time"):
        assert rank(policy, cands, reps.__getitem__, 0.1, random.Random(0), siblings)[0] == (1, "m2")
        # per queue, m1's empty dimension-0 queue looks best
        assert rank(policy, cands, reps.__getitem__, 0.1, random.Random(0))[0] == (0, "m1")
