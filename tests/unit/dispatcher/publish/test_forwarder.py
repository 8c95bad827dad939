"""Forwarder.publish with a fake cluster: failover order, the stale-table path (one table pull
per round, then re-ranking), 503 when no candidate is left, and what a Forward call carries
(packed parts, read back as a matcher reads them). The network is faked."""

from __future__ import annotations

import asyncio
import inspect
import time

import grpc
import numpy as np
import pytest
from grpc.aio import AioRpcError, Metadata

from bluedove.core.errors import ApiError
from bluedove.core.forwarding import Ranking
from bluedove.core.load import LoadReport
from bluedove.core.partition.segments import equal_partition
from bluedove.core.space import Dimension, Space
from bluedove.core.wire import Part
from bluedove.dispatcher.publish.forwarder import Forwarder, Outgoing
from bluedove.dispatcher.view import ClusterView, MemberHealth
from bluedove.runtime.settings import DispatcherSettings
from bluedove.v1 import matcher_pb2 as pb


def rpc_error(code):
    return AioRpcError(code, Metadata(), Metadata(), details="fake")


class UnaryOnly:
    """A fake matcher's stub that serves the unary Forward only: the lanes fall back to it
    (their stream to a real matcher: tests/unit/dispatcher/test_forward_stream.py)."""

    def ForwardStream(self):
        raise rpc_error(grpc.StatusCode.UNIMPLEMENTED)


class FakeCluster:
    """Owners by epoch: before the pull every message ranks m1 then m2; after, m3 first."""

    def __init__(self, answers: dict[str, list]):
        self.answers = answers  # member -> exceptions to raise, one per call, then success
        self.calls: list[tuple[str, int]] = []
        self.pulls = 0
        self.pulled_from: list[str] = []
        self.down: list[str] = []
        self.charged: list[tuple[int, str]] = []  # failovers counted at the next candidate
        self.table = type("T", (), {"epoch": 1})()

    def ranked_candidates(self, point, now):
        return [(2, "m3"), (0, "m1")] if self.pulls else [(0, "m1"), (1, "m2")]

    def rank_batch(self, points, now):  # ClusterView.rank_batch, from the fake's per-message ranking
        return Ranking.from_lists([self.ranked_candidates(p, now) for p in points.tolist()])

    async def pull_table(self, member):  # ClusterView.pull_table's signature
        self.pulls += 1
        self.pulled_from.append(member)

    def mark_down(self, member):
        self.down.append(member)

    def mark_up(self, member):
        pass

    def charge(self, candidate):
        self.charged.append(candidate)

    def stub(self, member):
        cluster = self

        class Stub(UnaryOnly):
            async def Forward(self, req, timeout):
                cluster.calls.append((member, sum(p.count for p in req.packed)))
                pending = cluster.answers.get(member, [])
                if pending:
                    raise pending.pop(0)
                return pb.ForwardReply()

        return Stub()


def test_the_fake_pulls_with_the_real_signature():
    """The fake stands in for ClusterView: a call that fits the fake must fit the real one."""
    def names(fn):
        return list(inspect.signature(fn).parameters)
    assert names(FakeCluster.pull_table) == names(ClusterView.pull_table)


def outgoing(points) -> Outgoing:
    """Messages of the given values, as the dispatcher hands them to the forwarder; message i
    is "m<its first value>", or "m<i>" when the values repeat."""
    points = np.asarray(points, dtype=np.float64)
    firsts = [int(v) for v in points[:, 0]]
    ids = [f"m{v}" for v in firsts] if len(set(firsts)) == len(firsts) else [f"m{i}" for i in range(len(points))]
    return Outgoing(ids, [i.encode() for i in ids], points, [b'{"id":"%s"}' % i.encode() for i in ids],
                    np.zeros(len(ids), dtype=np.bool_))


def messages(n):
    return outgoing([[1, 2, 3]] * n)


