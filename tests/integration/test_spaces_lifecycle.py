"""Creating and deleting spaces (docs/api.md, "Spaces") on the shared cluster: POST /v1/spaces
makes a space (201), the same body again is no change (200), another definition under its name
a 409 naming the field, a bad one a 422 naming the field and storing nothing; a created space is
listed and read, and its publish and subscribe routes check bodies by its schema; DELETE marks it
deleting (404 from then on) and a dispatcher purges its keys; a dispatcher that did not take the
DELETE finishes a purge cut short; the default space cannot be deleted. The SDK and the CLI do the
same."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time

import grpc
import httpx
import pytest

from bluedove.client import Client, Conflict, NotFound
from bluedove.client import cli as client_cli
from bluedove.core.spaces import DEFAULT_SPACE, parse_space_spec
from bluedove.dispatcher.space_registry import SpaceRegistry
from bluedove.store import keys as K
from bluedove.store.client import sync_client
from bluedove.store.spaces import ACTIVE, DELETING, SpaceStore
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.helpers import catalogue_size
from tests.integration.test_spaces_routes import bodies, error

pytestmark = pytest.mark.integration

ORDERS = {"name": "orders-lc", "attributes": [{"name": "status", "type": "string"},
                                              {"name": "total", "type": "number", "min": 0, "max": 10000}],
          "partition": ["status", "total"], "quotas": {"messages_per_s": 500}}


def wait_gone(api: httpx.Client, name: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while api.get(f"/v1/spaces/{name}").status_code != 404:
        assert time.monotonic() < deadline, f"space {name} still there"
        time.sleep(0.1)


@pytest.fixture
def orders(api):
    """The space ORDERS made for a test, deleted (and purged) after it."""
    r = api.post("/v1/spaces", json=ORDERS)
    assert r.status_code == 201, r.text
    yield r.json()
    api.delete(f"/v1/spaces/{ORDERS['name']}")
    wait_gone(api, ORDERS["name"])


def test_a_space_is_made_once_and_the_same_body_again_changes_nothing(api, orders):
    assert orders["name"] == "orders-lc" and orders["state"] == ACTIVE and isinstance(orders["created"], int)
    assert [a["name"] for a in orders["attributes"]] == orders["partition"] == ["status", "total"]
    assert orders["quotas"] == {"messages_per_s": 500} and orders["epoch"] == 1  # its first table
    matchers = len(api.get("/v1/cluster").json()["members"])
    assert orders["counts"] == {"subscriptions": 0, "matchers": matchers} and matchers > 1  # cut over them all
    again = api.post("/v1/spaces", json={**ORDERS, "quotas": {"messages_per_s": 500.0}})  # the same, other words
    assert again.status_code == 200 and again.json() == orders, again.text
    assert api.get("/v1/spaces/orders-lc").json() == orders
    listed = [s["name"] for s in api.get("/v1/spaces").json()["spaces"]]
    assert listed[0] == DEFAULT_SPACE and "orders-lc" in listed


def test_another_definition_under_the_name_is_a_conflict_naming_the_field(api, orders):
    error(api.post("/v1/spaces", json={**ORDERS, "quotas": {"messages_per_s": 600}}), 409, "conflict",
          "quotas.messages_per_s")
    wider = [ORDERS["attributes"][0], {**ORDERS["attributes"][1], "max": 20000}]
    error(api.post("/v1/spaces", json={**ORDERS, "attributes": wider}), 409, "conflict", "attributes[1]")
    assert api.get("/v1/spaces/orders-lc").json() == orders  # unchanged


@pytest.mark.parametrize(("body", "status", "code", "field"), [
    ({**ORDERS, "name": "Orders"}, 422, "invalid_space", "name"),
    ({**ORDERS, "attributes": [{"name": "a", "type": "colour"}]}, 422, "invalid_space", "attributes[0].type"),
    ({**ORDERS, "quotas": {"messages_per_s": -1}}, 422, "invalid_space", "quotas.messages_per_s"),
    ({**ORDERS, "colour": "blue"}, 422, "invalid_space", "colour"),
])
def test_a_bad_definition_is_refused_naming_the_field_and_stores_nothing(api, cluster, body, status, code, field):
    error(api.post("/v1/spaces", json=body), status, code, field)
    r = sync_client(cluster.store_url)
    try:
        assert not r.exists(K.space_record(str(body["name"]).lower()))
    finally:
        r.close()
    bad_json = api.post("/v1/spaces", content=b"{", headers={"content-type": "application/json"})
    assert bad_json.status_code == 400 and bad_json.json()["error"]["code"] == "invalid_json"


def test_a_created_space_checks_its_bodies_by_its_own_schema_storing_nothing(api, cluster, orders):
    """The default space's bodies, sent to a space of other attributes: 422, naming the field."""
    r = sync_client(cluster.store_url)
    try:
        before = catalogue_size(r)
        for route, body in bodies().items():
            got = api.post(f"/v1/spaces/orders-lc{route}", json=body)
            assert got.status_code == 422 and "x0" in got.json()["error"]["message"] + str(
                got.json()["error"]["field"]), got.text
        assert catalogue_size(r) == before and api.get("/v1/spaces/orders-lc").json()["counts"]["subscriptions"] == 0
    finally:
        r.close()


