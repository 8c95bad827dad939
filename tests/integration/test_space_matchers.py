"""Matchers serve a named space on its own (bluedove/matcher/spaces_served.py): `POST /v1/spaces`
lays out its table over the cluster's matchers; each matcher loads the space's sets from the
space's own catalogue and follows its log; a Match or Forward names its space, and finds only
that space's subscriptions, exactly (a brute-force oracle on random filters and points), and a
Forward's deliveries reach the queues. Thirty more spaces hold no more store connections (their
catalogue logs are read together, without blocking). A deleted space stops being served. The dispatchers'
publish and subscribe routes for named spaces come next; here the catalogue is written as a
dispatcher writes it."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time

import grpc
import httpx
import pytest

from bluedove.core.model import build_subscription
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.spaces import parse_space_spec
from bluedove.store.space_entry import SpaceAt
from bluedove.store.spaces import SpaceStore
from bluedove.store.store import Store
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc
from tests.conftest import STORE_KIND_ENV
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import new_queue, oracle

pytestmark = pytest.mark.integration

ORDERS = {"name": "orders", "attributes": [{"name": "amount", "min": 0, "max": 100}, {"name": "qty", "min": 0,
                                                                                       "max": 10}]}


def random_predicates(rng: random.Random) -> dict:
    preds = {}
    if rng.random() < 0.8:
        lo = rng.uniform(0, 90)
        preds["amount"] = {"gte": lo, "lt": lo + rng.uniform(1, 40)}
    if rng.random() < 0.5:
        preds["qty"] = {"lt": rng.uniform(1, 10)}
    return preds


def by_message(expected: dict[tuple[str, int], set[str]]) -> dict[str, set[str]]:
    """The oracle's {(queue, message): ids} as {message: ids}, what Match answers."""
    out: dict[str, set[str]] = {}
    for (_, m), ids in expected.items():
        out.setdefault(str(m), set()).update(ids)
    return out


async def match_all(table: SegmentTable, points: list[list[float]], space: str) -> dict[tuple[str, int], set[str]]:
    """{(message index, dimension): subscription ids} as each candidate of each point answers
    Match (only the non-empty answers)."""
    out: dict[tuple[str, int], set[str]] = {}
    channels = {m: grpc.aio.insecure_channel(a) for m, a in table.members.items()}
    try:
        for i, point in enumerate(points):
            for dim, owner in table.candidates(point):
                req = pb.ForwardRequest(dimension=dim, space=space,
                                        messages=[pb.ForwardMessage(id=f"p{i}", point=point)])
                reply = await pb_grpc.MatcherStub(channels[owner]).Match(req, timeout=5)
                if reply.messages[0].subscription_ids:
                    out[(str(i), dim)] = set(reply.messages[0].subscription_ids)
    finally:
        for ch in channels.values():
            await ch.close()
    return out


async def until_equal(table: SegmentTable, points: list[list[float]], expected: dict[str, set[str]],
                      within_s: float = 20) -> None:
    """Until every candidate of every point answers `expected` ({message index: ids})."""
    want = {(m, dim): ids for m, ids in expected.items() for dim, _ in table.candidates(points[int(m)])}
    deadline = time.monotonic() + within_s
    while True:
        try:
            got = await match_all(table, points, "orders")
            if got == want or time.monotonic() > deadline:
                assert got == want
                return
        except grpc.aio.AioRpcError as exc:  # not served yet: UNAVAILABLE
            assert exc.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() < deadline, exc
        await asyncio.sleep(0.3)


