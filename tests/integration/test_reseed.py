"""Re-seeding a running cluster (`bluedove seed --from FILE --apply`, the matcher RPC
ProposeTable): while messages flow, the table is laid out anew — uneven boundaries, a different
owner permutation per dimension — through the usual hand-off, with no restart. Every accepted
message is delivered exactly (brute-force oracle), none is lost; the seed is stored; a proposal
not based on the current epoch, or with other members, is refused with a reason and changes
nothing. Publishers retry a 503 with the same message id, as docs/api.md tells clients to."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys

import grpc
import httpx
import pytest

from bluedove.core.partition.seeds import reseeded
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import default_space
from bluedove.store import Store
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc
from tests.integration.cluster_checks import (
    EXACT,
    gossip_views,
    match_on_every_candidate,
    publish_steadily,
    subscribe_random,
)
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import compare, drain, oracle

pytestmark = pytest.mark.integration

BOUNDS = {"x0": [0, 120, 300, 710, 1000], "x1": [0, 480, 520, 900, 1000],
          "x2": [0, 50, 600, 650, 1000], "x3": [0, 333, 334, 999, 1000]}
PERMS = {"x0": [2, 0, 3, 1], "x1": [1, 3, 0, 2], "x2": [3, 2, 1, 0], "x3": [0, 2, 1, 3]}
SEED = {"version": 1, "matchers": 4, "space": default_space().to_json(),
        "dimensions": {d: {"boundaries": b} for d, b in BOUNDS.items()},
        "placement": [{"matcher": j, "segments": {d: p[j] for d, p in PERMS.items()}} for j in range(4)]}


def seed_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bluedove", "seed", *args], capture_output=True, text=True,
                          timeout=120)


async def propose(addr: str, table: SegmentTable) -> pb.ProposeReply:
    async with grpc.aio.insecure_channel(addr) as ch:
        return await pb_grpc.MatcherStub(ch).ProposeTable(
            pb.ProposeRequest(table_json=json.dumps(table.to_json()), reason="test"), timeout=30)


def test_apply_a_seed_to_a_running_cluster_under_load(tmp_path):
    cluster = start_cluster(tmp_path, matchers=4)
    seed_file = tmp_path / "seed.json"
    seed_file.write_text(json.dumps(SEED))
    try:
        rng = random.Random(41)
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            queues, subs = subscribe_random(api, rng, 20, 500)
        before = SegmentTable.from_json(json.loads(json.dumps(cluster.table.to_json())))

        # Without --apply: only what would change, and nothing changes.
        dry = seed_cli("--from", str(seed_file), "--store", cluster.store_url)
        assert dry.returncode == 0, dry.stderr
        assert "not applied (add --apply)" in dry.stdout and "m1: x0 [0, 250) -> [300, 710)" in dry.stdout, dry.stdout

        async def run():
            messages: dict = {}
            refused: list = []
            async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
                pub = asyncio.create_task(publish_steadily(client, rng, "a", 900, 150, messages, refused))
                await asyncio.sleep(2.0)
                applied = await asyncio.to_thread(seed_cli, "--from", str(seed_file), "--apply", "--store",
                                                  cluster.store_url, "--apply-timeout", "60")
                await pub
                await publish_steadily(client, rng, "b", 300, 150, messages, refused)
                got = await drain(client, queues)
            return messages, refused, got, applied

        messages, refused, got, applied = asyncio.run(run())
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert f"applied: epoch {before.epoch + 1}" in applied.stdout, applied.stdout
        assert "m1: x0 [0, 250) -> [300, 710), x1 [0, 250) -> [480, 520)" in applied.stdout, applied.stdout

        expected_table = reseeded(before, SEED)
        views = asyncio.run(gossip_views(list(before.members.values())))
        assert all(v[0] == expected_table for v in views), [v[0].epoch for v in views]

        async def stored():
            store = Store(cluster.store_url)
            try:
                return SegmentTable.from_json(await store.get_table()), await store.get_seed(), await store.events()
            finally:
                await store.close()

        table, seed, events = asyncio.run(stored())
        assert table == expected_table and seed == SEED
        assert [e for e in events if e["action"] == "reseed" and "re-seeded from" in e["reason"]], events

        assert len(messages) == 1200  # every message was accepted in the end (refusals retried)
        expected = oracle(cluster.space, subs, messages)
        assert len(expected) > 500
        assert compare(expected, got) == EXACT  # none lost, none extra, none twice
        assert not [mid for _, mid in refused if mid.startswith("b-")], "refusals after the re-seed was out"
        print(f"re-seed under load: {len(refused)} refusals (retried)")
        assert asyncio.run(match_on_every_candidate(table, rng, subs, 150)) > 300

        # Refused proposals change nothing: a stale epoch, other members.
        addr = table.members["m2"]
        stale = asyncio.run(propose(addr, reseeded(before, SEED)))
        assert not stale.ok and f"not the next of this matcher's epoch {table.epoch}" in stale.reason
        other = reseeded(table, SEED)
        other = SegmentTable(other.epoch, other.space, {**other.members, "m1": "127.0.0.1:1"}, other.cuts,
                             other.owners)
        wrong = asyncio.run(propose(addr, other))
        assert not wrong.ok and "are not the current ones" in wrong.reason
        assert asyncio.run(stored())[0] == table
    finally:
        cluster.stop()
    assert_no_children(cluster)


def test_seed_apply_refuses_bad_input_naming_the_flag(tmp_path, redis_clean_url):
    seed_file = tmp_path / "seed.json"
    seed_file.write_text(json.dumps(SEED))
    r = seed_cli("--from", str(seed_file), "--apply", "--store", redis_clean_url)
    assert r.returncode == 2 and f"--store {redis_clean_url}: no segment table there" in r.stderr, r.stderr
    r = seed_cli("--from", str(tmp_path / "missing.json"), "--apply", "--store", redis_clean_url)
    assert r.returncode == 2 and "--from " in r.stderr and "No such file" in r.stderr, r.stderr
    r = seed_cli("--apply", "--store", redis_clean_url)
    assert r.returncode == 2 and "--from FILE (a seed to apply) or --subscriptions PATH" in r.stderr, r.stderr
