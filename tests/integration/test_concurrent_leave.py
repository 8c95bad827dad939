"""Two matchers told to leave at the same moment (a StatefulSet scaled in by two, or a rolling
update meeting a scale-in): one compare-and-set wins, the other must go on from the table that
won instead of retrying its stale plan.

Before the fix a leaver that lost the race never adopted the winning table (a leaving member's
gossip rounds make no changes) and retried the same plan against the store in a tight loop,
hundreds of times a second, until its leave timed out. What must hold: both leave, each within
a few attempts, the remaining owner holds every segment, and messages are still delivered."""

from __future__ import annotations

import asyncio
import json

import grpc
import httpx
import pytest

from bluedove.core.partition.segments import SegmentTable
from bluedove.store.client import sync_client
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import drain, new_queue

pytestmark = pytest.mark.integration


async def leave(address: str) -> pb.LeaveReply:
    async with grpc.aio.insecure_channel(address) as ch:
        return await pb_grpc.MatcherStub(ch).Leave(pb.LeaveRequest(), timeout=60)


def stored_table(url: str) -> SegmentTable:
    r = sync_client(url)
    try:
        return SegmentTable.from_json(json.loads(r.get("bd:table")))
    finally:
        r.close()


async def test_two_matchers_leaving_at_once_both_go_without_spinning(tmp_path):
    cluster = await asyncio.to_thread(start_cluster, tmp_path, matchers=3,
                                      matcher_env={"BLUEDOVE_HANDOFF_GRACE_S": "1"})
    try:
        replies = await asyncio.gather(leave(cluster.addresses["m2"]), leave(cluster.addresses["m3"]))
        assert all(r.ok for r in replies), replies
        table = stored_table(cluster.store_url)
        assert set(table.members) == {"m1"}, table.members
        for m in ("m2", "m3"):
            attempts = cluster.child(m).log_path.read_text().count("merge: epoch")
            # one plan per table it saw: the first, and at most one after losing the race
            assert attempts <= 3, f"{m} planned its merge {attempts} times"
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            q, headers = new_queue(api)
            assert api.post("/v1/subscriptions", json={"queue": q, "predicates": {}},
                            headers=headers).status_code == 201
            assert api.post("/v1/messages",
                            json={"attributes": {"x0": 1, "x1": 2, "x2": 3, "x3": 4}}).status_code == 202
        async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
            got = await drain(client, {q: headers})
        assert len(got) == 1
    finally:
        await asyncio.to_thread(cluster.stop)
    assert_no_children(cluster)