async def test_failed_candidate_fails_over_to_the_next_and_is_marked_down():
    c = FakeCluster({"m1": [rpc_error(grpc.StatusCode.UNAVAILABLE)]})
    await Forwarder(DispatcherSettings(), c).publish(messages(5))
    assert c.calls == [("m1", 5), ("m2", 5)] and c.down == ["m1"] and c.pulls == 0
    assert c.charged == [(1, "m2")] * 5  # each counted where it went instead


async def test_stale_table_is_pulled_once_for_the_whole_batch_then_reranked():
    c = FakeCluster({"m1": [rpc_error(grpc.StatusCode.FAILED_PRECONDITION)]})
    fwd = Forwarder(DispatcherSettings(), c)
    await fwd.publish(messages(100))
    assert c.pulls == 1 and c.pulled_from == ["m1"]  # not once per message; from the matcher that refused
    assert c.calls == [("m1", 100), ("m3", 100)]  # the new table's owner, not the old next candidate
    assert c.down == [] and fwd.failovers == 100
    assert c.charged == []  # re-ranked, and ranking counts the new first choice itself


async def test_store_failure_blames_no_matcher_and_says_so():
    c = FakeCluster({"m1": [rpc_error(grpc.StatusCode.ABORTED)], "m2": [rpc_error(grpc.StatusCode.ABORTED)]})
    with pytest.raises(ApiError) as exc:
        await Forwarder(DispatcherSettings(), c).publish(messages(3))
    assert exc.value.status == 503 and "store" in exc.value.message
    assert c.down == []


async def test_a_matcher_over_its_bound_is_passed_over_without_blame():
    c = FakeCluster({"m1": [rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED)]})
    fwd = Forwarder(DispatcherSettings(), c)
    await fwd.publish(messages(4))
    assert c.calls == [("m1", 4), ("m2", 4)] and c.down == [] and fwd.refused == 0


async def test_every_candidate_over_its_bound_is_a_503_that_says_backpressure():
    c = FakeCluster({m: [rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED)] for m in ("m1", "m2")})
    fwd = Forwarder(DispatcherSettings(), c)
    with pytest.raises(ApiError) as exc:
        await fwd.publish(messages(3))
    assert exc.value.status == 503 and "backpressure" in exc.value.message
    assert c.down == [] and fwd.refused == 1 and fwd.outstanding == 0


async def test_past_max_outstanding_a_publish_is_refused_whole_before_any_call():
    c = FakeCluster({})
    fwd = Forwarder(DispatcherSettings(max_outstanding=5), c)
    fwd.outstanding = 3  # three messages of other publishes under way
    assert not fwd.full()
    with pytest.raises(ApiError) as exc:
        await fwd.publish(messages(3))
    assert exc.value.status == 503 and c.calls == [] and fwd.refused == 1 and fwd.outstanding == 3
    await fwd.publish(messages(2))  # fits: taken, and counted out again once stored
    assert c.calls == [("m1", 2)] and fwd.outstanding == 3
    fwd.outstanding = 5
    assert fwd.full()
    fwd.outstanding = 0
    await fwd.publish(messages(9))  # alone, a publish bigger than the bound still goes
    assert c.calls[-1] == ("m1", 9)


class SpreadCluster(FakeCluster):
    """Message i goes first to dimension i % 3 of m1, then to dimension 0 of m2."""

    def __init__(self, answers):
        super().__init__(answers)
        self.requests: list[tuple[str, pb.ForwardRequest]] = []

    def ranked_candidates(self, point, now):
        return [(int(point[0]) % 3, "m1"), (0, "m2")]

    def stub(self, member):
        inner = super().stub(member)
        cluster = self

        class Stub(UnaryOnly):
            async def Forward(self, req, timeout):
                cluster.requests.append((member, req))
                return await inner.Forward(req, timeout)

        return Stub()


