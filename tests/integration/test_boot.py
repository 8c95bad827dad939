"""A cluster that boots itself: `bluedove init`, a matcher on an empty store and `bluedove up` write
the same first table; racers agree on one; a cluster started by hand (init, matchers, dispatcher)
serves; `up` again on the same data dir keeps its table. Real processes on loopback."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest
import redis
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bluedove.core.partition.bootstrap import ensure_table
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import load_space
from bluedove.local.cluster import LocalCluster
from bluedove.store import keys as K
from bluedove.store.client import is_cluster_url, sync_client
from bluedove.store.server import free_port
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration

BLUEDOVE = [sys.executable, "-m", "bluedove"]
SPACE = "dimensions:\n- {name: a, min: 0, max: 100}\n- {name: b, min: 0, max: 100}\n"
OTHER_SPACE = "dimensions:\n- {name: a, min: 0, max: 10}\n"
SERVING = health_pb2.HealthCheckResponse.SERVING


@pytest.fixture
def space_files(tmp_path) -> tuple[str, str]:
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "other.yaml").write_text(OTHER_SPACE)
    return str(tmp_path / "space.yaml"), str(tmp_path / "other.yaml")


class Procs:
    """Processes a test starts, each logging to a file; all stopped (then killed) at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, *args: str) -> subprocess.Popen:
        with open(self.dir / f"{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen([*BLUEDOVE, *args], stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL)
        return self.procs[name]

    def log(self, name: str) -> str:
        return (self.dir / f"{name}.log").read_text(errors="replace")[-3000:]

    def alive(self) -> None:
        for name, p in self.procs.items():
            assert p.poll() is None, f"{name} exited ({p.returncode}):\n{self.log(name)}"

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def procs(tmp_path):
    p = Procs(tmp_path)
    yield p
    p.stop()


def init(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*BLUEDOVE, "init", *args], capture_output=True, text=True, timeout=60)


def stored(url: str) -> SegmentTable | None:
    r = sync_client(url)
    try:
        raw = r.get("bd:table")
    finally:
        r.close()
    return SegmentTable.from_json(json.loads(raw)) if raw else None


def segments(t: SegmentTable) -> tuple:
    """What must be identical between tables booted the same way (addresses and epochs may differ)."""
    return t.space, list(t.members), t.cuts, t.owners


def wait_for(what: str, check, timeout_s: float = 45.0, procs: Procs | None = None):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if procs is not None:
            procs.alive()
        try:
            last = check()
            if last:
                return last
        except (OSError, grpc.RpcError, httpx.HTTPError) as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"{what} not within {timeout_s} s (last: {last!r})")


def health(addr: str, service: str) -> int:
    with grpc.insecure_channel(addr) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=2).status


def view(addr: str) -> SegmentTable:
    with grpc.insecure_channel(addr) as ch:
        reply = pb_grpc.MatcherStub(ch).GetTable(pb.TableRequest(), timeout=2)
    return SegmentTable.from_json(json.loads(reply.table_json))


def db(url: str, n: int) -> str:
    """Database n of the test's redis-server: a store of its own (a Redis Cluster has only one
    database, so the tests that compare several stores run on one server only)."""
    if is_cluster_url(url):
        pytest.skip("compares stores in several databases of one server; a Redis Cluster has one")
    return url.rsplit("/", 1)[0] + f"/{n}"


