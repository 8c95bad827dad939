"""A cluster laid out by a partition seed (bluedove/core/partition/seeds.py): uneven boundaries, and owners
that are a different permutation on every dimension (m1 owns the third segment of x0 but the
second of x1, …). Every part that routes by the table — dispatchers' forwarding and
subscription placement, matchers' ownership checks, takeover's merge and its hand-off
sources — must hold no "matcher j owns segment j" assumption: deliveries are compared
exactly with a brute-force oracle, before and after a matcher is killed."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import default_space
from bluedove.store import Store
from bluedove.store.server import free_port
from tests.integration.cluster_checks import (
    EXACT,
    gossip_views,
    match_on_every_candidate,
    publish_points,
    random_point,
    random_workload,
)
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import compare, drain, new_queue, oracle, stop_up

pytestmark = pytest.mark.integration

BOUNDS = {"x0": [0, 120, 300, 710, 1000], "x1": [0, 480, 520, 900, 1000],
          "x2": [0, 50, 600, 650, 1000], "x3": [0, 333, 334, 999, 1000]}
PERMS = {"x0": [2, 0, 3, 1], "x1": [1, 3, 0, 2], "x2": [3, 2, 1, 0], "x3": [0, 2, 1, 3]}


def permuted_seed() -> dict:
    return {"version": 1, "created": "2026-11-24T02:00:00Z", "matchers": 4, "space": default_space().to_json(),
            "dimensions": {d: {"boundaries": b} for d, b in BOUNDS.items()},
            "placement": [{"matcher": j, "segments": {d: p[j] for d, p in PERMS.items()}} for j in range(4)]}


def expected_segments(member: int) -> dict[str, list[float]]:
    return {d: [BOUNDS[d][PERMS[d][member]], BOUNDS[d][PERMS[d][member] + 1]] for d in BOUNDS}


def wait_for(pred, what: str, limit_s: float = 30.0):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {limit_s} s")


def test_up_with_a_seed_lays_out_the_first_table_and_delivers_exactly(tmp_path):
    """`bluedove up --seed FILE`: the first table is the seed's (per-dimension permutations,
    uneven widths), the seed is stored beside it, and a random workload is delivered exactly."""
    seed_file = tmp_path / "seed.json"
    seed_file.write_text(json.dumps(permuted_seed()))
    port, grpc_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bluedove", "up", "--matchers", "4", "--seed", str(seed_file),
                             "--http-port", str(port), "--grpc-port", str(grpc_port),
                             "--data-dir", str(tmp_path / "data")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("ready") or line.startswith("bluedove up:"):
                break
        out = "".join(lines)
        store_url = re.search(r"store\s+(redis://\S+)", out)
        assert store_url, out  # `up` failed to start: its output says why
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=url, timeout=30) as api:
            status = wait_for(lambda: (s := api.get("/v1/cluster").json()) and len(s["members"]) == 4 and s,
                              "the cluster view lists 4 matchers")
            segs = {m["id"]: m["segments"] for m in status["members"]}
            # m1 is matcher 0 of the seed: x0 index 2, x1 index 1, x2 index 3, x3 index 0; and so on.
            assert segs == {f"m{j + 1}": expected_segments(j) for j in range(4)}, segs
            queues = dict(new_queue(api) for _ in range(15))

        async def stored_seed():
            store = Store(store_url.group(1))
            try:
                return await store.get_seed()
            finally:
                await store.close()

        assert asyncio.run(stored_seed()) == permuted_seed()
        subs, messages, got = asyncio.run(random_workload(url, queues, random.Random(14), 800, 1000))
        expected = oracle(default_space(), subs, messages)
        assert len(expected) > 300  # enough matches that a wrong owner would show
        assert compare(expected, got) == EXACT
    finally:
        stop_up(proc, tmp_path)


def test_up_with_a_bad_seed_names_the_field_and_starts_nothing(tmp_path):
    bad = permuted_seed()
    bad["placement"][3]["segments"]["x2"] = 3  # matcher 0 has it already
    seed_file = tmp_path / "seed.json"
    seed_file.write_text(json.dumps(bad))
    data = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "bluedove", "up", "--matchers", "4", "--seed", str(seed_file),
                             "--http-port", "0", "--grpc-port", "0", "--data-dir", str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        # The seed was taken and a cluster started: SIGTERM makes `up` stop all it started.
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        raise AssertionError("`up` accepted a seed that places segment 3 of x2 twice") from None
    assert proc.returncode == 2, stderr
    says = f"bluedove up: --seed {seed_file}: seed.placement[3].segments.x2: segment 3 is already placed on matcher 0"
    assert says in stderr and "Traceback" not in stderr, stderr
    assert not data.exists()  # refused before the store or any process started


def test_a_seeded_cluster_stays_exact_through_a_takeover(tmp_path):
    """Kill a matcher of the seeded cluster: its segments (at different indexes on each
    dimension) merge into live neighbours, and delivery stays exact."""
    cluster = start_cluster(tmp_path, matchers=4, seed=permuted_seed())
    try:
        assert cluster.table.owners[0] == ("m2", "m4", "m1", "m3")  # x0: matcher 1 owns index 0, …
        rng = random.Random(15)
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            queues = dict(new_queue(api) for _ in range(15))
        subs, messages, got = asyncio.run(random_workload(cluster.url, queues, rng, 800, 600))
        assert compare(oracle(cluster.space, subs, messages), got) == EXACT

        epoch0 = cluster.table.epoch
        os.kill(cluster.child("m3").pid, signal.SIGKILL)
        survivors = [a for m, a in cluster.table.members.items() if m != "m3"]

        def taken_over():
            views = asyncio.run(gossip_views(survivors))
            return views[0][0] if {v[0].epoch for v in views} == {epoch0 + 1} else None

        table: SegmentTable = wait_for(taken_over, "the survivors agree on a table without m3")
        assert "m3" not in table.members and all("m3" not in o for o in table.owners)
        checked = asyncio.run(match_on_every_candidate(table, rng, subs, 150))
        assert checked > 200

        async def more() -> tuple[dict, list]:
            async with httpx.AsyncClient(base_url=cluster.url, timeout=60) as client:
                bounds = sorted({float(b) for _, p in subs.values() for r in p.values() for b in r if 0 <= b < 1000})
                # The dispatcher may still hold the old table for a moment: publishing retries
                # nothing here, so wait until it shows the new epoch.
                for _ in range(150):
                    if (await client.get("/v1/cluster")).json()["epoch"] == table.epoch:
                        break
                    await asyncio.sleep(0.2)
                msgs = await publish_points(client, asyncio.Semaphore(16), [random_point(rng, bounds)
                                                                            for _ in range(600)])
                return msgs, await drain(client, queues)

        messages2, got2 = asyncio.run(more())
        expected2 = oracle(cluster.space, subs, messages2)
        assert len(expected2) > 150
        assert compare(expected2, got2) == EXACT
    finally:
        cluster.stop()
    assert_no_children(cluster)
