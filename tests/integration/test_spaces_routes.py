"""The spaces routes (docs/api.md, "Spaces") on the shared cluster: the default space listed (first) and
read with GET /v1/space's schema, its routes under /v1/spaces/default/… delivering exactly as
the routes without a space, any other name a 404 (a malformed one a 422) that stores nothing;
and the default space registered by a matcher's boot on a store from before the registry."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import httpx
import pytest

from bluedove.client import Client, NotFound
from bluedove.client import cli as client_cli
from bluedove.core.partition.bootstrap import ensure_table
from bluedove.core.space import default_space, typed_space
from bluedove.core.spaces import DEFAULT_SPACE, default_spec
from bluedove.matcher.matcher import Matcher
from bluedove.runtime.settings import MatcherSettings
from bluedove.store import keys as K
from bluedove.store.apikeys import KeyStore
from bluedove.store.client import async_client, sync_client
from bluedove.store.spaces import ACTIVE, SpaceStore
from bluedove.store.store import MatcherStore
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import catalogue_size

pytestmark = pytest.mark.integration

ROUTES = ["/messages", "/messages:batch", "/subscriptions", "/subscriptions:batch"]
INSIDE = {"x0": 911.5, "x1": 912.5, "x2": 913.5, "x3": 914.5}
PREDICATES = {"x0": [911, 912], "x1": [912, 913], "x2": [913, 914], "x3": [914, 915]}


def bodies() -> dict[str, dict]:
    """A valid body for each route: refused for its space, never for itself."""
    return {"/messages": {"attributes": INSIDE}, "/messages:batch": {"messages": [{"attributes": INSIDE}]},
            "/subscriptions": {"predicates": PREDICATES},
            "/subscriptions:batch": {"subscriptions": [{"predicates": PREDICATES}]}}


def error(r: httpx.Response, status: int, code: str, field: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code and r.json()["error"]["field"] == field, r.text


def test_the_default_space_is_listed_and_read_with_the_schema_of_get_space(api):
    listed = api.get("/v1/spaces")
    assert listed.status_code == 200, listed.text
    spaces = listed.json()["spaces"]
    assert spaces[0]["name"] == DEFAULT_SPACE  # first (other tests make spaces beside it)
    one = api.get("/v1/spaces/default")
    assert one.status_code == 200, one.text
    info, schema = one.json(), api.get("/v1/space").json()
    assert {k: info[k] for k in schema} == schema == {k: spaces[0][k] for k in schema}
    assert info["epoch"] == api.get("/v1/cluster").json()["epoch"] > 0
    assert isinstance(info["counts"]["subscriptions"], int) and info["counts"]["matchers"] >= 1
    # the matchers registered it when they booted
    assert info["state"] == ACTIVE and isinstance(info["created"], int)


def _poll_all(api: httpx.Client, queue: str, token: str, want: int) -> list[dict]:
    got: list[dict] = []
    deadline = time.monotonic() + 30
    while len(got) < want and time.monotonic() < deadline:
        r = api.get(f"/v1/queues/{queue}/messages", params={"max": 100, "wait": 1},
                    headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        got += r.json()["messages"]
    return got


def test_publish_and_subscribe_through_the_default_space_deliver_exactly(api):
    r = api.post("/v1/spaces/default/subscriptions", json={"predicates": PREDICATES})
    assert r.status_code == 201, r.text
    sub = r.json()
    r = api.post("/v1/spaces/default/subscriptions:batch",
                 json={"subscriptions": [{"queue": sub["queue"], "predicates": {"x0": [0, 1]}}]},
                 headers={"Authorization": f"Bearer {sub['token']}"})
    assert r.status_code == 201, r.text
    outside = {**INSIDE, "x0": 500.0}
    one = api.post("/v1/spaces/default/messages", json={"attributes": INSIDE, "payload": "a"})
    many = api.post("/v1/spaces/default/messages:batch", json={"messages": [
        {"attributes": {**INSIDE, "x1": 912.9}, "payload": "b"}, {"attributes": outside, "payload": "c"},
        {"attributes": {**INSIDE, "x0": 0.5}, "payload": "d"}]})
    assert one.status_code == 202 and many.status_code == 202, (one.text, many.text)
    ids = many.json()["ids"]
    want = {one.json()["id"], ids[0], ids[2]}
    got = _poll_all(api, sub["queue"], sub["token"], len(want))
    assert sorted(m["id"] for m in got) == sorted(want)
    api.post(f"/v1/queues/{sub['queue']}/ack", json={"receipts": [m["receipt"] for m in got]},
             headers={"Authorization": f"Bearer {sub['token']}"})
    r = api.get(f"/v1/queues/{sub['queue']}/messages", params={"wait": 1},
                headers={"Authorization": f"Bearer {sub['token']}"})
    assert r.json()["messages"] == []  # nothing more comes


@pytest.mark.parametrize(("name", "status", "code"), [("nope", 404, "not_found"), ("Bad_Name", 422, "invalid_space"),
                                                      ("a" * 64, 422, "invalid_space")])
def test_any_other_space_is_refused_on_every_route_and_stores_nothing(api, cluster, name, status, code):
    r = sync_client(cluster.store_url)
    try:
        before = catalogue_size(r), api.get("/v1/spaces/default").json()["counts"]["subscriptions"]
        error(api.get(f"/v1/spaces/{name}"), status, code, "space")
        for route, body in bodies().items():
            error(api.post(f"/v1/spaces/{name}{route}", json=body), status, code, "space")
        after = catalogue_size(r), api.get("/v1/spaces/default").json()["counts"]["subscriptions"]
        assert after == before
    finally:
        r.close()


def test_the_space_routes_are_in_the_openapi_with_the_bodies_of_the_routes_they_alias(api):
    paths = api.get("/openapi.json").json()["paths"]
    for route in ROUTES:
        mine, theirs = paths[f"/v1/spaces/{{space}}{route}"]["post"], paths[f"/v1/{route[1:]}"]["post"]
        assert mine.get("requestBody") == theirs.get("requestBody"), route
        assert set(mine["responses"]) == set(theirs["responses"]) | {"422"}, route
    assert "get" in paths["/v1/spaces"] and "get" in paths["/v1/spaces/{space}"]


async def test_a_matcher_booting_on_a_store_from_before_the_registry_registers_the_default(store):
    space = default_space()
    await ensure_table(store, space, {"m1": "127.0.0.1:1"})  # a cluster laid out before spaces
    assert await store.r.smembers(K.SPACES) == set()
    matcher = Matcher(MatcherSettings(id="m1", advertise="127.0.0.1:1"), MatcherStore(store.url))
    try:
        await matcher._boot_table()  # no --space: the stored table's space is registered
        spaces = SpaceStore(store.r)
        rec = await spaces.get(DEFAULT_SPACE)
        assert rec is not None and rec.spec == default_spec(space) and rec.state == ACTIVE
        await matcher._boot_table()  # again: nothing changes
        assert await spaces.get(DEFAULT_SPACE) == rec and [r.spec.name for r in await spaces.list()] == [DEFAULT_SPACE]
    finally:
        await matcher.store.close()


async def test_a_stored_default_of_another_schema_is_left_as_it_is(store, caplog):
    spaces = SpaceStore(store.r)
    other = default_spec(typed_space({"attributes": [{"name": "status", "type": "string"}], "partition": ["status"]}))
    rec, _ = await spaces.create(other)
    assert await spaces.ensure_default(default_space()) == rec  # logged, never raised
    assert await spaces.get(DEFAULT_SPACE) == rec
    assert "differs from the one declared at attributes[0]" in caplog.text


async def test_the_default_spaces_log_is_registered_before_its_table_and_fixed_then(store, caplog):
    """A booter with a space file declaring `retention_s` registers `default` with that log
    before it writes the table, so a matcher waiting for the table (no space file) finds the
    log and logs from its start; the log stays as registered: a matcher without a space file
    takes it silently, one declaring another is logged and left as it is."""
    space = default_space()
    spaces = SpaceStore(store.r)
    seen = []

    async def boot():
        seen.append(await spaces.get(DEFAULT_SPACE))  # what a waiting matcher would find
        return await ensure_table(store, space, {"m1": "127.0.0.1:1"})

    (_, created), rec = await spaces.declare_default(store, space, 3600, boot)
    assert created and seen[0] == rec and rec.spec == default_spec(space, 3600)
    waiting = Matcher(MatcherSettings(id="m1", advertise="127.0.0.1:1"), MatcherStore(store.url))
    declaring = Matcher(MatcherSettings(id="m1", advertise="127.0.0.1:1"), MatcherStore(store.url), space=space,
                        space_log=60)  # its space file says retention_s 60
    try:
        await waiting._boot_table()
        assert waiting.log_retention_s == 3600 and "differs" not in caplog.text
        await declaring._boot_table()
        assert declaring.log_retention_s == 3600 and "differs from the one declared at retention_s" in caplog.text
        assert await spaces.get(DEFAULT_SPACE) == rec
    finally:
        await waiting.store.close()
        await declaring.store.close()


def test_the_sdk_and_the_cli_list_and_read_the_spaces(api, cluster, capsys):
    with Client(cluster.url) as client:
        listed = client.spaces()
        assert listed[0]["name"] == DEFAULT_SPACE
        assert client.space_info(DEFAULT_SPACE)["attributes"] == client.space()["attributes"]
        with pytest.raises(NotFound) as info:
            client.space_info("nope")
        assert info.value.field == "space"
    with Client(f"grpc://{cluster.grpc_address}") as client:  # the same answers over gRPC
        over_grpc = client.spaces()
        assert over_grpc[0] == {**listed[0], "counts": over_grpc[0]["counts"]}  # (counts may move meanwhile)
        assert client.space_info(DEFAULT_SPACE)["attributes"] == client.space()["attributes"]
        with pytest.raises(NotFound) as info:
            client.space_info("nope")
        assert info.value.field == "space"
    parser = argparse.ArgumentParser(prog="bluedove")
    client_cli.add_parsers(parser.add_subparsers(dest="command", required=True))
    assert client_cli.run(client_cli.parse_args(parser, ["spaces", "list", "--url", cluster.url])) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["name"] == DEFAULT_SPACE and lines[0]["attributes"] == listed[0]["attributes"]


def test_a_keys_scopes_apply_in_the_default_space_as_without_a_space(tmp_path):
    c = start_cluster(tmp_path, matchers=1, auth="keys")
    try:
        async def make(*scopes: str, spaces: tuple[str, ...] = ()) -> str:
            r = async_client(c.store_url)
            try:
                return (await KeyStore(r).create(scopes, "test", spaces=spaces))[0]
            finally:
                await r.aclose()
        publisher, subscriber = asyncio.run(make("publish")), asyncio.run(make("subscribe"))
        with httpx.Client(base_url=c.url, timeout=30) as api:
            for route, body in bodies().items():
                scope, other = (publisher, subscriber) if route.startswith("/messages") else (subscriber, publisher)
                plain, spaced = f"/v1{route}", f"/v1/spaces/default{route}"
                for key, status in ((None, 401), (other, 403), (scope, 202 if scope is publisher else 201)):
                    headers = {"Authorization": f"Bearer {key}"} if key else {}
                    got = [api.post(p, json=body, headers=headers).status_code for p in (plain, spaced)]
                    assert got == [status, status], (route, status, got)
                error(api.post(f"/v1/spaces/nope{route}", json=body), 404, "not_found", "space")
            spec = {"name": "keyed", "attributes": [{"name": "a", "type": "number", "min": 0, "max": 1}]}
            admin = asyncio.run(make("admin"))
            for key, status in ((None, 401), (publisher, 403), (admin, 201)):
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                assert api.post("/v1/spaces", json=spec, headers=headers).status_code == status, key
            for key, status in ((None, 401), (subscriber, 403), (admin, 204)):
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                assert api.delete("/v1/spaces/keyed", headers=headers).status_code == status, key
            # a key limited to spaces: those alone, to publish in and (admin) to make and delete
            in_default = asyncio.run(make("publish", spaces=("default",)))
            in_keyed = asyncio.run(make("admin", spaces=("keyed",)))
            for key, status in ((in_default, 202), (in_keyed, 403)):
                got = api.post("/v1/spaces/default/messages", json={"attributes": INSIDE},
                               headers={"Authorization": f"Bearer {key}"})
                assert got.status_code == status, got.text
            limited = {"Authorization": f"Bearer {in_keyed}"}
            error(api.post("/v1/spaces", json={**spec, "name": "other"}, headers=limited), 403, "forbidden", "space")
            for call in (lambda h: api.post("/v1/spaces", json=spec, headers=h),
                         lambda h: api.delete("/v1/spaces/keyed", headers=h)):
                assert call(limited).status_code in (201, 204)
    finally:
        c.stop()
    assert_no_children(c)
