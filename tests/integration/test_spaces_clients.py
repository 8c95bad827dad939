"""Publishing and subscribing in a named space through every client: the SDK over REST and over
gRPC (`Client.in_space`, `AsyncClient.in_space`; gRPC calls name the space in the metadata
`bluedove-space`) and the CLI (`--space-name`, its dimension flags read from that space). Each
delivery says its space; an unknown space is a NotFound naming `space`."""

from __future__ import annotations

import argparse
import asyncio
import json

import grpc
import pytest

from bluedove.client import AsyncClient, Client, NotFound
from bluedove.client import cli as client_cli
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.test_spaces_lifecycle import wait_gone

pytestmark = pytest.mark.integration

SHOP = {"name": "shop-cl", "attributes": [{"name": "status", "type": "string"},
                                          {"name": "total", "min": 0, "max": 1000}], "partition": ["total"]}


@pytest.fixture
def shop(api):
    assert api.post("/v1/spaces", json=SHOP).status_code == 201
    yield SHOP["name"]
    api.delete(f"/v1/spaces/{SHOP['name']}")
    wait_gone(api, SHOP["name"])


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_the_sdk_publishes_and_subscribes_in_a_named_space(cluster, shop, scheme):
    url = cluster.url if scheme == "http" else f"grpc://{cluster.grpc_address}"
    with Client(url) as client:
        sp = client.in_space(shop)
        q = client.create_queue()
        one = sp.subscribe(q, status="paid", total=(0, 100))
        many = sp.subscribe_many([{"status": "sent"}, {"total": (500, 1000)}], q)
        default = client.subscribe(q, x0=(0, 1000))  # the same queue, in the default space
        assert sp.info()["counts"]["subscriptions"] >= 3
        sp.publish({"status": "paid", "total": 50}, id=f"{scheme}-a")
        sp.publish_many([{"attributes": {"status": "sent", "total": 700}, "id": f"{scheme}-b"},
                         {"attributes": {"status": "new", "total": 10}, "id": f"{scheme}-c"}])
        got = {}
        for _ in range(20):
            for d in client.poll(q, max=100, wait=1):
                got[d.id] = (d.space, sorted(d.subscriptions))
            if len(got) >= 2:
                break
        assert got == {f"{scheme}-a": (shop, [one.id]), f"{scheme}-b": (shop, sorted(s.id for s in many))}
        assert default.id not in {i for _, ids in got.values() for i in ids}
        with pytest.raises(NotFound) as info:
            client.in_space("no-such-space").publish({"status": "x", "total": 1})
        assert info.value.field == "space"


def test_the_async_sdk_and_grpc_metadata_name_the_space(cluster, shop):
    async def run() -> list:
        async with AsyncClient(f"grpc://{cluster.grpc_address}") as client:
            q = await client.create_queue()
            sub = await client.in_space(shop).subscribe(q, status="back")
            await client.in_space(shop).publish({"status": "back", "total": 1}, id="async-a")
            return [(d.id, d.space, d.subscriptions) for d in await client.poll(q, max=10, wait=5)] + [sub.id]

    *got, sid = asyncio.run(run())
    assert got == [("async-a", shop, [sid])]
    with grpc.insecure_channel(cluster.grpc_address) as ch:
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.PubSubStub(ch).Publish(pb.Message(values={"status": pb.Value(text="x")}),
                                           metadata=(("bluedove-space", "no-such-space"),), timeout=10)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_the_cli_publishes_and_subscribes_in_a_named_space(cluster, shop, capsys):
    parser = argparse.ArgumentParser(prog="bluedove")
    client_cli.add_parsers(parser.add_subparsers(dest="command", required=True))

    def run(*argv: str) -> list[dict]:
        assert client_cli.run(client_cli.parse_args(parser, [*argv, "--url", cluster.url])) == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    [made] = run("subscribe", "--space-name", shop, "--where", "status=sent", "--total", "0:100")
    assert client_cli.run(client_cli.parse_args(parser, ["publish", "--space-name", shop, "--attr", "status=sent",
                                                         "--total", "42", "--id", "cli-a", "--url", cluster.url])) == 0
    assert capsys.readouterr().out.split() == ["cli-a"]
    [delivery] = run("poll", made["queue"], "--token", made["token"], "--wait", "5")
    assert delivery["id"] == "cli-a" and delivery["space"] == shop and delivery["subscriptions"] == [made["id"]]