def parts_of(req: pb.ForwardRequest) -> dict[int, list[str]]:
    """Each dimension's message ids, read as the matcher reads them; bodies checked on the way."""
    out = {}
    for p in req.packed:
        part = Part.from_packed(p, 3)
        ids = [part.id(i) for i in range(part.n)]
        assert [part.body(i) for i in range(part.n)] == [b'{"id":"%s"}' % i.encode() for i in ids]
        assert part.points[:, 0].tolist() == [float(i[1:]) for i in ids]  # the values travelled with them
        out[p.dimension] = ids
    assert not req.messages and not req.parts  # the packed form only
    return out


async def test_one_call_per_matcher_carries_every_dimension_as_a_part():
    c = SpreadCluster({})
    msgs = outgoing([[i, 0, 0] for i in range(9)])
    await Forwarder(DispatcherSettings(), c).publish(msgs)
    assert len(c.requests) == 1
    member, req = c.requests[0]
    assert member == "m1" and req.epoch == 1
    assert parts_of(req) == {0: ["m0", "m3", "m6"], 1: ["m1", "m4", "m7"], 2: ["m2", "m5", "m8"]}


async def test_a_failed_multi_dimension_call_fails_over_every_message_it_carried():
    c = SpreadCluster({"m1": [rpc_error(grpc.StatusCode.UNAVAILABLE)]})
    msgs = outgoing([[i, 0, 0] for i in range(6)])
    await Forwarder(DispatcherSettings(), c).publish(msgs)
    assert [m for m, _ in c.requests] == ["m1", "m2"] and c.down == ["m1"]
    assert parts_of(c.requests[1][1]) == {0: [f"m{i}" for i in range(6)]}


async def test_a_lane_call_holds_at_most_forward_batch_max_messages():
    c = SpreadCluster({})
    msgs = outgoing([[i, 0, 0] for i in range(25)])
    await Forwarder(DispatcherSettings(forward_batch_max=10), c).publish(msgs)
    sizes = [sum(len(v) for v in parts_of(r).values()) for _, r in c.requests]
    assert sizes == [9, 8, 8]  # a chunk per dimension (9, 8, 8 messages); two do not fit in one call
    assert sorted(i for _, r in c.requests for v in parts_of(r).values() for i in v) == sorted(msgs.ids)
    c = SpreadCluster({})  # one dimension: its chunk of 25 is cut to fit
    await Forwarder(DispatcherSettings(forward_batch_max=10), c).publish(outgoing([[3 * i, 0, 0] for i in range(25)]))
    assert [sum(len(v) for v in parts_of(r).values()) for _, r in c.requests] == [10, 10, 5]


async def test_chunks_of_concurrent_publishes_share_a_call():
    """Three publish calls at once, all for m1: their chunks (by dimension) wait in m1's lane
    and leave in one call, a packed part per dimension, each message once."""
    c = SpreadCluster({})
    fwd = Forwarder(DispatcherSettings(forward_batch_max=100, forward_inflight=1), c)
    batches = [outgoing([[v, 0, 0] for v in vs]) for vs in ([0, 3, 6], [10, 11, 12, 13], [20, 21])]
    await asyncio.gather(*(fwd.publish(b) for b in batches))
    assert len(c.requests) == 1 and fwd.calls == 1 and fwd.forwarded == 9
    assert parts_of(c.requests[0][1]) == {0: ["m0", "m3", "m6", "m12", "m21"], 1: ["m10", "m13"], 2: ["m11", "m20"]}


class FlakyView(ClusterView):
    """A real ClusterView (health, backoff, ranking) whose matchers answer from `answers`."""

    def __init__(self, answers: dict[str, list]):
        super().__init__(DispatcherSettings(policy="subscription-count"), store=None)
        space = Space((Dimension("x0", 0.0, 1000.0), Dimension("x1", 0.0, 1000.0)))
        self.table = equal_partition(space, {"m1": "a:1", "m2": "b:2"})
        for m in ("m1", "m2"):
            self.health[m] = MemberHealth(ready=True, reachable=True)
        # (100, 900): m1 (dim 0, the smaller set) is the first choice, m2 (dim 1) the second
        self.reports[("m1", 0)] = LoadReport(subs=10)
        self.reports[("m2", 1)] = LoadReport(subs=9000)
        self.fake = FakeCluster(answers)

    def stub(self, member):
        return self.fake.stub(member)