# -- init --------------------------------------------------------------------------------------
def test_init_writes_once_is_a_no_op_again_and_refuses_another_space(redis_clean_url, space_files):
    space, other = space_files
    first = init("--store", redis_clean_url, "--space", space, "--matchers", "2")
    assert first.returncode == 0, first.stderr
    assert "epoch 1" in first.stdout and "m1 (no address yet), m2 (no address yet)" in first.stdout, first.stdout
    table = stored(redis_clean_url)
    assert table.epoch == 1 and table.members == {"m1": "", "m2": ""}
    # Again, even with other members: nothing changes, and it says so (a retried Job, a second `up`).
    again = init("--store", redis_clean_url, "--space", space, "--members", "x=127.0.0.1:1")
    assert again.returncode == 0, again.stderr
    assert "already initialised (epoch 1)" in again.stdout, again.stdout
    assert stored(redis_clean_url) == table
    refused = init("--store", redis_clean_url, "--space", other)
    assert refused.returncode == 2
    assert "stored a [0, 100), b [0, 100)" in refused.stderr and f"--space {other} gives a [0, 10)" in refused.stderr
    assert stored(redis_clean_url) == table, "a refused init must not touch the table"


def test_init_registers_the_default_spaces_log_its_space_file_declares(redis_clean_url, space_files, tmp_path):
    """A space file's `retention_s` is the default space's log, registered by `init` with the
    table (so every matcher, started with or without the file, logs from its start); a value
    that is not whole seconds is exit 2 naming it, and writes nothing."""
    space, _ = space_files
    logged = tmp_path / "logged.yaml"
    logged.write_text(SPACE + "retention_s: 1.5\n")
    bad = init("--store", redis_clean_url, "--space", str(logged))
    assert bad.returncode == 2 and "retention_s: expected whole seconds" in bad.stderr, bad.stderr
    assert stored(redis_clean_url) is None
    logged.write_text(SPACE + "retention_s: 600\n")
    assert init("--store", redis_clean_url, "--space", str(logged)).returncode == 0
    r = sync_client(redis_clean_url)
    try:
        assert json.loads(r.hget(K.space_record("default"), "spec"))["retention_s"] == 600
    finally:
        r.close()
    assert init("--store", redis_clean_url, "--space", space).returncode == 0  # the same space: a no-op


def test_init_refuses_bad_flags_with_exit_2(redis_clean_url, space_files, tmp_path):
    space, _ = space_files
    (tmp_path / "seed.json").write_text(json.dumps({"cuts": [[50], [150]]}))
    cases = [(["--members", "m1,m1"], "--members: member m1 is named twice"),
             (["--matchers", "0"], "--matchers 0"),
             (["--matchers", "2", "--seed", str(tmp_path / "seed.json")], "seed.cuts[1] (b): cuts must rise"),
             (["--members", "m1=nohost"], "--members m1='nohost': expected HOST:PORT")]
    for flags, says in cases:
        r = init("--store", redis_clean_url, "--space", space, *flags)
        assert r.returncode == 2 and says in r.stderr, (flags, r.returncode, r.stderr)
    assert stored(redis_clean_url) is None, "a refused init must write nothing"
    (tmp_path / "seed.json").write_text(json.dumps({"cuts": [[20], [80]]}))
    r = init("--store", redis_clean_url, "--space", space, "--matchers", "2", "--seed", str(tmp_path / "seed.json"))
    assert r.returncode == 0, r.stderr
    assert stored(redis_clean_url).cuts == ((0.0, 20.0), (0.0, 80.0))


# -- the same table, whoever writes it ------------------------------------------------------------
def test_init_a_matcher_and_up_write_the_same_table(redis_clean_url, space_files, procs, tmp_path):
    space, _ = space_files
    by_init, by_matcher, by_up = db(redis_clean_url, 1), db(redis_clean_url, 2), db(redis_clean_url, 3)
    assert init("--store", by_init, "--space", space, "--members", "m1,m2").returncode == 0
    port = free_port()
    procs.start("m1", "matcher", "--id", "m1", "--port", str(port), "--store", by_matcher, "--space", space,
                "--boot-members", "m1,m2")
    # m1 writes {m1, m2} (epoch 1), then registers its own address (epoch 2).
    t = wait_for("the matcher's table with its address", lambda: (t := stored(by_matcher)) and t.members["m1"] and t,
                 procs=procs)
    assert t.epoch == 2 and t.members == {"m1": f"127.0.0.1:{port}", "m2": ""}
    with LocalCluster(matchers=2, http_port=0, data_dir=tmp_path / "up", store=by_up, space_file=space,
                      quiet=True, restart=False) as c:
        assert c.table.epoch == 1, "up writes the table with every address: nothing to register"
    assert segments(stored(by_init)) == segments(t) == segments(stored(by_up))


