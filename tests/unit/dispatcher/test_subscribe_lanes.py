"""A subscribe reaches every matcher mPartition names for it (bluedove/dispatcher/subscriber.py
`send`): a request's subscriptions for one matcher go to its lane as one run, a run of more
than SEND_BATCH_MAX in calls of at most that many; a matcher that fails is marked down and sent
its part again until it acks (a subscribe answers only once every live owner has it), and is
returned (left to the catalogue log) once gossip holds it dead or the retry window passed,
while the others get theirs."""

from __future__ import annotations

import asyncio
from functools import partial
from types import SimpleNamespace

import numpy as np

from bluedove.core.model import build_subscription
from bluedove.core.space import default_space
from bluedove.dispatcher.add_stream import AddStream
from bluedove.dispatcher.subscriber import SEND_BATCH_MAX, Subscriber
from bluedove.v1 import matcher_pb2 as pb
from tests.unit.dispatcher.fake_cluster import MEMBERS, FakeCluster

SPACE = default_space()


class _Matcher:
    def __init__(self, fails: float = 0) -> None:
        self.calls: list[list[str]] = []  # the ids of each AddSubscriptions call
        self.fails = fails  # how many calls fail before one succeeds
        self.failed = 0

    async def AddSubscriptions(self, req, timeout):
        if self.failed < self.fails:
            self.failed += 1
            raise ConnectionError("the matcher is gone")
        self.calls.append([s.id for s in req.subscriptions])
        return pb.SubscriptionAck(changed=len(req.subscriptions), epoch=1)


def _subscriber(failing: str | None = None, fails: float = float("inf")) -> tuple[Subscriber, FakeCluster]:
    cluster = FakeCluster({m: _Matcher(fails if m == failing else 0) for m in MEMBERS})
    store = SimpleNamespace(add_subscriptions_each=None, remove_subscriptions_each=None)  # the lanes' own
    s = Subscriber(SimpleNamespace(subscribe_timeout_s=5.0), cluster, store)
    for m in MEMBERS:  # matchers that serve the unary call only
        s._streams[m] = AddStream(partial(cluster.stub, m), 5.0)
        s._streams[m].unary = True
    return s, cluster


def _subs(n: int, x0: tuple[float, float]) -> list:
    return [build_subscription(f"s{i}", "q", {"x0": list(x0)}, SPACE) for i in range(n)]


async def test_a_batch_reaches_each_owner_once_in_calls_of_at_most_send_batch_max():
    s, cluster = _subscriber()
    many = _subs(SEND_BATCH_MAX + 500, (100, 300))  # m1 and m2
    few = [build_subscription(f"t{i}", "q", {"x0": [900, 950]}, SPACE) for i in range(3)]  # m4
    assert await s.send(many + few) == set()
    for m in ("m1", "m2"):
        calls = cluster.matchers[m].calls
        assert max(map(len, calls)) <= SEND_BATCH_MAX
        assert sorted(i for c in calls for i in c) == sorted(x.id for x in many)
    assert cluster.matchers["m3"].calls == []
    assert [i for c in cluster.matchers["m4"].calls for i in c] == ["t0", "t1", "t2"]


async def test_concurrent_requests_share_a_matcher_s_calls():
    s, cluster = _subscriber()
    await asyncio.gather(*(s.send(_subs(1, (10, 20))) for _ in range(20)))
    calls = cluster.matchers["m1"].calls
    assert sum(map(len, calls)) == 20 and len(calls) < 20  # runs of several requests in one call


async def test_a_matcher_that_fails_once_is_sent_its_part_again_before_the_subscribe_answers():
    """Its down mark would not outlast another call's success: answering before it has the
    subscriptions would let a message published afterwards miss them."""
    s, cluster = _subscriber(failing="m2", fails=1)
    subs = _subs(40, (100, 300))
    assert await s.send(subs) == set()
    assert cluster.down == ["m2"] and cluster.matchers["m2"].failed == 1
    for m in ("m1", "m2"):
        assert sorted(i for c in cluster.matchers[m].calls for i in c) == sorted(x.id for x in subs)


async def test_a_failing_matcher_gossip_holds_dead_is_left_to_the_log_the_others_get_theirs():
    s, cluster = _subscriber(failing="m2")
    subs = _subs(40, (100, 300))
    sending = asyncio.ensure_future(s.send(subs))
    await asyncio.sleep(0.3)
    assert not sending.done() and cluster.matchers["m2"].failed >= 2  # sent again while it may be alive
    cluster.dead.add("m2")
    assert await sending == {"m2"}
    assert set(cluster.down) == {"m2"}
    assert sorted(i for c in cluster.matchers["m1"].calls for i in c) == sorted(x.id for x in subs)


async def test_a_failing_matcher_the_table_stops_naming_is_returned_as_missed():
    s, cluster = _subscriber(failing="m2")
    sending = asyncio.ensure_future(s.send(_subs(5, (100, 300))))
    await asyncio.sleep(0.2)
    named = cluster.placement
    cluster.placement = lambda lows, highs: named(lows, highs) - {"m2"}  # a takeover moved its range
    assert await sending == {"m2"}


async def test_a_matcher_failing_past_the_retry_window_is_left_to_the_log(monkeypatch):
    monkeypatch.setattr("bluedove.dispatcher.subscriber.MISSED_RETRY_S", 0.3)
    s, cluster = _subscriber(failing="m2")
    assert await s.send(_subs(5, (100, 300))) == {"m2"}
    assert 2 <= cluster.matchers["m2"].failed <= 6  # backoff: 0.05, 0.1, 0.2, ...


async def test_filters_alone_or_beside_boxes_reach_the_owners_of_each_of_their_boxes():
    s, cluster = _subscriber()
    f = build_subscription("f", "q", {"any_of": [{"x0": [10, 20]}, {"x0": [800, 810]}]}, SPACE)  # m1 and m4
    assert f.filter is not None and len(f.boxes) == 2
    assert await s.send([f]) == set()  # a request of filters only
    g = build_subscription("g", "q", {"any_of": [{"x0": [300, 310]}, {"x0": [600, 610]}]}, SPACE)  # m2 and m3
    assert await s.send([g, *_subs(2, (900, 950))]) == set()  # m4
    sent = {m: [i for c in cluster.matchers[m].calls for i in c] for m in MEMBERS}
    assert sent == {"m1": ["f"], "m2": ["g"], "m3": ["g"], "m4": ["f", "s0", "s1"]}


def test_a_call_s_plain_subscriptions_go_in_columns_only_when_read_and_enough():
    from bluedove.dispatcher.subscriber import COLUMNS_MIN, _batch, _message

    plain = _subs(COLUMNS_MIN, (100, 300))
    f = _message(build_subscription("f", "q", {"any_of": [{"x0": [1, 2]}, {"x0": [5, 6]}]}, SPACE))
    read = _batch([*plain, f], "", True)
    assert list(read.boxes.ids) == [s.id for s in plain] and [m.id for m in read.subscriptions] == ["f"]
    assert np.frombuffer(read.boxes.lows).reshape(-1, 4).tolist() == [list(s.lows) for s in plain]
    for items, columns in (([*plain, f], False), ([*plain[1:], f], True)):  # not read; too few
        msgs = _batch(items, "", columns)
        assert not msgs.HasField("boxes") and [m.id for m in msgs.subscriptions] == [i.id for i in items]
