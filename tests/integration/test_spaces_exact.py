"""Three spaces on one cluster, each with its own schema (the default's four numbers, a typed
space of a string and a number, a space of two numbers), published to and subscribed in
through `/v1/spaces/{space}/…`: every message reaches exactly the subscriptions of its own
space that match it (a brute-force oracle per space), each delivery names its space, and no
delivery crosses spaces, though the queues hold subscriptions of every space. A subscription
in a named space is read, changed and removed through `/v1/subscriptions/{id}` like any other;
a deleted space is a 404 at once."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

from bluedove.core.spaces import parse_space_spec
from tests.integration.cluster_checks import DIMS, SPACE, random_predicates
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import drain, new_queue, oracle

pytestmark = pytest.mark.integration

ORDERS = {"name": "orders", "attributes": [{"name": "status", "type": "string"},
                                           {"name": "total", "min": 0, "max": 1000}], "partition": ["status", "total"]}
FLEET = {"name": "fleet", "attributes": [{"name": "lat", "min": -90, "max": 90}, {"name": "lon", "min": -180,
                                                                                    "max": 180}]}
STATUSES = ["new", "paid", "sent", "back"]


def orders_filter(rng: random.Random) -> dict:
    preds: dict = {}
    if rng.random() < 0.6:
        preds["status"] = rng.choice(STATUSES) if rng.random() < 0.5 else {"in": rng.sample(STATUSES, 2)}
    if rng.random() < 0.6:
        lo = rng.uniform(0, 900)
        preds["total"] = {"gte": lo, "lt": lo + rng.uniform(10, 400)}
    return preds


def fleet_filter(rng: random.Random) -> dict:
    lat, lon = rng.uniform(-90, 60), rng.uniform(-180, 120)
    return {"lat": {"gte": lat, "lt": lat + rng.uniform(5, 60)}, "lon": {"gte": lon, "lt": lon + rng.uniform(5, 90)}}


def subscribe_all(api: httpx.Client, rng: random.Random, queues: dict) -> dict[str, dict[str, tuple[str, dict]]]:
    """{space: {subscription id: (queue, predicates)}}: singles and batches in every space."""
    makers = {"default": lambda: random_predicates(rng), "orders": lambda: orders_filter(rng),
              "fleet": lambda: fleet_filter(rng)}
    subs: dict[str, dict[str, tuple[str, dict]]] = {s: {} for s in makers}
    for space, make in makers.items():
        base = "/v1" if space == "default" else f"/v1/spaces/{space}"
        for q, auth in queues.items():
            for _ in range(8):
                preds = make()
                r = api.post(f"{base}/subscriptions", json={"queue": q, "predicates": preds}, headers=auth)
                assert r.status_code == 201, r.text
                subs[space][r.json()["id"]] = (q, preds)
            items = [{"queue": q, "predicates": make()} for _ in range(10)]
            r = api.post(f"{base}/subscriptions:batch", json={"subscriptions": items}, headers=auth)
            assert r.status_code == 201, r.text
            for item, made in zip(items, r.json()["subscriptions"]):
                subs[space][made["id"]] = (q, item["predicates"])
    return subs


def messages_of(rng: random.Random, n: int) -> dict[str, dict[str, dict]]:
    """{space: {message id: attributes}}, ids unique across spaces."""
    return {
        "default": {f"d{i}": {d: rng.uniform(0, 1000) for d in DIMS} for i in range(n)},
        "orders": {f"o{i}": {"status": rng.choice(STATUSES), "total": rng.uniform(0, 1000)} for i in range(n)},
        "fleet": {f"f{i}": {"lat": rng.uniform(-90, 90), "lon": rng.uniform(-180, 180)} for i in range(n)},
    }


def publish_all(api: httpx.Client, messages: dict[str, dict[str, dict]]) -> None:
    for space, msgs in messages.items():
        base = "/v1" if space == "default" else f"/v1/spaces/{space}"
        items = [{"id": mid, "attributes": attrs} for mid, attrs in msgs.items()]
        for m in items[:5]:
            r = api.post(f"{base}/messages", json=m)
            assert r.status_code == 202, r.text
        for at in range(5, len(items), 50):
            r = api.post(f"{base}/messages:batch", json={"messages": items[at:at + 50]})
            assert r.status_code == 202, r.text


def expected(subs: dict, messages: dict) -> dict[tuple[str, str, str], set[str]]:
    """{(space, queue, message id): subscription ids} by each space's oracle."""
    spaces = {"default": SPACE, "orders": parse_space_spec(ORDERS).space, "fleet": parse_space_spec(FLEET).space}
    out = {}
    for name, space in spaces.items():
        msgs = messages[name]
        given = msgs if space.typed else {m: tuple(a[d] for d in space.names) for m, a in msgs.items()}
        for (q, mid), ids in oracle(space, subs[name], given).items():
            out[(name, q, mid)] = ids
    return out


