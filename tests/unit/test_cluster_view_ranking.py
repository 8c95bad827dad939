"""ClusterView.ranked_candidates reads each candidate's own load report: the policies rank on real loads."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bluedove.forwarding import LoadReport
from bluedove.segments import equal_partition
from bluedove.settings import DispatcherSettings
from bluedove.space import Dimension, Space
from dispatcher.cluster import ClusterView, MemberHealth

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
