"""The Python SDK on a real cluster: sync and asyncio clients over REST and gRPC, one shape."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from bluedove.client import (
    AsyncClient,
    Client,
    InvalidMessage,
    InvalidSubscription,
    NotFound,
    Unauthorized,
    Unavailable,
)
from bluedove.store.server import free_port

pytestmark = pytest.mark.integration
POINT = {"x0": 120, "x1": 7, "x2": 3, "x3": 999}


@pytest.fixture(params=["rest", "grpc"])
def url(request, cluster):
    return cluster.url if request.param == "rest" else f"grpc://{cluster.grpc_address}"


def test_sync_client(url):
    with Client(url) as client:
        assert [d["name"] for d in client.space()["dimensions"]] == ["x0", "x1", "x2", "x3"]
        q = client.create_queue()
        sub = client.subscribe(q, x0=(100, 350), x2=(0, 25))
        assert sub.queue is q and sub.predicates == {"x0": [100, 350], "x2": [0, 25]}
        assert client.get_subscription(sub.id, q).predicates == {"x0": [100, 350], "x2": [0, 25]}
        one = client.publish(POINT, {"speed": 3})
        many = client.publish_many([(POINT, i) for i in range(3)] + [{"attributes": {**POINT, "x0": 350}}])
        got = q.deliveries(wait=5)
        while len(got) < 4:
            got += q.deliveries(wait=2)
        by_id = {d.id: d for d in got}  # a batch may go to several matchers: order is not kept
        assert {i: (d.payload, d.subscriptions) for i, d in by_id.items()} == {
            one: ({"speed": 3}, [sub.id]), **{many[i]: (i, [sub.id]) for i in range(3)}}
        assert by_id[one].attributes == {"x0": 120, "x1": 7, "x2": 3, "x3": 999}
        for d in got:
            d.ack()
        assert q.deliveries(wait=0) == []
        client.publish(POINT, "pushed")
        d = next(iter(q.listen()))
        assert d.payload == "pushed"
        d.ack()
        sub.delete()
        with pytest.raises(NotFound):
            client.get_subscription(sub.id, q)
        q.delete()
        with pytest.raises(Unauthorized):
            q.deliveries()


def test_async_client(url):
    async def main():
        async with AsyncClient(url) as client:
            q = await client.create_queue()
            sub = await q.subscribe(x1=(0, 10))
            await client.publish_many([{"attributes": POINT, "payload": i, "id": f"sdk-{uuid.uuid4().hex}"}
                                       for i in range(5)])
            got = await q.deliveries(wait=5)
            while len(got) < 5:
                got += await q.deliveries(wait=2)
            assert (sorted(d.payload for d in got) == [0, 1, 2, 3, 4]
                    and {s for d in got for s in d.subscriptions} == {sub.id})
            await q.ack(got)
            await client.publish(POINT, {"via": "listen"})
            async for d in q.listen():
                assert d.payload == {"via": "listen"}
                await d.ack()
                break
            with pytest.raises(InvalidMessage) as e:
                await client.publish({**POINT, "x2": 3000})
            assert e.value.field == "attributes.x2" and e.value.status == 422
            await q.delete()

    asyncio.run(main())


def test_typed_errors_name_the_field(url):
    with Client(url) as client:
        with pytest.raises(InvalidSubscription) as e:
            client.subscribe(None, x0=(5, 1))
        assert e.value.field == "predicates.x0"
        with pytest.raises(InvalidMessage) as e:
            client.publish_many([(POINT, None), ({**POINT, "x9": 1}, None)])
        assert e.value.field == "messages[1].attributes.x9"
        with pytest.raises(Unauthorized):
            client.queue("nope", "wrong").deliveries()


def test_unreachable_service_is_unavailable_after_retries():
    for url in (f"http://127.0.0.1:{free_port()}", f"grpc://127.0.0.1:{free_port()}"):
        with Client(url, retries=2, backoff_s=0.01, timeout_s=2) as client:
            with pytest.raises(Unavailable):
                client.space()
