"""A replace goes to every matcher that holds the old version or is due the new one
(bluedove/dispatcher/subscriber.py `send_replace`), with its catalogue log entry, through the
ReplaceSubscriptions lanes; it answers once each has, or a matcher that does not answer in
time is passed over and left to the catalogue log."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from bluedove.core.model import build_subscription
from bluedove.core.space import default_space
from bluedove.dispatcher.subscriber import Subscriber
from bluedove.v1 import matcher_pb2 as pb
from tests.unit.dispatcher.fake_cluster import MEMBERS, FakeCluster

SPACE = default_space()


class _Matcher:
    def __init__(self) -> None:
        self.replaced: list[tuple[str, str, str]] = []  # (id, log id, predicates)

    async def ReplaceSubscriptions(self, req, timeout):
        self.replaced += [(s.id, s.log_id, s.predicates) for s in req.subscriptions]
        return pb.SubscriptionAck(changed=1, epoch=1)

    async def AddSubscriptions(self, req, timeout):  # (subscribes: not used here)
        raise AssertionError


def _subscriber() -> tuple[Subscriber, FakeCluster]:
    cluster = FakeCluster({m: _Matcher() for m in MEMBERS})
    store = SimpleNamespace(add_subscriptions_each=None, remove_subscriptions_each=None)  # the lanes' own
    return Subscriber(SimpleNamespace(subscribe_timeout_s=5.0), cluster, store), cluster


def sub(predicates: dict):
    return build_subscription("s", "q", predicates, SPACE)


def reached(cluster: FakeCluster) -> dict[str, list[tuple[str, str, str]]]:
    return {m: x.replaced for m, x in cluster.matchers.items() if x.replaced}


async def test_a_replace_reaches_the_owners_of_either_version_with_its_log_entry():
    s, cluster = _subscriber()
    await s.send_replace(sub({"x0": [600, 700]}), sub({"x0": [100, 200]}), "7-0")
    assert reached(cluster) == {"m1": [("s", "7-0", "")], "m3": [("s", "7-0", "")]}  # m1 drops it, m3 files it
    s, cluster = _subscriber()
    await s.send_replace(sub({"x0": {"in": [10, 900]}}), sub({"x0": [300, 400]}), "8-0")
    assert sorted(reached(cluster)) == ["m1", "m2", "m4"]  # a filter's boxes: the union of their owners
    assert reached(cluster)["m2"][0][2] == '{"x0":{"in":[10,900]}}'  # a filter travels as its predicates


async def test_an_unknown_old_version_reaches_every_member_and_a_void_new_one_its_old_owners():
    s, cluster = _subscriber()
    await s.send_replace(sub({"x0": [600, 700]}), None, "9-0")
    assert sorted(reached(cluster)) == list(MEMBERS)
    s, cluster = _subscriber()
    await s.send_replace(sub({"x0": [2000, 3000]}), sub({"x0": [100, 200]}), "10-0")  # clipped away: void
    assert sorted(reached(cluster)) == ["m1"]  # nothing to file: the old owner still drops it


async def test_a_matcher_that_does_not_answer_holds_a_replace_no_longer_than_the_retry_window(monkeypatch):
    """Each call waits subscribe_timeout_s; it is sent again for MISSED_RETRY_S, then left to the log."""
    monkeypatch.setattr("bluedove.dispatcher.subscriber.MISSED_RETRY_S", 0.5)
    s, cluster = _subscriber()

    async def silent(req, timeout):
        await asyncio.sleep(60)

    cluster.matchers["m3"].ReplaceSubscriptions = silent
    s.s.subscribe_timeout_s = 0.2
    await asyncio.wait_for(s.send_replace(sub({"x0": [600, 700]}), sub({"x0": [100, 200]}), "7-0"), 2.0)
    assert sorted(reached(cluster)) == ["m1"] and set(cluster.down) == {"m3"}  # left to the catalogue log
    assert 2 <= len(cluster.down) <= 4  # 0.2 s a call, sent again while the window lasted
