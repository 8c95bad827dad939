"""The dispatcher's cluster view ranks a message's candidates by their load reports."""

from bluedove.forwarding import LoadReport
from bluedove.segments import equal_partition
from bluedove.settings import DispatcherSettings
from bluedove.space import default_space
from dispatcher.cluster import ClusterView, MemberHealth


def view(policy: str) -> ClusterView:
    v = ClusterView(DispatcherSettings(policy=policy), store=None)
    v._set_table(equal_partition(default_space(), {f"m{i}": f"a{i}" for i in range(1, 5)}))
    for m in v.table.members:
        v.health[m] = MemberHealth(ready=True, reachable=True)
    return v


def test_the_candidate_with_the_shortest_processing_time_comes_first():
    v = view("adaptive")
    # A message at (10, 300, 600, 900): candidates m1 on x0, m2 on x1, m3 on x2, m4 on x3.
    point = (10.0, 300.0, 600.0, 900.0)
    for m, i in (("m1", 0), ("m2", 1), ("m4", 3)):
        v.reports[(m, i)] = LoadReport(lam=100, mu=1000, q=500, subs=10, at=0.0)  # long queues
    v.reports[("m3", 2)] = LoadReport(lam=100, mu=1000, q=0, subs=10, at=0.0)  # idle
    assert v.ranked_candidates(point, now=0.0)[0] == (2, "m3")
    v.reports[("m3", 2)] = LoadReport(lam=100, mu=1000, q=5000, subs=10, at=0.0)
    v.reports[("m1", 0)] = LoadReport(lam=100, mu=1000, q=1, subs=10, at=0.0)
    assert v.ranked_candidates(point, now=0.0)[0] == (0, "m1")


def test_subscription_count_policy_reads_the_set_sizes():
    v = view("subscription-count")
    point = (10.0, 300.0, 600.0, 900.0)
    for m, i, subs in (("m1", 0, 900), ("m2", 1, 50), ("m3", 2, 700), ("m4", 3, 800)):
        v.reports[(m, i)] = LoadReport(subs=subs, at=0.0)
    assert v.ranked_candidates(point, now=0.0)[0] == (1, "m2")