async def serve_and_match(store_url: str, queues: list[str]) -> None:
    rng = random.Random(7)
    space = parse_space_spec(ORDERS).space
    store = Store(store_url)
    try:
        rec = await SpaceStore(store.r).get("orders")
        table = SegmentTable.from_json(await store.get_table("orders"))
        subs = {f"s{i}": (rng.choice(queues), random_predicates(rng)) for i in range(300)}
        out = await store.add_subscriptions_each([build_subscription(sid, q, p, space).to_json()
                                                  for sid, (q, p) in subs.items()], SpaceAt("orders", rec.created))
        assert all(isinstance(x, str) for x in out), out
        # the same queues in the default space: never matched by a message of "orders"
        await store.add_subscriptions_each([{"id": f"d{i}", "queue": q, "predicates": {}}
                                            for i, q in enumerate(queues)])
        points = [[rng.uniform(0, 100), float(rng.randrange(10))] for _ in range(200)]
        await until_equal(table, points, by_message(oracle(space, subs, dict(enumerate(points)))))

        # the catalogue's log is followed: removals and more adds reach the sets
        gone = [sid for sid in subs if rng.random() < 0.3]
        await store.remove_subscriptions([(sid, subs[sid][0]) for sid in gone], SpaceAt("orders", rec.created))
        for sid in gone:
            del subs[sid]
        await until_equal(table, points, by_message(oracle(space, subs, dict(enumerate(points)))))
    finally:
        await store.close()


async def forward_one(table: SegmentTable, point: list[float]) -> pb.ForwardReply:
    dim, owner = table.candidates(point)[0]
    body = json.dumps({"id": "f1", "attributes": {"amount": point[0], "qty": point[1]}, "payload": None,
                       "published_at": "2026-11-26T00:00:00Z"}).encode()
    async with grpc.aio.insecure_channel(table.members[owner]) as ch:
        return await pb_grpc.MatcherStub(ch).Forward(pb.ForwardRequest(
            dimension=dim, space="orders", epoch=table.epoch,
            messages=[pb.ForwardMessage(id="f1", point=point, body=body)]), timeout=10)


def test_matchers_serve_a_named_space_from_its_own_catalogue(tmp_path):
    cluster = start_cluster(tmp_path, matchers=2)
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            r = api.post("/v1/spaces", json=ORDERS)
            assert r.status_code == 201, r.text
            assert r.json()["epoch"] == 1 and r.json()["counts"]["matchers"] == 2
            assert api.post("/v1/spaces", json=ORDERS).json()["epoch"] == 1  # a retry: the same table
            assert asyncio.run(_record("orders", cluster.store_url)).spans == 2  # the size it keeps
            queues = [new_queue(api) for _ in range(5)]
            asyncio.run(serve_and_match(cluster.store_url, [q for q, _ in queues]))

            table = SegmentTable.from_json(asyncio.run(_table(cluster.store_url)))
            reply = asyncio.run(forward_one(table, [50.0, 5.0]))
            assert reply.matched >= 1 and reply.delivered >= 1
            delivered = 0
            for q, auth in queues:
                got = api.get(f"/v1/queues/{q}/messages", params={"max": 100}, headers=auth).json()["messages"]
                delivered += len(got)
                assert all(m["id"] == "f1" and not set(m["subscriptions"]) & {f"d{i}" for i in range(5)}
                           for m in got)
            assert delivered == reply.delivered

            # Many more spaces hold no more connections: their catalogue tails are one polled read.
            if os.environ.get(STORE_KIND_ENV) != "cluster":  # one server: one client list
                blocked = asyncio.run(_blocked_clients(cluster.store_url))
                for i in range(30):
                    assert api.post("/v1/spaces", json={**ORDERS, "name": f"more-{i}"}).status_code == 201
                time.sleep(2.5)  # every matcher serves them (its registry refresh is 1 s)
                assert asyncio.run(_blocked_clients(cluster.store_url)) == blocked

            assert api.delete("/v1/spaces/orders").status_code == 204
            deadline = time.monotonic() + 15
            while True:  # each matcher drops it within its registry refresh
                try:
                    asyncio.run(forward_one(table, [50.0, 5.0]))
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.UNAVAILABLE
                    break
                assert time.monotonic() < deadline, "the deleted space is still served"
                time.sleep(0.3)
    finally:
        cluster.stop()
    assert_no_children(cluster)


async def _blocked_clients(url: str) -> int:
    """The store's clients waiting in a blocking command (XREAD BLOCK)."""
    store = Store(url)
    try:
        return sum("b" in c["flags"] for c in await store.r.client_list())
    finally:
        await store.close()


async def _record(name: str, url: str):
    store = Store(url)
    try:
        return await SpaceStore(store.r).get(name)
    finally:
        await store.close()


async def _table(url: str) -> dict:
    store = Store(url)
    try:
        return await store.get_table("orders")
    finally:
        await store.close()
