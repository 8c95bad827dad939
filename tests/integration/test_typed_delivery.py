"""A typed space served end to end (docs/api.md, "Typed attributes"), on real processes.

An orders space (status, region, sku strings; amount a number; express boolean and coupon
string, both optional), cut on region, amount and sku. Random filters of every operator
(equals, in, not_in, prefix, suffix, string and number ranges, exists, any_of) over values
that share their first 6 bytes (one encoded cell), empty strings, NULs and non-ASCII; random
messages, half published singly and half in batches, the second half while a matcher is
killed (SIGKILL) and its segments are taken over. Every (queue, message) pair the oracle (the
filter language's meaning, written directly) names arrives once with its complete
subscription list, nothing else arrives, and each delivery carries its attributes as
published. Bad messages are refused with 422 naming the attribute, and nothing of them is
stored.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time

import grpc
import httpx
import pytest

from bluedove.core.space import load_space
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import compare, drain, new_queue, oracle

pytestmark = pytest.mark.integration

SPACE_YAML = """\
attributes:
  - {name: status, type: string}
  - {name: region, type: string}
  - {name: sku, type: string}
  - {name: amount, type: number, min: 0, max: 1000}
  - {name: express, type: boolean, optional: true}
  - {name: coupon, type: string, optional: true}
partition: [region, amount, sku]
"""
# Values sharing their first 6 bytes ("us-east-1"/"us-east-2", "日本-東京"/"日本-大阪": 日本 is 6
# bytes), one a prefix of another, empty strings, a NUL, non-ASCII.
POOLS = {
    "status": ["placed", "paid", "shipped", "shipped-late", "shippe", "", "réglé", "cancelled"],
    "region": ["us-east-1", "us-east-2", "us-east", "us-eas", "eu-west-1", "", "é-nord", "日本-東京", "日本-大阪",
               "ap-south-1", "ap-southeast-1"],
    "sku": ["EL-0042", "EL-0043", "EL-004", "EL-00", "HO-1", "", "€€-1", "€€-2", "sku-\x00", "sku-", "zz"],
    "coupon": ["WELCOME10", "WELCOME15", "", "FREE", "É"],
}
AMOUNTS = [0, 1, 10, 99.5, 100, 250, 500, 999.999]
STRINGS = ("status", "region", "sku", "coupon")
EXACT = {"missing": [], "unexpected": [], "duplicates": [], "wrong_subscriptions": []}


def a_string(rng: random.Random, name: str) -> str:
    if rng.random() < 0.1:
        return "".join(rng.choice("ab\x00é€日") for _ in range(rng.randrange(9)))
    return rng.choice(POOLS[name])


def an_amount(rng: random.Random) -> float:
    return rng.choice(AMOUNTS) if rng.random() < 0.5 else rng.uniform(0, 1000)


def a_cut(rng: random.Random, name: str) -> str:
    """A beginning or an end of one of the pool's values (whole characters)."""
    s = rng.choice(POOLS[name])
    n = rng.randrange(len(s) + 1)
    return s[:n] if rng.random() < 0.5 else s[len(s) - n:]


def string_condition(rng: random.Random, name: str) -> object:
    v = lambda: a_string(rng, name)  # noqa: E731
    kind = rng.randrange(9)
    if kind == 0:
        return v()
    if kind == 1:
        return {"eq": v()}
    if kind == 2:
        return {"in": [v() for _ in range(rng.randrange(1, 4))]}
    if kind == 3:
        return {"not_in": [v() for _ in range(rng.randrange(1, 3))]}
    if kind == 4:
        return {"prefix": a_cut(rng, name)} if rng.random() < 0.7 else {"prefix": a_cut(rng, name), "not_in": [v()]}
    if kind == 5:
        return {"suffix": a_cut(rng, name)}
    if kind == 6:
        return {rng.choice(["gt", "gte"]): v(), rng.choice(["lt", "lte"]): v()}
    if kind == 7:
        return {rng.choice(["gt", "gte", "lt", "lte"]): v()}
    return {"exists": rng.random() < 0.7}


def amount_condition(rng: random.Random) -> object:
    kind = rng.randrange(7)
    lo = rng.choice(AMOUNTS)
    if kind == 0:
        return [lo, lo + rng.choice([0.5, 1, 100, 600])]
    if kind == 1:
        return lo if rng.random() < 0.5 else {"eq": lo}
    if kind == 2:
        return {"in": rng.sample(AMOUNTS, rng.randrange(1, 4))}
    if kind == 3:
        return {"not_in": rng.sample(AMOUNTS, 2), "gte": rng.choice(AMOUNTS)}
    if kind == 4:
        return {rng.choice(["gt", "gte"]): lo, rng.choice(["lt", "lte"]): rng.choice(AMOUNTS)}
    if kind == 5:
        return {rng.choice(["gt", "gte", "lt", "lte"]): lo}
    return {"exists": True}


