"""`bluedove export catalogue`: every stored subscription comes out once, with its bounds in the
space's order (wildcards as the dimension's range), in Parquet files of bounded row groups,
from a store (--store) and from a stopped cluster's data dir (--data-dir); bad input exits 2
naming the flag. A real redis-server and real processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from bluedove.cli.export_cmd import running_store_port
from bluedove.core.partition.bootstrap import ensure_table, numbered_members
from bluedove.core.space import Space
from bluedove.local.cluster import LocalCluster
from bluedove.store.server import free_port
from bluedove.store.store import Store, StoreLimits

pytestmark = pytest.mark.integration

FLEET = {"name": "fleet", "attributes": [{"name": "lat", "min": -90, "max": 90}, {"name": "lon", "min": -180,
                                                                                "max": 180}]}

BLUEDOVE = [sys.executable, "-m", "bluedove"]
SPACE = Space.from_json({"dimensions": [{"name": "lon", "min": -180, "max": 180},
                                        {"name": "lat", "min": -90, "max": 90},
                                        {"name": "speed", "min": 0, "max": 300}]})


def export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*BLUEDOVE, "export", "catalogue", *args], capture_output=True, text=True, timeout=120)


def read_export(out: Path) -> tuple[dict[str, tuple], list[pq.ParquetFile]]:
    """{id: (queue, lows, highs)} of every row of OUT/subscriptions; a repeated id fails."""
    files = sorted((out / "subscriptions").glob("part-*.parquet"))
    rows: dict[str, tuple] = {}
    for f in files:
        for r in pq.read_table(f).to_pylist():
            assert r["id"] not in rows, f"{r['id']} exported twice"
            rows[r["id"]] = (r["queue"], tuple(r["lows"]), tuple(r["highs"]))
    return rows, [pq.ParquetFile(f) for f in files]


def expected_row(space: Space, sub: dict) -> tuple:
    """What the export must say of a stored subscription, worked out here from the space alone:
    a constrained dimension's range clipped to the space, any other the whole dimension."""
    lows, highs = [], []
    for d in space.dimensions:
        lo, hi = sub["predicates"].get(d.name, (d.min, d.max))
        lows.append(max(float(lo), d.min))
        highs.append(min(float(hi), d.max))
    return sub["queue"], tuple(lows), tuple(highs)


async def fill(url: str, n: int) -> dict[str, dict]:
    """A table over SPACE and n subscriptions through the Store API (the dispatcher's own
    calls), a few then removed; returns the ones left {id: stored form}."""
    store = Store(url, StoreLimits(max_subscriptions_per_queue=10**6))
    try:
        await ensure_table(store, SPACE, numbered_members(2))
        queues = [q for q, _ in await store.create_queues(7)]
        subs = []
        for j in range(n):
            preds = {}
            if j % 2 == 0:
                preds["lon"] = [-200 + j % 50, 10.5 + j % 170]  # below the space's min: clipped
            if j % 3 == 0:
                preds["lat"] = [j % 80 - 40.25, 95]  # above the max: clipped
            if j % 5 == 1:
                preds["speed"] = [j % 100, j % 100 + 0.125]
            subs.append({"id": f"s{j:05d}", "queue": queues[j % 7], "predicates": preds})
        await store.add_subscriptions(subs)
        gone = [s for s in subs if int(s["id"][1:]) % 97 == 0]
        for s in gone:
            assert await store.remove_subscription(s["id"], s["queue"]) is not None
        gone_ids = {s["id"] for s in gone}
        return {s["id"]: s for s in subs if s["id"] not in gone_ids}
    finally:
        await store.close()


