"""The local Redis Cluster (bluedove/store/redis_cluster.py): it comes up whole, a cluster
client reads and writes on every primary, a killed primary's replica takes over with what was
acknowledged by WAIT, and nothing outlives stop() — nor a start() that fails."""

from __future__ import annotations

import subprocess
import time

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from bluedove.store.redis_cluster import RedisClusterServers, free_cluster_ports
from tests.conftest import flush_store

pytestmark = pytest.mark.integration


def running_on(ports) -> list[str]:
    """redis-server processes serving any of `ports` (redis titles itself `redis-server HOST:PORT`,
    so its command line no longer shows its directory)."""
    out = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "redis-server" in line
            and any(line.endswith(f"127.0.0.1:{p}") or f"127.0.0.1:{p} " in line for p in ports)]


def cluster_client(servers: RedisClusterServers) -> RedisCluster:
    nodes = [ClusterNode("127.0.0.1", p) for p in servers.started_primaries]
    return RedisCluster(startup_nodes=nodes, decode_responses=True, socket_timeout=2)


def keys_on_every_primary(client: RedisCluster, servers: RedisClusterServers, per_primary: int) -> dict[int, list[str]]:
    """Keys grouped by the primary serving their slot, `per_primary` for each."""
    by_port: dict[int, list[str]] = {p: [] for p in servers.primaries()}
    i = 0
    while any(len(keys) < per_primary for keys in by_port.values()):
        key = f"k{i}"
        i += 1
        port = servers.primary_of_slot(client.keyslot(key))
        if len(by_port[port]) < per_primary:
            by_port[port].append(key)
    return by_port


def replica_of(primary: int) -> int | None:
    """The port of the primary's first replica (None: none attached)."""
    with redis.Redis(port=primary, decode_responses=True) as r:
        first = r.info("replication").get("slave0")
    return int(first["port"]) if first else None


def test_cluster_serves_every_primary_fails_over_and_stops_clean(tmp_path):
    servers = RedisClusterServers(tmp_path, primaries=3, replicas=1, node_timeout_ms=2000)
    t0 = time.monotonic()
    servers.start()
    ports = list(servers.nodes)
    pids = [n.proc.pid for n in servers.nodes.values()]
    client = None
    try:
        start_s = time.monotonic() - t0
        primaries, replicas = servers.primaries(), servers.replicas()
        assert len(primaries) == 3 and len(replicas) == 3, (primaries, replicas)
        assert servers.url == "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in primaries)
        # Each primary has its own replica (not two on one, none on another).
        assert sorted(replica_of(p) for p in primaries) == replicas
        for port in ports:  # AOF as RedisServer has it, and the node timeout asked for
            with redis.Redis(port=port, decode_responses=True) as r:
                conf = r.config_get("appendonly") | r.config_get("cluster-node-timeout")
                assert conf == {"appendonly": "yes", "cluster-node-timeout": "2000"}, (port, conf)

        client = cluster_client(servers)
        by_port = keys_on_every_primary(client, servers, per_primary=5)
        for keys in by_port.values():
            for key in keys:
                client.set(key, f"v-{key}")
        for port, keys in by_port.items():
            assert [client.get(k) for k in keys] == [f"v-{k}" for k in keys]
            with redis.Redis(port=port, decode_responses=True) as r:  # stored on that primary itself
                assert [r.get(k) for k in keys] == [f"v-{k}" for k in keys]

        # Writes on the victim acknowledged by its replica (WAIT 1, on the writing connection).
        victim = primaries[0]
        heir = replica_of(victim)
        with redis.Redis(port=victim, decode_responses=True) as r:
            for key in by_port[victim]:
                r.set(key, f"w-{key}")
            assert r.execute_command("WAIT", 1, 2000) == 1, "the replica did not acknowledge the writes"

        servers.kill_node(victim)
        t_kill = time.monotonic()
        while heir not in servers.primaries():
            # Promotion takes the node timeout (2 s) plus an election (~1 s); 15 s means it never came.
            assert time.monotonic() - t_kill < 15, f"replica {heir} not promoted: primaries {servers.primaries()}"
            time.sleep(0.1)
        failover_s = time.monotonic() - t_kill
        assert servers.primaries() == sorted([heir, *primaries[1:]])
        assert servers.primary_of_slot(client.keyslot(by_port[victim][0])) == heir

        # The same client object follows the failover: it reads what WAIT acknowledged, and writes
        # on every primary (retrying while its slot map is stale; 10 s means it never caught up).
        deadline = time.monotonic() + 10
        while True:
            try:
                got = [client.get(k) for k in by_port[victim]]
                break
            except (redis.ConnectionError, redis.exceptions.ClusterDownError, redis.TimeoutError):
                assert time.monotonic() < deadline, "the cluster client never reached the promoted replica"
                time.sleep(0.2)
        assert got == [f"w-{k}" for k in by_port[victim]], "a write acknowledged by WAIT 1 was lost"
        for keys in by_port.values():
            for key in keys:
                client.set(key, f"after-{key}")
                assert client.get(key) == f"after-{key}"

        # The killed primary comes back as the replica of the one that took its place.
        servers.restart_node(victim)
        deadline = time.monotonic() + 10  # it syncs from the heir in well under a second
        while victim not in servers.replicas() or replica_of(heir) != victim:
            assert time.monotonic() < deadline, f"{victim} did not rejoin as {heir}'s replica"
            time.sleep(0.1)
        print(f"cluster up in {start_s:.1f}s, failover in {failover_s:.1f}s")
    finally:
        if client is not None:
            client.close()
        t_stop = time.monotonic()
        servers.stop()
    # A replica that has just synced refuses one SIGTERM while it writes its first AOF: stop()
    # asks again rather than waiting out its timeout and SIGKILLing it.
    assert time.monotonic() - t_stop < 5, f"stop() took {time.monotonic() - t_stop:.1f}s"
    servers.stop()  # idempotent
    assert not running_on(ports), running_on(ports)
    for pid in pids:
        assert subprocess.run(["ps", "-p", str(pid)], capture_output=True).returncode == 1, f"pid {pid} alive"