def test_a_deleted_space_is_404_at_once_and_its_keys_are_purged(api, cluster):
    assert api.post("/v1/spaces", json={**ORDERS, "name": "doomed"}).status_code == 201
    r = sync_client(cluster.store_url)
    try:
        shards = [K.space_catalog_hash("doomed", n) for n in range(K.CATALOG_SHARDS)]
        for n, key in enumerate(shards):  # a catalogue as the space's subscriptions will fill it
            r.hset(key, mapping={f"s{n}-{i}": "{}" for i in range(50)})
        assert api.get("/v1/spaces/doomed").json()["counts"]["subscriptions"] == 50 * len(shards)
        assert api.delete("/v1/spaces/doomed").status_code == 204
        for route, body in bodies().items():
            error(api.post(f"/v1/spaces/doomed{route}", json=body), 404, "not_found", "space")
        error(api.delete("/v1/spaces/doomed"), 404, "not_found", "space")
        wait_gone(api, "doomed")
        assert not any(r.exists(k) for k in [K.space_record("doomed"), *K.space_fixed_keys("doomed")])
        assert "doomed" not in r.smembers(K.SPACES)
        assert api.post("/v1/spaces", json={**ORDERS, "name": "doomed"}).status_code == 201  # a new space
        assert api.delete("/v1/spaces/doomed").status_code == 204
        wait_gone(api, "doomed")
    finally:
        r.close()


def test_the_default_space_cannot_be_deleted_and_an_unknown_one_is_404(api):
    error(api.delete("/v1/spaces/default"), 409, "conflict", "space")
    error(api.delete("/v1/spaces/nope"), 404, "not_found", "space")
    error(api.delete("/v1/spaces/No_Pe"), 422, "invalid_space", "space")
    assert api.get("/v1/spaces/default").json()["state"] == ACTIVE


async def test_another_dispatchers_copy_finds_a_new_space_at_once_and_finishes_a_cut_purge(store):
    spaces = SpaceStore(store.r)
    here, there = SpaceRegistry(store.r, budget=3), SpaceRegistry(store.r, budget=3)
    await there.refresh()
    await spaces.create(parse_space_spec({**ORDERS, "name": "seen"}))
    assert (await there.lookup("seen")).state == ACTIVE  # not in its copy: read once, then kept
    for n in range(3):
        await store.r.hset(K.space_catalog_hash("seen", n), mapping={f"s{i}": "{}" for i in range(10)})
    assert await spaces.delete("seen") == 1  # as the DELETE does, but the dispatcher stopped before purging
    assert (await spaces.purge_step("seen", 1)).done is False  # one step of the purge, then nothing
    await here.refresh()  # the generation moved: its copy shows the space deleting, and it purges it
    assert here.records["seen"].state == DELETING or "seen" not in here.records
    for _ in range(100):
        if await spaces.get("seen") is None:
            break
        await asyncio.sleep(0.02)
    assert await spaces.get("seen") is None and not await store.r.exists(*K.space_fixed_keys("seen"))
    await there.refresh()
    assert await there.lookup("seen") is None
    await here.stop()
    await there.stop()


def test_the_sdk_and_the_cli_create_and_delete_a_space(api, cluster, tmp_path, capsys):
    with Client(cluster.url) as client:
        made = client.create_space({**ORDERS, "name": "sdk-made"})
        assert made["name"] == "sdk-made" and client.create_space({**ORDERS, "name": "sdk-made"}) == made
        with pytest.raises(Conflict) as conflict:
            client.create_space({**ORDERS, "name": "sdk-made", "quotas": {}})
        assert conflict.value.field == "quotas.messages_per_s"
        client.delete_space("sdk-made")
        with pytest.raises(NotFound):
            client.delete_space("sdk-made")
    wait_gone(api, "sdk-made")
    spec = tmp_path / "space.json"
    spec.write_text(json.dumps({**ORDERS, "name": "cli-made"}))
    parser = argparse.ArgumentParser(prog="bluedove")
    client_cli.add_parsers(parser.add_subparsers(dest="command", required=True))
    for argv in (["spaces", "create", str(spec)], ["spaces", "delete", "cli-made"]):
        assert client_cli.run(client_cli.parse_args(parser, [*argv, "--url", cluster.url])) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert out[0]["name"] == "cli-made" and out[1] == {"deleted": "cli-made"}
    wait_gone(api, "cli-made")


def test_a_space_asking_for_fewer_matchers_gets_a_table_over_that_many_of_them(api):
    r = api.post("/v1/spaces", json={**ORDERS, "name": "two-lc", "matchers": 2})
    assert r.status_code == 201, r.text
    try:
        assert r.json()["epoch"] == 1 and r.json()["counts"]["matchers"] == 2
    finally:
        api.delete("/v1/spaces/two-lc")
        wait_gone(api, "two-lc")