def conditions(rng: random.Random, n: int) -> dict:
    out: dict = {}
    for name in rng.sample([*STRINGS, "amount", "express"], n):
        if name == "amount":
            out[name] = amount_condition(rng)
        elif name == "express":
            out[name] = rng.choice([True, False, {"eq": True}, {"exists": True}, {"exists": False}])
        else:
            out[name] = string_condition(rng, name)
    return out


def random_filter(rng: random.Random) -> dict:
    preds = conditions(rng, rng.randrange(0, 3) if rng.random() < 0.3 else rng.randrange(1, 4))
    if rng.random() < 0.25:
        preds["any_of"] = [conditions(rng, rng.randrange(1, 3)) for _ in range(rng.randrange(1, 4))]
    return preds


def random_order(rng: random.Random) -> dict:
    attrs = {"status": a_string(rng, "status"), "region": a_string(rng, "region"), "sku": a_string(rng, "sku"),
             "amount": an_amount(rng)}
    if rng.random() < 0.5:
        attrs["express"] = rng.random() < 0.5
    if rng.random() < 0.3:
        attrs["coupon"] = a_string(rng, "coupon")
    return dict(rng.sample(list(attrs.items()), len(attrs)))  # in any order


@pytest.fixture(scope="module")
def typed(tmp_path_factory):
    """A 4-matcher cluster over the orders space."""
    tmp = tmp_path_factory.mktemp("typed")
    (tmp / "space.yaml").write_text(SPACE_YAML)
    c = start_cluster(tmp, matchers=4, space_file=str(tmp / "space.yaml"))
    yield c
    c.stop()
    assert_no_children(c)