def test_a_start_that_fails_leaves_nothing(tmp_path):
    # 0.5 s is too short to join six nodes (they meet in about a second): start() must fail,
    # stop what it started and remove the half-made node directories.
    servers = RedisClusterServers(tmp_path, primaries=3, replicas=1)
    with pytest.raises(RuntimeError, match="Redis Cluster|did not answer"):
        servers.start(timeout_s=0.5)
    ports = list(servers.nodes)
    assert ports, "no node was started: the failure tested is not the one meant"
    assert not running_on(ports), running_on(ports)
    assert not list(tmp_path.glob("node-*")) and not (tmp_path / "cluster.json").exists()


def test_a_second_start_on_one_directory_keeps_the_data_and_the_shape(tmp_path):
    with RedisClusterServers(tmp_path, primaries=1, replicas=0) as first:
        client = cluster_client(first)
        client.set("kept", "yes")
        client.close()
        url = first.url
    with RedisClusterServers(tmp_path, primaries=1, replicas=0) as again:
        assert again.url == url  # the same ports, from cluster.json
        with pytest.raises(RuntimeError, match="running already"):
            again.start()  # refused, and the running node is not stopped by the refusal
        assert again.primaries() == [int(url.rsplit(":", 1)[1])]
        client = cluster_client(again)
        assert client.get("kept") == "yes"  # AOF and nodes.conf brought the node back with its slots
        client.close()
    # Another shape on the same directory is refused, naming both shapes.
    with pytest.raises(RuntimeError, match="1 primaries with 0 replica.*not 2 with 0"):
        RedisClusterServers(tmp_path, primaries=2, replicas=0).start()


def test_ports_leave_room_for_the_cluster_bus():
    ports = free_cluster_ports(6)
    assert len(set(ports)) == 6
    assert all(20000 <= p < 30000 and p + 10000 <= 65535 for p in ports)


def test_shape_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="primaries: 0"):
        RedisClusterServers(tmp_path, primaries=0)
    with pytest.raises(ValueError, match="replicas: -1"):
        RedisClusterServers(tmp_path, replicas=-1)


def test_the_session_store_is_the_kind_asked_and_flushes_whole(store_kind, redis_server, redis_clean_url):
    """`pytest --store-kind single|cluster`: redis_url's scheme follows it, and flush_store (what
    redis_clean_url does) empties every primary, not only the one a URL names first."""
    scheme = {"single": "redis://", "cluster": "redis+cluster://"}[store_kind]
    assert redis_clean_url.startswith(scheme), redis_clean_url
    ports = redis_server.primaries() if store_kind == "cluster" else [redis_server.port]
    assert len(ports) == (3 if store_kind == "cluster" else 1)
    for port in ports:
        with redis.Redis(port=port) as r:
            # The key's slot must be this node's on a cluster: the tag of one of its own slots.
            key = next(k for k in (f"f{i}" for i in range(100000))
                       if store_kind == "single" or redis_server.primary_of_slot(key_slot(k.encode())) == port)
            r.set(key, 1)
    flush_store(redis_server)
    for port in ports:
        with redis.Redis(port=port) as r:
            assert r.dbsize() == 0, f"{port} kept keys after flush_store"