def test_the_grpc_calls_create_read_list_and_delete_a_space_as_rest_does(api, cluster):
    with grpc.insecure_channel(cluster.grpc_address) as ch:
        stub = pb_grpc.PubSubStub(ch)
        body = json.dumps({**ORDERS, "name": "grpc-made"})
        made = stub.CreateSpace(pb.CreateSpaceRequest(definition_json=body), timeout=10)
        assert made.made and made.name == "grpc-made" and made.state == ACTIVE and made.epoch == 1
        assert list(made.schema.partition) == ["status", "total"] and made.schema.attributes[0].type == "string"
        assert json.loads(made.info_json) == api.get("/v1/spaces/grpc-made").json()
        again = stub.CreateSpace(pb.CreateSpaceRequest(definition_json=body), timeout=10)
        assert not again.made and again.info_json == made.info_json
        assert "grpc-made" in [s.name for s in stub.ListSpaces(pb.ListSpacesRequest(), timeout=10).spaces]
        assert stub.GetSpaceInfo(pb.SpaceRef(name="grpc-made"), timeout=10).info_json == made.info_json
        for call, request, code, slug, field in [
            (stub.CreateSpace, pb.CreateSpaceRequest(definition_json=json.dumps({**ORDERS, "name": "grpc-made",
                                                                                   "quotas": {}})),
             grpc.StatusCode.ALREADY_EXISTS, "conflict", "quotas.messages_per_s"),
            (stub.CreateSpace, pb.CreateSpaceRequest(definition_json="{"), grpc.StatusCode.INVALID_ARGUMENT,
             "invalid_json", "definition_json"),
            (stub.GetSpaceInfo, pb.SpaceRef(name="nope"), grpc.StatusCode.NOT_FOUND, "not_found", "space"),
            (stub.DeleteSpace, pb.SpaceRef(name="default"), grpc.StatusCode.ALREADY_EXISTS, "conflict", "space")]:
            with pytest.raises(grpc.RpcError) as exc:
                call(request, timeout=10)
            meta = dict(exc.value.trailing_metadata() or ())
            assert (exc.value.code(), meta.get("bluedove-error-code"), meta.get("bluedove-error-field")) == (
                code, slug, field)
        stub.DeleteSpace(pb.SpaceRef(name="grpc-made"), timeout=10)
    wait_gone(api, "grpc-made")
    with Client(f"grpc://{cluster.grpc_address}") as client:  # the SDK over gRPC
        assert client.create_space({**ORDERS, "name": "sdk-grpc"})["name"] == "sdk-grpc"
        with pytest.raises(Conflict):
            client.create_space({**ORDERS, "name": "sdk-grpc", "quotas": {}})
        client.delete_space("sdk-grpc")
    wait_gone(api, "sdk-grpc")


def test_dispatchers_make_the_spaces_a_file_declares_and_refuse_one_declared_otherwise(tmp_path):
    """`--spaces FILE` (BLUEDOVE_SPACES_FILE, `bluedove up --spaces`, the chart's `spaces`): every
    dispatcher makes each at its start unless it exists as declared; one declared otherwise than
    it exists stops the dispatcher (exit 2, naming the space and the field) and changes nothing;
    a bad file stops `up` before anything starts."""
    from bluedove.store.server import free_port
    from tests.integration.conftest import assert_no_children, start_cluster

    declared = tmp_path / "spaces.yaml"
    declared.write_text(json.dumps([ORDERS, {**ORDERS, "name": "second", "quotas": {}}]))
    c = start_cluster(tmp_path / "c", matchers=1, dispatchers=2, child_env={"BLUEDOVE_SPACES_FILE": str(declared)})
    try:
        with httpx.Client(base_url=c.url, timeout=30) as api:
            spaces = {s["name"]: s for s in api.get("/v1/spaces").json()["spaces"]}
            assert {"default", "orders-lc", "second"} <= set(spaces)
            assert spaces["orders-lc"]["quotas"] == ORDERS["quotas"]
            other = tmp_path / "other.yaml"
            other.write_text(json.dumps([{**ORDERS, "quotas": {"messages_per_s": 600}}]))
            run = subprocess.run([sys.executable, "-m", "bluedove", "dispatcher", "--id", "d9", "--http-port",
                                  str(free_port()), "--grpc-port", "0", "--gossip-port", "0", "--store", c.store_url,
                                  "--spaces", str(other)], capture_output=True, text=True, timeout=60)
            assert run.returncode == 2, run.stderr
            assert "'orders-lc' exists with another quotas.messages_per_s" in run.stderr, run.stderr
            assert api.get("/v1/spaces/orders-lc").json() == spaces["orders-lc"]
    finally:
        c.stop()
    assert_no_children(c)
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {name: Orders}")
    up = subprocess.run([sys.executable, "-m", "bluedove", "up", "--data-dir", str(tmp_path / "up"),
                         "--spaces", str(bad)], capture_output=True, text=True, timeout=60)
    assert up.returncode == 2 and "--spaces" in up.stderr and "spaces[0].name" in up.stderr, up.stderr