def test_export_from_store_writes_every_row_once(redis_clean_url, tmp_path):
    """2,000 stored, 21 removed: every remaining one exported once with the right bounds (a
    missing, extra or wrong row fails the comparison), in files of ≤700 rows and row groups of
    ≤250 (the flags), with the space beside them and in the files' metadata."""
    subs = asyncio.run(fill(redis_clean_url, 2000))
    out = tmp_path / "out"
    r = export("--store", redis_clean_url, "--out", str(out), "--rows-per-file", "700", "--row-group-rows", "250")
    assert r.returncode == 0, r.stderr
    assert f"exported {len(subs):,} subscriptions" in r.stdout and "3 file(s)" in r.stdout, r.stdout
    rows, files = read_export(out)
    assert rows == {sid: expected_row(SPACE, s) for sid, s in subs.items()}
    assert [f.metadata.num_rows for f in files] == [700, 700, len(subs) - 1400]
    for f in files:
        groups = [f.metadata.row_group(i).num_rows for i in range(f.metadata.num_row_groups)]
        assert max(groups) <= 250 and sum(groups) == f.metadata.num_rows
        assert json.loads(f.schema_arrow.metadata[b"space"]) == SPACE.to_json()
    assert json.loads((out / "space.json").read_text()) == SPACE.to_json()
    assert Space.from_json(json.loads((out / "space.json").read_text())) == SPACE

    # Again into the same OUT with one file: the earlier parts are replaced, not mixed in.
    r = export("--store", redis_clean_url, "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows, files = read_export(out)
    assert len(files) == 1 and len(rows) == len(subs)
    # A failed export (a store that does not answer) leaves the earlier one as it was.
    r = export("--store", f"redis://127.0.0.1:{free_port()}/0", "--out", str(out))
    assert r.returncode == 2 and read_export(out)[0] == rows, r.stderr


def test_export_of_an_empty_catalogue_has_the_schema(redis_clean_url, tmp_path):
    """A table but no subscription: one part file with no rows and the columns a reader expects."""
    asyncio.run(fill(redis_clean_url, 0))
    r = export("--store", redis_clean_url, "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    rows, files = read_export(tmp_path / "out")
    assert rows == {} and len(files) == 1
    assert files[0].schema_arrow.names == ["id", "queue", "lows", "highs", "named", "attr_lows", "attr_highs"]


def test_export_from_a_stopped_clusters_data_dir(tmp_path):
    """Subscriptions made over REST on a real `bluedove up`-style cluster. While it runs, --data-dir
    is refused (exit 2) with the --store URL to use instead; once stopped, --data-dir starts its
    store, exports every subscription, and stops the store again."""
    data = tmp_path / "data"
    made: dict[str, dict] = {}
    fleet: dict[str, dict] = {}
    cluster = LocalCluster(matchers=2, http_port=0, data_dir=data, quiet=True, restart=False).start()
    try:
        with httpx.Client(base_url=cluster.url, timeout=30) as api:
            for j in range(40):
                preds = {"x0": [j * 10, j * 10 + 55.5]} if j % 2 else {"x2": [-5, 500], "x3": [1, 2]}
                body = api.post("/v1/subscriptions", json={"predicates": preds})
                assert body.status_code == 201, body.text
                made[body.json()["id"]] = {"queue": body.json()["queue"], "predicates": preds}
            assert api.post("/v1/spaces", json=FLEET).status_code == 201  # a named space's own catalogue
            for j in range(30):
                preds = {"lat": [j - 80, j - 40]} if j % 3 else {"lon": [-170 + j, 20.5]}
                body = api.post("/v1/spaces/fleet/subscriptions", json={"predicates": preds})
                assert body.status_code == 201, body.text
                fleet[body.json()["id"]] = {"queue": body.json()["queue"], "predicates": preds}
        r = export("--data-dir", str(data), "--out", str(tmp_path / "live"))
        assert r.returncode == 2, r.stdout
        assert f"--data-dir {data}" in r.stderr and f"--store {cluster.store_url}" in r.stderr, r.stderr
    finally:
        cluster.stop()
    assert running_store_port(data / "redis") is None  # stopped: nothing on its files
    out = tmp_path / "out"
    r = export("--data-dir", str(data), "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows, _ = read_export(out)
    assert rows == {sid: expected_row(cluster.space, s) for sid, s in made.items()}
    assert json.loads((out / "space.json").read_text()) == cluster.space.to_json()
    # --space-name: that space's subscriptions alone, over its own schema
    r = export("--data-dir", str(data), "--out", str(tmp_path / "fleet"), "--space-name", "fleet")
    assert r.returncode == 0 and "of space 'fleet'" in r.stdout, r.stderr
    fleet_space = Space.from_json(json.loads((tmp_path / "fleet" / "space.json").read_text()))
    assert fleet_space.names == ("lat", "lon")
    assert read_export(tmp_path / "fleet")[0] == {sid: expected_row(fleet_space, s) for sid, s in fleet.items()}
    assert running_store_port(data / "redis") is None, "the export left its store running"


def test_bad_input_exits_2_naming_the_flag(redis_clean_url, tmp_path):
    """No source, a store without a table, an unreachable store, a data dir without a store, an
    OUT that cannot be written, bad sizes: each exits 2 and names its flag."""
    out = str(tmp_path / "out")
    r = export("--out", out)
    assert r.returncode == 2 and "--data-dir" in r.stderr and "--store" in r.stderr, r.stderr
    r = export("--store", redis_clean_url, "--out", out)
    assert r.returncode == 2 and f"--store: no segment table in the store at {redis_clean_url}" in r.stderr, r.stderr
    dead = f"redis://127.0.0.1:{free_port()}/0"
    r = export("--store", dead, "--out", out)
    assert r.returncode == 2 and "--store: the store at" in r.stderr and "unreachable" in r.stderr, r.stderr
    r = export("--store", "http://x", "--out", out)
    assert r.returncode == 2 and "--store http://x" in r.stderr, r.stderr
    (tmp_path / "empty").mkdir()
    r = export("--data-dir", str(tmp_path / "empty"), "--out", out)
    assert r.returncode == 2 and f"--data-dir {tmp_path / 'empty'}: no store there" in r.stderr, r.stderr
    r = export("--data-dir", str(tmp_path / "missing"), "--out", out)
    assert r.returncode == 2 and "no such folder" in r.stderr, r.stderr
    (tmp_path / "a-file").write_text("")
    r = export("--store", redis_clean_url, "--out", str(tmp_path / "a-file" / "out"))
    assert r.returncode == 2 and f"--out {tmp_path / 'a-file' / 'out'}: not writable" in r.stderr, r.stderr
    r = export("--store", redis_clean_url, "--out", out, "--space-name", "nope")
    assert r.returncode == 2 and "--space-name nope: no such space" in r.stderr, r.stderr
    r = export("--store", redis_clean_url, "--out", out, "--space-name", "Bad!")
    assert r.returncode == 2 and "--space-name must be 1 to 63 characters" in r.stderr, r.stderr
    r = export("--store", redis_clean_url, "--out", out, "--row-group-rows", "100001")
    assert r.returncode == 2 and "--row-group-rows 100001" in r.stderr, r.stderr
    r = export("--store", redis_clean_url, "--out", out, "--rows-per-file", "0")
    assert r.returncode == 2 and "--rows-per-file 0" in r.stderr, r.stderr