def delivered(got: list[tuple[str, dict]]) -> dict[tuple[str, str, str], set[str]]:
    out: dict[tuple[str, str, str], set[str]] = {}
    for q, m in got:
        key = (m.get("space", "default"), q, m["id"])
        assert key not in out, f"{key} delivered twice"
        out[key] = set(m["subscriptions"])
    return out


def make_spaces(url: str, rng: random.Random, specs: tuple[dict, ...], n_queues: int) -> tuple[dict, dict]:
    """The named spaces of `specs` made on the cluster at `url`, `n_queues` queues, and
    `subscribe_all`'s subscriptions in every space: (queues {id: auth header}, subscriptions)."""
    with httpx.Client(base_url=url, timeout=30) as api:
        for spec in specs:
            assert api.post("/v1/spaces", json=spec).status_code == 201
        queues = dict(new_queue(api) for _ in range(n_queues))
        return queues, subscribe_all(api, rng, queues)


def test_three_spaces_on_one_cluster_deliver_exactly_and_apart(tmp_path):
    rng = random.Random(5)
    cluster = start_cluster(tmp_path, matchers=3)
    try:
        queues, subs = make_spaces(cluster.url, rng, (ORDERS, FLEET), 4)
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            messages = messages_of(rng, 200)
            publish_all(api, messages)
            got = asyncio.run(_drain(cluster.url, queues))
            want = expected(subs, messages)
            assert sum(len(v) for v in want.values()) > 500  # every space matches something
            assert {s for s, _, _ in want} == {"default", "orders", "fleet"}
            assert delivered(got) == want

            # a named space's subscription through /v1/subscriptions/{id}
            sid, (q, _) = next(iter(subs["orders"].items()))
            auth = queues[q]
            shown = api.get(f"/v1/subscriptions/{sid}", headers=auth).json()
            assert shown["space"] == "orders" and shown["queue"] == q
            r = api.put(f"/v1/subscriptions/{sid}", json={"predicates": {"status": "nowhere"}}, headers=auth)
            assert r.status_code == 200 and r.json()["space"] == "orders", r.text
            bad = api.put(f"/v1/subscriptions/{sid}", json={"predicates": {"x0": [1, 2]}}, headers=auth)
            assert bad.status_code == 422 and bad.json()["error"]["field"].startswith("predicates"), bad.text
            assert api.delete(f"/v1/subscriptions/{sid}", headers=auth).status_code == 204
            assert api.get(f"/v1/subscriptions/{sid}", headers=auth).status_code == 404

            assert api.delete("/v1/spaces/fleet").status_code == 204
            r = api.post("/v1/spaces/fleet/messages", json={"attributes": {"lat": 0, "lon": 0}})
            assert r.status_code == 404 and r.json()["error"]["field"] == "space", r.text
            r = api.post("/v1/spaces/orders/messages", json={"attributes": {"lat": 0, "lon": 0}})
            assert r.status_code == 422, r.text  # another space's attributes: named in the error
    finally:
        cluster.stop()
    assert_no_children(cluster)


async def _drain(url: str, queues: dict) -> list[tuple[str, dict]]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return await drain(client, queues)