def test_bad_messages_are_refused_naming_the_attribute_and_nothing_is_stored(typed):
    good = {"status": "paid", "region": "us-east-1", "sku": "EL-0042", "amount": 10}
    with httpx.Client(base_url=typed.url, timeout=30) as api:
        assert api.get("/v1/space").json() == load_space(typed.data_dir / "space.yaml").api_json()
        q, h = new_queue(api)
        assert api.post("/v1/subscriptions", json={"queue": q, "predicates": {}}, headers=h).status_code == 201
        cases = [({k: v for k, v in good.items() if k != "status"}, "status"),
                 ({**good, "amount": "10"}, "amount"), ({**good, "amount": 1000}, "amount"),
                 ({**good, "amount": -1}, "amount"), ({**good, "express": 1}, "express"),
                 ({**good, "coupon": None}, "coupon"), ({**good, "colour": "red"}, "colour"),
                 ({**good, "sku": "é" * 129}, "sku"), ({**good, "region": 5}, "region")]
        for attrs, field in cases:
            r = api.post("/v1/messages", json={"attributes": attrs})
            assert (r.status_code, r.json()["error"]["code"], r.json()["error"]["field"]) == \
                (422, "invalid_message", f"attributes.{field}"), (attrs, r.text)
            r = api.post("/v1/messages:batch", json={"messages": [{"attributes": good}, {"attributes": attrs}]})
            assert (r.status_code, r.json()["error"]["field"]) == (422, f"messages[1].attributes.{field}"), r.text
        for raw in (b'{"attributes": {"status": "a\\ud800", "region": "", "sku": "", "amount": 1}}',
                    b'{"attributes": {"status": "a\xff", "region": "", "sku": "", "amount": 1}}'):
            r = api.post("/v1/messages", content=raw, headers={"Content-Type": "application/json"})
            assert (r.status_code, r.json()["error"]["field"]) == (422, "attributes.status"), r.text
        with grpc.insecure_channel(typed.grpc_address) as ch:
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.PubSubStub(ch).Publish(pb.Message(attributes={"amount": 10.0}), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "attributes.status" in e.value.details()
        marker = api.post("/v1/messages", json={"attributes": good, "id": "marker"})
        assert marker.status_code == 202, marker.text
        got = api.get(f"/v1/queues/{q}/messages", params={"max": 100, "wait": 5}, headers=h).json()["messages"]
        assert [m["id"] for m in got] == ["marker"]  # none of the refused messages was stored
        assert got[0]["attributes"] == {"status": "paid", "region": "us-east-1", "sku": "EL-0042", "amount": 10.0}


async def publish(client: httpx.AsyncClient, sem: asyncio.Semaphore, batch: list[tuple[str, dict]],
                  published: dict) -> None:
    """Publish (id, attributes) pairs, one alone or several as a batch, retrying a 503 or a
    lost connection with the same ids (a retry delivers nothing twice)."""
    body: dict = {"messages": [{"attributes": a, "id": i, "payload": {"i": i}} for i, a in batch]}
    path = "/v1/messages:batch"
    if len(batch) == 1:
        body, path = body["messages"][0], "/v1/messages"
    deadline = time.monotonic() + 20
    while True:
        async with sem:
            try:
                r = await client.post(path, json=body)
                if r.status_code == 202:
                    published.update(batch)
                    return
                assert r.status_code == 503, r.text
            except httpx.TransportError:
                pass
        assert time.monotonic() < deadline, f"{batch[0][0]} refused for 20 s"
        await asyncio.sleep(0.1)


async def taken_over(client: httpx.AsyncClient, epoch: int) -> None:
    """Wait until the dispatcher's table is one past `epoch`, without m2 (declared dead)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = (await client.get("/v1/cluster")).json()
        states = {m["id"]: m["status"] for m in status["members"]}
        if status["epoch"] > epoch and states.get("m2") == "dead":
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no takeover of m2 within 20 s: {status}")


def test_typed_filters_are_delivered_exactly_through_a_takeover(typed):
    rng = random.Random(20260517)
    with httpx.Client(base_url=typed.url, timeout=30) as api:
        queues = dict(new_queue(api) for _ in range(30))
        epoch = api.get("/v1/cluster").json()["epoch"]
    orders = [(f"o-{i}", random_order(rng)) for i in range(1000)]
    victim = typed.child("m2")

    async def run() -> tuple[dict, dict, list]:
        subs: dict[str, tuple[str, dict]] = {}
        published: dict[str, dict] = {}
        limits = httpx.Limits(max_connections=32)
        async with httpx.AsyncClient(base_url=typed.url, timeout=30, limits=limits) as client:
            sem = asyncio.Semaphore(16)

            async def subscribe(q: str, preds: dict) -> None:
                async with sem:
                    r = await client.post("/v1/subscriptions", json={"queue": q, "predicates": preds},
                                          headers=queues[q])
                assert r.status_code == 201, (preds, r.text)
                subs[r.json()["id"]] = (q, preds)

            await asyncio.gather(*(subscribe(rng.choice(list(queues)), random_filter(rng)) for _ in range(330)))
            for sid in rng.sample(sorted(subs), 30):  # some removed again
                r = await client.delete(f"/v1/subscriptions/{sid}", headers=queues[subs.pop(sid)[0]])
                assert r.status_code == 204, r.text
            first, second, after = orders[:500], orders[500:900], orders[900:]
            await asyncio.gather(*(publish(client, sem, [o], published) for o in first[:250]),
                                 *(publish(client, sem, first[i:i + 50], published) for i in range(250, 500, 50)))

            async def steadily() -> None:  # at ~150/s, singly and in batches of 10
                tasks = []
                for i in range(0, len(second), 10):
                    chunk = second[i:i + 10]
                    parts = [chunk] if i % 20 else [[o] for o in chunk]
                    tasks += [asyncio.create_task(publish(client, sem, p, published)) for p in parts]
                    await asyncio.sleep(10 / 150)
                await asyncio.gather(*tasks)

            pub = asyncio.create_task(steadily())
            await asyncio.sleep(1.0)
            os.kill(victim.pid, signal.SIGKILL)
            await pub
            await taken_over(client, epoch)
            await asyncio.gather(*(publish(client, sem, after[i:i + 20], published) for i in range(0, 100, 20)))
            got = await drain(client, queues)
        return subs, published, got

    subs, published, got = asyncio.run(run())
    events = typed.check()
    assert any("m2 died (signal 9)" in e for e in events), events
    assert len(published) == 1000
    expected = oracle(typed.space, subs, published)
    assert len(expected) > 1000, "the workload should cause many deliveries"
    assert compare(expected, got) == EXACT
    for _, m in got:  # the attributes as published: strings, booleans, numbers (as doubles), absent left out
        sent = published[m["id"]]
        assert m["attributes"] == sent and m["payload"] == {"i": m["id"]}
        assert {k: type(v) for k, v in m["attributes"].items()} == \
            {k: float if k == "amount" else type(v) for k, v in sent.items()}
    kinds = json.dumps([p for _, p in subs.values()])
    assert all(op in kinds for op in ("prefix", "suffix", "not_in", '"in"', "exists", "any_of", "gte", "lt"))