async def test_a_matcher_that_answers_again_is_marked_up_at_once():
    """Five transient failures put m1 at the longest backoff (16 s); its next success (as the
    last resort, m2 failing too) clears it: m1 is first choice again at once, and a new failure
    backs off from the start (down_backoff_s), not for the 16 s its old failures would give."""
    v = FlakyView({"m2": [rpc_error(grpc.StatusCode.UNAVAILABLE)]})
    t = time.monotonic()
    for i in range(4):  # long enough ago that each backoff was over before the next failure
        v.mark_down("m1", now=t - 1000 + 100 * i)
    v.mark_down("m1", now=t)
    assert not v.usable("m1", t) and v.health["m1"].down_until == t + 8 * v.s.down_backoff_s
    point = [100.0, 900.0]
    await Forwarder(v.s, v).publish(outgoing([point]))  # m2 fails, m1 answers
    assert [m for m, _ in v.fake.calls] == ["m2", "m1"]
    now = time.monotonic()
    assert v.usable("m1", now) and v.ranked_candidates(point, now)[0] == (0, "m1")
    v.mark_down("m1", now=now)
    assert v.health["m1"].down_until == now + v.s.down_backoff_s


class HeldCluster(FakeCluster):
    """Every message goes to m1 (dimension 0); each Forward call is held until `release()`."""

    def __init__(self):
        super().__init__({})
        self.sizes: list[int] = []  # messages per call, in the order the calls were made
        self.gate = asyncio.Event()
        self.under_way = 0
        self.most_under_way = 0

    def stub(self, member):
        cluster = self

        class Stub(UnaryOnly):
            async def Forward(self, req, timeout):
                cluster.sizes.append(sum(p.count for p in req.packed))
                cluster.under_way += 1
                cluster.most_under_way = max(cluster.most_under_way, cluster.under_way)
                await cluster.gate.wait()
                cluster.under_way -= 1
                return pb.ForwardReply()

        return Stub()


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


async def test_while_a_call_is_under_way_later_chunks_wait_and_leave_together():
    """A publish's chunk leaves at once on an idle lane; three small publishes arriving while
    that call is under way (together under half a call's worth) wait, then share one call."""
    c = HeldCluster()
    fwd = Forwarder(DispatcherSettings(forward_batch_max=100, forward_inflight=4), c)
    first = asyncio.ensure_future(fwd.publish(messages(10)))
    await settle()
    assert c.sizes == [10]
    later = []
    for n in (5, 6, 7):  # one after the other, each with slots free
        later.append(asyncio.ensure_future(fwd.publish(messages(n))))
        await settle()
    assert c.sizes == [10] and not any(t.done() for t in later)  # waiting, not sent on free slots
    c.gate.set()
    await asyncio.gather(first, *later)
    assert c.sizes == [10, 18] and fwd.calls == 2 and fwd.forwarded == 28


async def test_half_a_call_waiting_goes_out_alongside_up_to_forward_inflight():
    """Once half of forward_batch_max waits, a further call goes out while others are under
    way, but never more than forward_inflight at once; every message is sent once."""
    c = HeldCluster()
    fwd = Forwarder(DispatcherSettings(forward_batch_max=100, forward_inflight=3), c)
    tasks = [asyncio.ensure_future(fwd.publish(messages(10)))]
    await settle()
    tasks += [asyncio.ensure_future(fwd.publish(messages(60))) for _ in range(4)]
    await settle()
    assert c.sizes == [10, 60, 60] and c.under_way == 3  # the bound: two more wait
    c.gate.set()
    await asyncio.gather(*tasks)
    # the two that waited leave on calls of their own (together they would be over 100)
    assert c.sizes == [10, 60, 60, 60, 60] and c.most_under_way == 3 and fwd.forwarded == 250
