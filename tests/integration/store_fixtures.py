"""Helpers of the store tests (test_store.py, test_store_deliveries.py); their `store` and
`make_store` fixtures are in conftest.py."""

from __future__ import annotations

import json

from bluedove.store import keys as K
from bluedove.store.store import Store


def stream_order(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


def sub_json(sub_id: str, queue: str, predicates: dict | None = None) -> dict:
    return {"id": sub_id, "queue": queue, "predicates": predicates or {"x0": [0, 100]}}


def message(mid: str, **extra) -> tuple[str, str]:
    body = {"id": mid, "attributes": {"x0": 1, "x1": 2, "x2": 3, "x3": 4}, "payload": {"n": mid},
            "published_at": "2024-06-01T00:00:00Z", **extra}
    return mid, json.dumps(body)


async def replay(store: Store, after: str, known: dict[str, dict]) -> dict[str, dict]:
    """Apply every catalogue change after `after` to `known` ({id: sub}), in log order."""
    out = dict(known)
    while True:
        after, changes = await store.catalogue_changes(after, count=500)
        if not changes:
            return out
        for change in changes:
            if change["op"] == "add":
                out[change["id"]] = json.loads(change["sub"])
            else:
                assert change["op"] == "remove"
                out.pop(change["id"], None)


async def current_catalogue(store: Store) -> dict[str, dict]:
    out = {}
    for shard in range(K.CATALOG_SHARDS):
        out.update({k: json.loads(v) for k, v in (await store.r.hgetall(K.catalog_hash(shard))).items()})
    return out