def test_init_and_a_matcher_lay_out_the_first_table_by_a_seed_and_store_it(redis_clean_url, space_files, procs,
                                                                            tmp_path):
    """`init --seed` and `matcher --seed` (on an empty store) write the seed's table — matcher
    j of the seed is the j-th member, at its own segment index per dimension — and keep the
    seed in the store; a seed that does not fit the members stops the matcher with exit 2."""
    space, _ = space_files
    seed = {"version": 1, "matchers": 2, "dimensions": {"a": {"boundaries": [0, 30, 100]},
                                                       "b": {"boundaries": [0, 90, 100]}},
            "placement": [{"matcher": 0, "segments": {"a": 1, "b": 0}}, {"matcher": 1, "segments": {"a": 0, "b": 1}}]}
    (tmp_path / "seed.json").write_text(json.dumps(seed))
    by_init, by_matcher = db(redis_clean_url, 4), db(redis_clean_url, 5)
    r = init("--store", by_init, "--space", space, "--members", "m1,m2", "--seed", str(tmp_path / "seed.json"))
    assert r.returncode == 0, r.stderr
    t = stored(by_init)
    assert t.cuts == ((0.0, 30.0), (0.0, 90.0)) and t.owners == (("m2", "m1"), ("m1", "m2"))
    one = redis.Redis.from_url(by_init)
    try:
        assert json.loads(one.get("bd:seed")) == seed
    finally:
        one.close()
    bad = subprocess.run([*BLUEDOVE, "matcher", "--id", "m1", "--port", str(free_port()), "--store", by_matcher,
                          "--space", space, "--seed", str(tmp_path / "seed.json")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2, bad.stderr  # alone, it is one member; the seed places two
    assert "--seed " in bad.stderr and "seed.matchers: 2 matchers, but the cluster has 1" in bad.stderr, bad.stderr
    assert stored(by_matcher) is None, "a refused seed must write nothing"
    procs.start("m1", "matcher", "--id", "m1", "--port", str(free_port()), "--store", by_matcher, "--space", space,
                "--boot-members", "m1,m2", "--seed", str(tmp_path / "seed.json"))
    t2 = wait_for("the matcher's seeded table", lambda: stored(by_matcher), procs=procs)
    assert segments(t2) == segments(t)


async def test_concurrent_ensure_table_calls_agree_on_one_table(make_store, tmp_path):
    space = load_space(None)
    for attempt in range(20):
        a, b = make_store(), make_store()
        await a.r.flushall()
        (ta, ca), (tb, cb) = await asyncio.gather(ensure_table(a, space, {"m1": "x:1"}),
                                                  ensure_table(b, space, {"m2": "y:2", "m3": ""}))
        assert ta == tb, f"attempt {attempt}: the racers returned different tables"
        assert sorted([ca, cb]) == [False, True], f"attempt {attempt}: exactly one racer must write"
        assert SegmentTable.from_json(await a.get_table()) == ta


def test_two_matchers_started_at_once_on_an_empty_store_agree(redis_clean_url, space_files, procs):
    space, _ = space_files
    ports = {m: free_port() for m in ("m1", "m2")}
    for m, port in ports.items():  # no --boot-members: each proposes itself alone
        procs.start(m, "matcher", "--id", m, "--port", str(port), "--store", redis_clean_url, "--space", space)
    addrs = [f"127.0.0.1:{p}" for p in ports.values()]

    def agreed():
        t = stored(redis_clean_url)
        # One wrote epoch 1 with itself; the other found it, and joined by split (epoch 2).
        return t is not None and set(t.members) == {"m1", "m2"} and all(view(a) == t for a in addrs) and t

    t = wait_for("both matchers owning segments of one stored table", agreed, procs=procs)
    assert t.epoch == 2 and t.members == {m: f"127.0.0.1:{p}" for m, p in ports.items()}


# -- by hand ---------------------------------------------------------------------------------
def test_a_cluster_started_by_hand_serves(redis_clean_url, space_files, procs):
    """docs/operations.md: init, two matchers, a dispatcher without --space; then a third matcher
    whose only seed is --peers-dns joins by split."""
    space, other = space_files
    url = redis_clean_url
    assert init("--store", url, "--space", space, "--matchers", "2").returncode == 0
    p1, p2, p3, http = free_port(), free_port(), free_port(), free_port()
    a1 = f"127.0.0.1:{p1}"
    procs.start("m1", "matcher", "--id", "m1", "--port", str(p1), "--store", url)
    procs.start("m2", "matcher", "--id", "m2", "--port", str(p2), "--store", url, "--join", a1)
    procs.start("d1", "dispatcher", "--id", "d1", "--http-port", str(http), "--grpc-port", "0", "--store", url)
    api = httpx.Client(base_url=f"http://127.0.0.1:{http}", timeout=30)
    wait_for("/readyz", lambda: api.get("/readyz").status_code == 200, procs=procs)
    # `init` wrote the owners without addresses; each matcher registers its own as it starts,
    # which may come after the dispatcher is ready (it needs a table and the store, not them).
    want = {"m1": a1, "m2": f"127.0.0.1:{p2}"}
    table = wait_for("each owner registering its own address", lambda: (t := stored(url)).members == want and t,
                     procs=procs)
    # The dispatcher may have adopted init's table, without addresses (it answers 503 then): it
    # serves once it holds the registered one.
    wait_for("the dispatcher's view naming both addresses",
             lambda: {m["id"]: m["address"] for m in api.get("/v1/cluster").json()["members"]} == want, procs=procs)
    for addr in table.members.values():  # registered, but a matcher may still be loading
        wait_for(f"{addr} serving and ready",
                 lambda addr=addr: health(addr, "") == SERVING and health(addr, "bluedove.ready") == SERVING,
                 procs=procs)

    sub = api.post("/v1/subscriptions", json={"predicates": {"a": [60, 70]}})
    assert sub.status_code == 201, sub.text
    queue, auth = sub.json()["queue"], {"Authorization": f"Bearer {sub.json()['token']}"}
    for mid, attrs in (("in", {"a": 65, "b": 10}), ("out", {"a": 10, "b": 10})):
        r = api.post("/v1/messages", json={"id": mid, "attributes": attrs})
        assert r.status_code == 202, r.text
    got = api.get(f"/v1/queues/{queue}/messages", params={"wait": 10}, headers=auth).json()["messages"]
    assert [m["id"] for m in got] == ["in"], got

    # Another space: the matcher and the dispatcher refuse to start (exit 2), saying why.
    for role, args in (("matcher", ["--id", "m9", "--port", str(free_port())]),
                       ("dispatcher", ["--id", "d9", "--http-port", str(free_port()), "--grpc-port", "0"])):
        r = subprocess.run([*BLUEDOVE, role, *args, "--store", url, "--space", other], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2 and f"--space {other} gives a [0, 10)" in r.stderr, (role, r.stderr)

    # --peers-dns as the only seed beyond the table: resolves to m1 and m3 joins by split.
    procs.start("m3", "matcher", "--id", "m3", "--port", str(p3), "--store", url, "--peers-dns", f"localhost:{p1}")
    t = wait_for("m3 owning segments", lambda: (t := stored(url)) and "m3" in t.members and t, procs=procs)
    assert t.members["m3"] == f"127.0.0.1:{p3}" and t.segments_of("m3")
    wait_for("m3 ready", lambda: health(f"127.0.0.1:{p3}", "bluedove.ready") == SERVING, procs=procs)


def test_a_matcher_without_a_table_is_not_ready_until_one_is_stored(redis_clean_url, space_files, procs):
    space, _ = space_files
    port = free_port()
    addr = f"127.0.0.1:{port}"
    procs.start("m1", "matcher", "--id", "m1", "--port", str(port), "--store", redis_clean_url)
    wait_for("the health service", lambda: health(addr, "") is not None, procs=procs)
    time.sleep(1.0)  # no table: it must stay not serving
    assert health(addr, "") != SERVING and health(addr, "bluedove.ready") != SERVING
    assert init("--store", redis_clean_url, "--space", space, "--members", "m1").returncode == 0
    wait_for("serving", lambda: health(addr, "") == SERVING and health(addr, "bluedove.ready") == SERVING,
             procs=procs)
    assert stored(redis_clean_url).members == {"m1": addr}


# -- up again ----------------------------------------------------------------------------------
def test_up_again_on_the_same_data_dir_keeps_the_table(tmp_path, space_files):
    space, _ = space_files
    with LocalCluster(matchers=2, http_port=0, data_dir=tmp_path, space_file=space, quiet=True,
                      restart=False) as c:
        first = c.table
        api = httpx.Client(base_url=c.url, timeout=30)
        sub = api.post("/v1/subscriptions", json={"predicates": {"b": [0, 100]}}).json()
    with LocalCluster(matchers=2, http_port=0, data_dir=tmp_path, space_file=space, quiet=True,
                      restart=False) as c:
        again = c.table
        assert segments(again) == segments(first), "the stored table stays"
        assert again.members == c.addresses and again.members != first.members, "the new ports are registered"
        assert again.epoch == first.epoch + 2, "one registration (compare-and-set) per matcher"
        api = httpx.Client(base_url=c.url, timeout=30)
        assert api.post("/v1/messages", json={"id": "after", "attributes": {"a": 5, "b": 95}}).status_code == 202
        got = api.get(f"/v1/queues/{sub['queue']}/messages", params={"wait": 10},
                      headers={"Authorization": f"Bearer {sub['token']}"}).json()["messages"]
        assert [m["id"] for m in got] == ["after"], "the subscription made before the restart still matches"


def test_a_matcher_whose_picked_port_was_taken_starts_again_on_another(tmp_path, space_files, monkeypatch):
    """A port picked free, then bound by another process before the matcher listens on it: the
    matcher exits on the bind error; the cluster starts it again on new ports, it registers its
    new address, and the cluster serves."""
    import socket

    import bluedove.local.cluster as cluster_module

    space, _ = space_files
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    c = LocalCluster(matchers=1, http_port=0, data_dir=tmp_path, space_file=space, quiet=True, restart=False)
    picks = iter([port])  # the matcher's port is the first the cluster picks as it starts
    real = cluster_module.free_port
    monkeypatch.setattr(cluster_module, "free_port", lambda: next(picks, None) or real())
    try:
        with c:
            m1 = c.child("m1")
            assert m1.restarts == 1 and c.addresses["m1"] != f"127.0.0.1:{port}"
            assert c.table is not None and c.table.members == c.addresses, "the new address is registered"
            assert "Address already in use" in m1.log_path.read_text()
            api = httpx.Client(base_url=c.url, timeout=30)
            sub = api.post("/v1/subscriptions", json={"predicates": {"b": [0, 100]}}).json()
            assert api.post("/v1/messages", json={"id": "x", "attributes": {"a": 5, "b": 95}}).status_code == 202
            got = api.get(f"/v1/queues/{sub['queue']}/messages", params={"wait": 10},
                          headers={"Authorization": f"Bearer {sub['token']}"}).json()["messages"]
            assert [m["id"] for m in got] == ["x"]
    finally:
        taken.close()
