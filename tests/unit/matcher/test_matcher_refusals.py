"""The matcher's decisions on a call, without gRPC: `Matcher` operations raise the project's
errors, and the servicer alone maps each to a status code (bluedove/matcher/errors.py).

No process and no store round trip: the matcher is built as `serve` builds it but never
started; its sets are the empty ones it begins with, over a table where it owns [0, 500) of
every dimension of the default space."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest

from bluedove.core.partition.segments import equal_partition
from bluedove.core.space import default_space
from bluedove.core.wire import encode_part
from bluedove.matcher.errors import BadRequest, Busy, MatcherError, NotOwner, NotReady
from bluedove.matcher.index_thread import IndexThread
from bluedove.matcher.load import WindowStats
from bluedove.matcher.matcher import Matcher
from bluedove.matcher.queues import MatcherQueue
from bluedove.matcher.servicer import MatcherServicer
from bluedove.runtime.settings import MatcherSettings
from bluedove.store.store import MatcherStore
from bluedove.v1 import matcher_pb2 as pb

SPACE = default_space()


def matcher(max_queued: int = 1000) -> Matcher:
    """A matcher owning the first half of every dimension, with empty sets, as after `begin`."""
    settings = MatcherSettings(id="m1", max_queued=max_queued)
    m = Matcher(settings, MatcherStore("redis://127.0.0.1:9/0"))  # never connects: nothing is stored
    m.table = equal_partition(SPACE, {"m1": "", "m2": ""})
    m.owner.begin(m.table)
    m.stats = [WindowStats(settings.stats_window_s) for _ in range(SPACE.k)]
    m.queue = MatcherQueue(SPACE.k, lambda i: m.sets.sets[i], m.store, IndexThread(), m.stats)
    m.ready = True
    return m


def forward(dim: int, *points: tuple[float, ...]) -> pb.ForwardRequest:
    pts = np.array(points, dtype=np.float64)
    ids = [f"msg-{i}".encode() for i in range(len(pts))]
    return pb.ForwardRequest(packed=[encode_part(dim, pts, ids, [b"{}"] * len(pts), np.zeros(len(pts)))])


def refusal(m: Matcher, req: pb.ForwardRequest) -> MatcherError:
    with pytest.raises(MatcherError) as info:
        asyncio.run(m.forward(req))
    return info.value


def test_a_matcher_still_loading_is_not_ready():
    m = matcher()
    m.ready = False
    err = refusal(m, forward(0, (1, 2, 3, 4)))
    assert isinstance(err, NotReady) and err.code == grpc.StatusCode.UNAVAILABLE


def test_a_value_outside_its_segment_is_refused_as_a_stale_table():
    err = refusal(matcher(), forward(1, (1, 700, 3, 4)))  # dimension 1's value in m2's half
    assert isinstance(err, NotOwner) and err.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "dimension 1" in str(err)


def test_a_dimension_the_space_does_not_have_is_a_bad_request():
    err = refusal(matcher(), forward(7, (1, 2, 3, 4)))
    assert isinstance(err, BadRequest) and err.code == grpc.StatusCode.INVALID_ARGUMENT


def test_a_part_that_does_not_decode_is_a_bad_request():
    req = forward(0, (1, 2, 3, 4))
    req.packed[0].points = b"\x00" * 5  # not a whole row of float64
    assert isinstance(refusal(matcher(), req), BadRequest)


def test_a_full_input_queue_refuses_the_call_whole_before_queueing():
    m = matcher(max_queued=0)
    err = refusal(m, forward(0, (1, 2, 3, 4), (2, 3, 4, 5)))
    assert isinstance(err, Busy) and err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert m.refused == 1 and m.queue.queued(0) == 0


def test_an_empty_call_is_answered_empty():
    assert asyncio.run(matcher().forward(pb.ForwardRequest())) == pb.ForwardReply()


def test_table_and_subscription_calls_wait_for_the_sets():
    m = matcher()
    m.owner.sets = None
    for call in (m.add_subscriptions(pb.SubscriptionBatch()), m.remove_subscriptions(pb.RemoveRequest())):
        with pytest.raises(NotReady):
            asyncio.run(call)
    m.table = None
    with pytest.raises(NotReady):
        asyncio.run(m.table_reply())


def test_a_proposed_table_that_does_not_parse_is_a_bad_request():
    with pytest.raises(BadRequest, match="table_json"):
        asyncio.run(matcher().propose_json("{not json", ""))


class Aborted(Exception):
    pass


class Context:
    """What the servicer uses of a grpc.aio context: abort, which raises."""

    def __init__(self) -> None:
        self.status = None

    async def abort(self, code, details):
        self.status = (code, details)
        raise Aborted


def test_the_servicer_answers_each_refusal_with_its_status_code():
    servicer, ctx = MatcherServicer(matcher()), Context()
    with pytest.raises(Aborted):
        asyncio.run(servicer.Forward(forward(1, (1, 700, 3, 4)), ctx))
    assert ctx.status[0] == grpc.StatusCode.FAILED_PRECONDITION
    assert "not the owner" in ctx.status[1]
