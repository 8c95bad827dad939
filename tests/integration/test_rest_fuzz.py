"""Hostile input on the REST API, on a real cluster: hypothesis picks a route of the live OpenAPI
description (`GET /openapi.json`), fills its path with ids good and bad (percent-encoded bytes
that are not UTF-8, NULs), and sends headers and a JSON body built as raw bytes from the shapes
each route reads, with hostile leaves: lone surrogate escapes, raw bytes that are not UTF-8,
NULs, NaN and Infinity, numbers past a double (1e400) and past 64 bits (5,000 digits). Every
answer must be below 500 and, when an error, docs/api.md's error body in UTF-8; a rejected request
changes nothing (no delivery in a queue subscribed to the whole space, the catalogue keeps its
size); what is accepted is delivered as strict JSON (the poll's body is UTF-8, holds no NaN, no
integer past 64 bits). (The bodies are not in the OpenAPI description: the routes read their
request's bytes themselves, so a schema-driven fuzzer would send none.)

BLUEDOVE_FUZZ_EXAMPLES sets the examples (default 150: a few seconds).
"""

from __future__ import annotations

import json
import os
from urllib.parse import quote_from_bytes

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bluedove.store.client import sync_client
from tests.integration.helpers import catalogue_size, new_queue

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("BLUEDOVE_FUZZ_EXAMPLES", "150"))
DIMS = ["x0", "x1", "x2", "x3"]


class World:
    """The cluster under fuzz, its routes, and what must not change: a queue subscribed to the
    whole space, its token, and the catalogue's size."""

    def __init__(self, cluster) -> None:
        self.api = httpx.Client(base_url=cluster.url, timeout=30)
        self.queue, self.auth = new_queue(self.api)
        self.token = self.auth["Authorization"][7:]
        r = self.api.post("/v1/subscriptions", json={"queue": self.queue, "predicates": {}}, headers=self.auth)
        self.sub = r.json()["id"]
        paths = self.api.get("/openapi.json").json()["paths"]
        self.routes = sorted((method.upper(), path) for path, ops in paths.items() for method in ops)
        self.redis = sync_client(cluster.store_url)
        self.baseline = catalogue_size(self.redis)

    def drain(self) -> int:
        """Take and ack the sentinel's deliveries; the poll answers 200 with strict JSON."""
        r = self.api.get(f"/v1/queues/{self.queue}/messages", params={"max": 1000}, headers=self.auth)
        assert r.status_code == 200, r.text
        msgs = strict_loads(r.content)["messages"]
        if msgs:
            self.api.post(f"/v1/queues/{self.queue}/ack", json={"receipts": [m["receipt"] for m in msgs]},
                          headers=self.auth)
        return len(msgs)


def strict_loads(raw: bytes):
    """JSON as a strict parser reads it: UTF-8, no NaN or Infinity, integers within 64 bits, no
    lone surrogate."""
    def no_constant(name):
        raise AssertionError(f"{name} in an answer")

    def int64(text):
        assert -(2**63) <= int(text) < 2**64, text
        return int(text)

    doc = json.loads(raw.decode("utf-8"), parse_constant=no_constant, parse_int=int64)
    json.dumps(doc, ensure_ascii=False).encode("utf-8")
    return doc


@pytest.fixture(scope="module")
def world(cluster):
    w = World(cluster)
    yield w
    w.api.close()
    w.redis.close()


# -- strategies: JSON text as bytes, hostile at the leaves -----------------------------------------
def lit(s: str) -> bytes:
    return json.dumps(s).encode()


HOSTILE_STRINGS = st.sampled_from([b'"\\ud800"', b'"a\\udc80b"', b'"\\udfff\\ud800"', b'"\xff"', b'"\xed\xa0\x80"',
                                   b'"\xc3"', b'"a\\u0000b"', b'"x0\\u0000garbage"', b'"\x00"', lit("x" * 5000)])
STRINGS = st.one_of(HOSTILE_STRINGS, st.text(max_size=8).map(lit), st.sampled_from(DIMS).map(lit))
NUMBERS = st.sampled_from([b"1", b"-1", b"0.5", b"999.9", b"1e400", b"-1e400", b"NaN", b"Infinity", b"-Infinity",
                           b"1" * 5000, b"18446744073709551616", b"-9223372036854775809", b"1e-400", b"2.5E+308",
                           b"12345678901234567890"])
LEAVES = st.one_of(STRINGS, NUMBERS, st.sampled_from([b"null", b"true", b"[]", b"{}"]))


def arr(items: st.SearchStrategy[bytes], max_size: int = 3) -> st.SearchStrategy[bytes]:
    return st.lists(items, max_size=max_size).map(lambda xs: b"[" + b",".join(xs) + b"]")


