"""A matcher's Forward with several dimensions' parts in one call (a dispatcher's lane per
matcher), on real processes: each part is matched on its own dimension's set and everything
is stored; a call with one part the matcher does not own, or a part of no dimension, is
refused whole and writes nothing."""

from __future__ import annotations

import asyncio
import json

import grpc
import httpx
import pytest

from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc
from tests.integration.helpers import new_queue

pytestmark = pytest.mark.integration


def message(mid: str, point: list[float]) -> pb.ForwardMessage:
    body = json.dumps({"id": mid, "attributes": {f"x{i}": v for i, v in enumerate(point)}, "payload": None,
                       "published_at": "2026-11-22T00:00:00Z"}).encode()
    return pb.ForwardMessage(id=mid, point=point, body=body)


def inside(seg: tuple[float, float]) -> float:
    return (seg[0] + seg[1]) / 2


def test_parts_are_matched_on_their_own_dimension_and_a_bad_part_refuses_the_whole_call(cluster):
    member = sorted(cluster.table.members)[0]
    segs = cluster.table.segments_of(member)
    d0, d1 = sorted(segs)[:2]
    others = [m for m in cluster.table.members if m != member]
    # a value of dimension d1 that another matcher's segment holds
    foreign = next(inside(cluster.table.segments_of(o)[d1]) for o in others if d1 in cluster.table.segments_of(o))
    with httpx.Client(base_url=cluster.url, timeout=30) as api:
        q, headers = new_queue(api)
        r = api.post("/v1/subscriptions", json={"queue": q, "predicates": {}}, headers=headers)  # everything
        assert r.status_code == 201, r.text

        def point(dim: int, value: float) -> list[float]:
            p = [1.0] * cluster.table.space.k
            p[dim] = value
            return p

        async def forward(req: pb.ForwardRequest):
            async with grpc.aio.insecure_channel(cluster.table.members[member]) as ch:
                return await pb_grpc.MatcherStub(ch).Forward(req, timeout=10)

        ok = asyncio.run(forward(pb.ForwardRequest(
            dimension=d0, messages=[message("fp-a", point(d0, inside(segs[d0])))], epoch=cluster.table.epoch,
            parts=[pb.ForwardPart(dimension=d1, messages=[message("fp-b", point(d1, inside(segs[d1]))),
                                                          message("fp-c", point(d1, inside(segs[d1])))])])))
        # The shared cluster holds other tests' subscriptions too: at least ours matched.
        assert ok.fresh == 3 and ok.matched >= 3 and ok.delivered >= 3

        refused = [
            (grpc.StatusCode.FAILED_PRECONDITION, pb.ForwardRequest(  # the second part is not this matcher's
                dimension=d0, messages=[message("fp-x", point(d0, inside(segs[d0])))],
                parts=[pb.ForwardPart(dimension=d1, messages=[message("fp-y", point(d1, foreign))])])),
            (grpc.StatusCode.INVALID_ARGUMENT, pb.ForwardRequest(  # a part of no dimension
                dimension=d0, messages=[message("fp-z", point(d0, inside(segs[d0])))],
                parts=[pb.ForwardPart(dimension=cluster.table.space.k, messages=[message("fp-w", point(d0, 1.0))])])),
        ]
        for code, req in refused:
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                asyncio.run(forward(req))
            assert exc.value.code() == code, exc.value.details()

        r = api.get(f"/v1/queues/{q}/messages", params={"max": 100, "wait": 0}, headers=headers)
        assert sorted(m["id"] for m in r.json()["messages"]) == ["fp-a", "fp-b", "fp-c"]  # nothing of the refused
