"""ClusterView.ranked_candidates reads each candidate's own load report: the policies rank on real loads."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bluedove.core.load import LoadReport
from bluedove.core.partition.segments import equal_partition
from bluedove.core.space import Dimension, Space
from bluedove.dispatcher.view import ClusterView, MemberHealth
from bluedove.runtime.settings import DispatcherSettings

SPACE = Space((Dimension("x0", 0.0, 1000.0), Dimension("x1", 0.0, 1000.0)))


def view(policy: str) -> ClusterView:
    v = ClusterView(replace(DispatcherSettings(), policy=policy), store=None)
    v.table = equal_partition(SPACE, {"m1": "a:1", "m2": "b:2"})
    for m in ("m1", "m2"):
        v.health[m] = MemberHealth(ready=True, reachable=True)
    return v


@pytest.mark.parametrize("policy", ["adaptive", "response-time", "subscription-count"])
def test_the_candidate_with_the_better_report_comes_first(policy):
    v = view(policy)
    # the point (100, 900): its dim-0 candidate is m1, its dim-1 candidate is m2
    v.reports[("m1", 0)] = LoadReport(lam=10, mu=100.0, q=50, subs=9000, at=0.0)  # busy, big set
    v.reports[("m2", 1)] = LoadReport(lam=10, mu=1000.0, q=0, subs=100, at=0.0)  # idle, small set
    for _ in range(20):  # ties would be broken at random: there must be none
        assert v.ranked_candidates((100.0, 900.0), now=0.5) == [(1, "m2"), (0, "m1")]
    v.reports[("m1", 0)], v.reports[("m2", 1)] = v.reports[("m2", 1)], v.reports[("m1", 0)]
    assert v.ranked_candidates((100.0, 900.0), now=0.5) == [(0, "m1"), (1, "m2")]


@pytest.mark.parametrize("policy", ["adaptive", "response-time"])
def test_a_matcher_busy_on_its_other_dimension_is_ranked_behind_an_idle_one(policy):
    """One index thread serves all of a matcher's dimension queues: m1's empty dim-0 queue still
    waits behind the 0.5 s of work queued on its dim-1 queue, so the idle m2 comes first."""
    v = view(policy)
    v.reports[("m1", 0)] = LoadReport(lam=10, mu=1000.0, q=0, subs=100, at=0.0)  # the candidate: empty
    v.reports[("m1", 1)] = LoadReport(lam=900, mu=1000.0, q=500, subs=100, at=0.0)  # m1's other queue
    v.reports[("m2", 1)] = LoadReport(lam=10, mu=500.0, q=0, subs=100, at=0.0)  # slower, but idle
    v.reports[("m2", 0)] = LoadReport(lam=10, mu=500.0, q=0, subs=100, at=0.0)
    assert v.ranked_candidates((100.0, 900.0), now=0.1) == [(1, "m2"), (0, "m1")]
    del v.reports[("m1", 1)]  # judged by the candidate queue alone, m1 would win
    assert v.ranked_candidates((100.0, 900.0), now=0.1) == [(0, "m1"), (1, "m2")]


def test_adaptive_spreads_a_burst_of_messages_between_reports():
    """Between two reports the dispatcher counts the work it sent: a burst of messages with the
    same two idle candidates alternates between them instead of herding onto one."""
    v = view("adaptive")
    for m, i in (("m1", 0), ("m1", 1), ("m2", 0), ("m2", 1)):
        v.reports[(m, i)] = LoadReport(lam=0, mu=1000.0, q=0, subs=100, at=0.0)
    firsts = [v.ranked_candidates((100.0, 900.0), now=0.0)[0][1] for _ in range(100)]
    assert firsts.count("m1") == firsts.count("m2") == 50
    assert all(firsts[j] != firsts[j + 1] for j in range(0, 100, 2))  # equal again after each pair
    assert v.charges.by_member() == {"m1": pytest.approx(0.05), "m2": pytest.approx(0.05)}
    v.charge((1, "m2"))  # a failed-over message counted at the candidate that takes it instead
    assert v.charges.by_member()["m2"] == pytest.approx(0.051)
    # the random policy keeps no such account
    r = view("random")
    r.reports.update(v.reports)
    r.ranked_candidates((100.0, 900.0), now=0.0)
    assert r.charges.by_member() == {}


def test_a_batch_ranked_at_once_is_charged_as_one_ranked_message_by_message():
    """rank_batch's compiled loop charges each message's first choice: the account ends as a
    burst through ranked_candidates leaves it, and a report clears a matcher's share."""
    v = view("adaptive")
    for m, i in (("m1", 0), ("m1", 1), ("m2", 0), ("m2", 1)):
        v.reports[(m, i)] = LoadReport(lam=0, mu=1000.0, q=0, subs=100, at=0.0)
    ranking = v.rank_batch(np.array([[100.0, 900.0]] * 100), now=0.0)
    firsts = [ranking.listed(i)[0][1] for i in range(100)]
    assert firsts.count("m1") == firsts.count("m2") == 50
    assert v.charges.by_member() == {"m1": pytest.approx(0.05), "m2": pytest.approx(0.05)}
    v.charges.reset("m1")
    assert v.charges.by_member() == {"m2": pytest.approx(0.05)}