def obj(fields: dict) -> st.SearchStrategy[bytes]:
    """A JSON object with some of `fields` (name -> strategy of its value), and maybe a hostile key."""
    items = st.lists(st.sampled_from(sorted(fields)), unique=True).flatmap(
        lambda names: st.tuples(*(st.tuples(st.just(lit(n)), fields[n]) for n in names)))
    extra = st.lists(st.tuples(STRINGS, LEAVES), max_size=1)
    return st.tuples(items, extra).map(lambda t: b"{" + b", ".join(k + b": " + v for k, v in [*t[0], *t[1]]) + b"}")


def values(leaf=LEAVES) -> st.SearchStrategy[bytes]:
    return st.recursive(leaf, lambda c: st.one_of(arr(c), st.lists(st.tuples(STRINGS, c), max_size=3).map(
        lambda kv: b"{" + b",".join(k + b":" + v for k, v in kv) + b"}")), max_leaves=6)


def bodies(world: World) -> dict[str, st.SearchStrategy[bytes]]:
    q = st.one_of(st.just(lit(world.queue)), STRINGS)
    attrs = obj({d: st.one_of(NUMBERS, LEAVES) for d in DIMS})
    message = obj({"attributes": attrs, "payload": values(), "id": STRINGS})
    preds = obj({d: st.one_of(arr(NUMBERS), LEAVES) for d in DIMS})
    sub = obj({"queue": q, "predicates": st.one_of(preds, LEAVES)})
    return {
        "/v1/messages": message,
        "/v1/messages:batch": obj({"messages": arr(message)}),
        "/v1/subscriptions": sub,
        "/v1/subscriptions:batch": obj({"subscriptions": arr(sub)}),
        "/v1/queues": obj({"max_undelivered": NUMBERS, "retention_s": NUMBERS,
                           "dead_letter": obj({"queue": q, "max_deliveries": NUMBERS})}),
        "/v1/queues/{queue}/ack": obj({"receipts": arr(STRINGS)}),
    }


def path_ids(world: World, name: str, method: str) -> st.SearchStrategy[str]:
    raw = st.one_of(st.sampled_from([b"\xff", b"\xed\xa0\x80", b"a\x00b", b"\x00", b"%", b"x" * 300]),
                    st.binary(max_size=12))
    mine = {"queue": world.queue, "sub_id": world.sub, "space": "default"}[name] if method != "DELETE" else None
    # (on DELETE, the sentinel queue and subscription stay)
    good = [st.just(mine)] if mine else []
    return st.one_of(*good, raw.map(lambda b: quote_from_bytes(b, safe="")), st.text(max_size=8).map(
        lambda s: quote_from_bytes(s.encode(), safe="")))


def headers(world: World) -> st.SearchStrategy[dict]:
    values_ = st.sampled_from([None, f"Bearer {world.token}", "Bearer wrong", b"Bearer \xff\xfe", b"\xff",
                               "Bearer " + "x" * 5000, "Basic abc"])
    return st.builds(lambda a, t: {k: v for k, v in (("authorization", a), ("x-queue-token", t)) if v is not None},
                     values_, values_)


# -- the test --------------------------------------------------------------------------------------
def test_every_route_answers_hostile_requests_below_500_and_rejections_change_nothing(world):
    routes, shapes = world.routes, bodies(world)

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def run(data):
        method, template = data.draw(st.sampled_from(routes))
        path = template
        for name in ("queue", "sub_id", "space"):
            if "{" + name + "}" in path:
                path = path.replace("{" + name + "}", data.draw(path_ids(world, name, method)))
        params = data.draw(st.dictionaries(st.sampled_from(["max", "wait"]), st.one_of(
            NUMBERS.map(bytes.decode), st.text(max_size=5)), max_size=2)) if template.endswith("/messages") else {}
        shape = shapes.get(template.replace("/v1/spaces/{space}", "/v1"), values())  # a space's routes: the same bodies
        body = data.draw(st.one_of(shape, values())) if method in ("POST", "PUT") else None
        head = {**data.draw(headers(world)), "content-type": "application/json"}
        r = world.api.request(method, path, params=params, content=body, headers=head)
        assert r.status_code < 500, (method, path, body[:300] if body else None, r.status_code, r.text[:300])
        if r.status_code >= 400:
            error = strict_loads(r.content)["error"]
            assert isinstance(error["code"], str) and isinstance(error["message"], str)
            assert world.drain() == 0, f"{method} {path} was refused ({r.text[:200]}) yet a message was delivered"
            assert catalogue_size(world.redis) == world.baseline, f"{method} {path} was refused, the catalogue changed"
        else:
            world.drain()  # what was accepted arrives as strict JSON
            world.baseline = catalogue_size(world.redis)

    run()
