"""Re-seeding one named space of a running cluster (`bluedove seed --space-name fleet --from FILE
--apply`, ProposeTable naming the space): while every space publishes, fleet's table is laid
out as the seed says (uneven boundaries, the owners swapped on one dimension) by the hand-off,
with no restart; the default space's and orders' tables do not move; the change is a `reseed`
event naming fleet; every message reaches exactly the subscriptions of its space that match it.
A seed over another space, or a space that does not exist, exits 2 naming the flag."""

from __future__ import annotations

import asyncio
import json
import random

import httpx
import pytest

from bluedove.core.partition.seeds import reseeded
from bluedove.core.spaces import parse_space_spec
from bluedove.store.store import Store
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import drain
from tests.integration.test_reseed import SEED as DEFAULT_SEED
from tests.integration.test_reseed import seed_cli
from tests.integration.test_spaces_changes import publish_steadily, tables
from tests.integration.test_spaces_exact import FLEET, ORDERS, delivered, expected, make_spaces, messages_of

pytestmark = pytest.mark.integration

SEED = {"version": 1, "matchers": 2, "space": parse_space_spec(FLEET).space.to_json(),
        "dimensions": {"lat": {"boundaries": [-90, 30, 90]}, "lon": {"boundaries": [-180, -100, 180]}},
        "placement": [{"matcher": 0, "segments": {"lat": 1, "lon": 0}}, {"matcher": 1, "segments": {"lat": 0,
                                                                                                    "lon": 1}}]}


async def _seeds(url: str) -> tuple[dict | None, dict | None]:
    store = Store(url)
    try:
        return await store.get_seed("fleet"), await store.get_seed()
    finally:
        await store.close()


def test_a_named_space_is_reseeded_alone_while_every_space_publishes(tmp_path):
    rng = random.Random(31)
    cluster = start_cluster(tmp_path, matchers=2)
    seed_file, wrong = tmp_path / "fleet.json", tmp_path / "default.json"
    seed_file.write_text(json.dumps(SEED))
    wrong.write_text(json.dumps({**DEFAULT_SEED, "matchers": 2, "placement": DEFAULT_SEED["placement"][:2]}))
    try:
        queues, subs = make_spaces(cluster.url, rng, (ORDERS, FLEET), 3)
        messages = messages_of(rng, 200)
        url = cluster.store_url
        before = asyncio.run(tables(url))
        dry = seed_cli("--space-name", "fleet", "--from", str(seed_file), "--store", url)
        assert dry.returncode == 0 and "not applied" in dry.stdout and "lat [-90, 0) -> [30, 90)" in dry.stdout, dry

        async def run() -> tuple[object, list, list]:
            refused: list = []
            async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
                pub = asyncio.create_task(publish_steadily(client, messages, 60, refused))
                await asyncio.sleep(2.0)
                applied = await asyncio.to_thread(seed_cli, "--space-name", "fleet", "--from", str(seed_file),
                                                  "--apply", "--store", url, "--apply-timeout", "60")
                await pub
                got = await drain(client, queues)
                events = (await client.get("/v1/cluster", params={"space": "fleet"})).json()["autoscaler"]["events"]
            return applied, got, events

        applied, got, events = asyncio.run(run())
        assert applied.returncode == 0 and "applied: epoch 2" in applied.stdout, applied.stderr
        after = asyncio.run(tables(url))
        assert after["default"] == before["default"] and after["orders"] == before["orders"]
        want = reseeded(before["fleet"], SEED)
        assert (after["fleet"].epoch, after["fleet"].cuts, after["fleet"].owners) == (2, want.cuts, want.owners)
        assert [e["action"] for e in events] == ["reseed"] and "re-seeded from" in events[0]["reason"]
        assert asyncio.run(_seeds(url)) == (SEED, None)  # fleet's, for its splits; none for the default
        assert delivered(got) == expected(subs, messages)

        r = seed_cli("--space-name", "fleet", "--from", str(wrong), "--store", url)
        assert r.returncode == 2 and "--from" in r.stderr, r.stderr
        r = seed_cli("--space-name", "nope", "--from", str(seed_file), "--store", url)
        assert r.returncode == 2 and "--space-name nope: no such space" in r.stderr, r.stderr
        r = seed_cli("--space-name", "No!", "--from", str(seed_file), "--store", url)
        assert r.returncode == 2 and "--space-name must be" in r.stderr, r.stderr
    finally:
        cluster.stop()
    assert_no_children(cluster)
