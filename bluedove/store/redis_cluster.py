"""A local Redis Cluster: N primaries with R replicas each, redis-server processes on loopback.

Every node is a `RedisServer` (the same binary, AOF on, appendfsync everysec) with
`cluster-enabled yes`, in its own directory `data_dir/node-PORT` (AOF, nodes.conf, redis.log).
The nodes are joined by hand — CLUSTER MEET, ADDSLOTS, REPLICATE — so any number of primaries
works, down to one (`redis-cli --cluster create` wants three). Redis 6.2 puts a node's cluster
bus on its port + 10000 (`cluster-port` came in 7.0), so both ports must be free.

`data_dir/cluster.json` records the layout once the cluster is up: a second `start()` on the same
directory starts the same nodes on the same ports, and their nodes.conf and AOF bring the cluster
back with its data (as `bluedove up` again on one data dir keeps a single server's data).

A failover needs a majority of the primaries to vote: with one or two primaries a killed
primary's replica is never promoted; with three, one primary may fail at a time.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from bluedove.store.server import RedisServer

SLOTS = 16384
BUS_OFFSET = 10000  # Redis 6.2: the cluster bus listens on port + 10000
PORT_RANGE = (20000, 30000)  # client ports; their buses are 30000-40000
LAYOUT = "cluster.json"


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_ports(n: int) -> list[int]:
    """n ports p with p and p + 10000 both free, searched from a random start in 20000-30000 (so
    that two clusters started at once rarely pick the same ones)."""
    lo, hi = PORT_RANGE
    start = random.randrange(lo, hi)
    out: list[int] = []
    for p in [*range(start, hi), *range(lo, start)]:
        if _bindable(p) and _bindable(p + BUS_OFFSET):
            out.append(p)
            if len(out) == n:
                return out
    raise RuntimeError(f"no {n} free ports p in {lo}-{hi} with p + {BUS_OFFSET} free too (the cluster bus)")


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=2,
                       socket_connect_timeout=2)


def _ask(port: int, *command: str | int) -> Any:
    """One command to one node, on a connection of its own; its reply, of the command's shape."""
    with _client(port) as r:
        return r.execute_command(*command)


def _info(port: int, section: str) -> dict[str, Any]:
    with _client(port) as r:
        info: dict[str, Any] = r.info(section)
        return info


class RedisClusterServers:
    """`primaries` primary nodes with `replicas` replicas each; a replica is promoted after its
    primary has been unreachable for `node_timeout_ms` (cluster-node-timeout) and a vote."""

    def __init__(self, data_dir: str | Path, primaries: int = 3, replicas: int = 1,
                 node_timeout_ms: int = 2000) -> None:
        if primaries < 1:
            raise ValueError(f"primaries: {primaries}; a cluster needs at least 1")
        if replicas < 0:
            raise ValueError(f"replicas: {replicas}; expected 0 or more")
        self.data_dir = Path(data_dir)
        self.n_primaries = primaries
        self.n_replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.nodes: dict[int, RedisServer] = {}  # port -> its process
        self.started_primaries: list[int] = []  # the primaries once start() returned

    @property
    def url(self) -> str:
        """redis+cluster://127.0.0.1:P1,… — the primaries at start, as startup nodes."""
        if not self.started_primaries:
            raise RuntimeError("the cluster is not started")
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.started_primaries)

    def _node(self, port: int) -> RedisServer:
        return RedisServer(self.data_dir / f"node-{port}", port, extra_args=[
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
        ])

    # -- start -----------------------------------------------------------------------------
    def start(self, timeout_s: float = 30.0) -> "RedisClusterServers":
        """Start (or start again, from `cluster.json`) every node and wait until the cluster is
        whole: cluster_state:ok on every node, every primary with its replicas online. On any
        failure every process started is stopped (and a new cluster's directories removed)."""
        if self._live():
            raise RuntimeError(f"the cluster in {self.data_dir} is running already (ports {self._live()})")
        deadline = time.monotonic() + timeout_s
        layout = self._read_layout()
        try:
            if layout:
                self._start_nodes(layout["ports"], deadline)
            else:
                ports = self._start_new_nodes(deadline)
                self._join(ports, deadline)
            self._wait_whole(deadline)
            self.started_primaries = self.primaries()
            if not layout:
                (self.data_dir / LAYOUT).write_text(json.dumps(
                    {"primaries": self.n_primaries, "replicas": self.n_replicas, "ports": ports}, indent=1))
        except BaseException:
            self.stop()
            if not layout:
                self._remove_node_dirs()
            raise
        return self

    def _start_new_nodes(self, deadline: float, attempts: int = 3) -> list[int]:
        """Nodes for a new cluster on free ports; other ports if one was taken between the check
        and redis-server's bind (by another cluster starting beside this one)."""
        self._remove_node_dirs()  # of a start that failed: they never served
        n = self.n_primaries * (1 + self.n_replicas)
        for _ in range(attempts - 1):
            ports = free_cluster_ports(n)
            try:
                self._start_nodes(ports, deadline)
                return ports
            except RuntimeError:
                if time.monotonic() >= deadline:
                    raise
                self.stop()
                self.nodes = {}
                self._remove_node_dirs()
        ports = free_cluster_ports(n)
        self._start_nodes(ports, deadline)
        return ports

    def _remove_node_dirs(self) -> None:
        for made in self.data_dir.glob("node-*"):
            shutil.rmtree(made, ignore_errors=True)

    def _read_layout(self) -> dict[str, Any] | None:
        path = self.data_dir / LAYOUT
        if not path.exists():
            return None
        layout: dict[str, Any] = json.loads(path.read_text())
        shape = (layout["primaries"], layout["replicas"])
        if shape != (self.n_primaries, self.n_replicas):
            raise RuntimeError(f"{self.data_dir} holds a cluster of {shape[0]} primaries with {shape[1]} "
                               f"replica(s) each, not {self.n_primaries} with {self.n_replicas}: start it with "
                               "its own shape, or use another directory")
        return layout

    def _start_nodes(self, ports: list[int], deadline: float) -> None:
        for port in ports:
            if not _bindable(port) or not _bindable(port + BUS_OFFSET):
                raise RuntimeError(f"port {port} or its cluster bus port {port + BUS_OFFSET} is in use")
            node = self._node(port)
            self.nodes[port] = node
            node.start(timeout_s=max(1.0, deadline - time.monotonic()))
            assert node.proc is not None  # start() returns only with its process running
            # Another server on the port would have answered the PING: it must be ours.
            pid = _info(port, "server")["process_id"]
            if pid != node.proc.pid:
                raise RuntimeError(f"port {port} answered from process {pid}, not the redis-server started")

    def _join(self, ports: list[int], deadline: float) -> None:
        primaries, replicas = ports[:self.n_primaries], ports[self.n_primaries:]
        for i, port in enumerate(ports):  # distinct epochs: no collision to resolve after ADDSLOTS
            _ask(port, "CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        for port in ports[1:]:
            _ask(ports[0], "CLUSTER", "MEET", "127.0.0.1", port)
        for i, port in enumerate(primaries):
            lo, hi = i * SLOTS // len(primaries), (i + 1) * SLOTS // len(primaries)
            _ask(port, "CLUSTER", "ADDSLOTS", *range(lo, hi))
        ids = {port: _ask(port, "CLUSTER", "MYID") for port in ports}
        _wait(lambda: all(self._knows(port, ids) for port in ports), deadline,
              lambda: f"the nodes did not all meet: {self._views(ports)}")
        for j, port in enumerate(replicas):
            _ask(port, "CLUSTER", "REPLICATE", ids[primaries[j // self.n_replicas]])

    @staticmethod
    def _knows(port: int, ids: dict[int, str]) -> bool:
        """The node knows every other by its id, handshakes done."""
        known = {}
        for line in _nodes_lines(port):
            node_id, _address, flags = line.split()[:3]
            known[node_id] = flags
        return all(i in known and "handshake" not in known[i] for i in ids.values())

    def _views(self, ports: list[int]) -> str:
        """Each node's cluster_state and how many nodes it knows (a node that does not answer: none)."""
        out = []
        for port in ports:
            fields = _cluster_info(port)
            out.append(f"{port}: state {fields.get('cluster_state')}, knows {fields.get('cluster_known_nodes')}")
        return "; ".join(out)

    def _wait_whole(self, deadline: float) -> None:
        ports = list(self.nodes)

        def whole() -> bool:
            if not all(_cluster_info(p).get("cluster_state") == "ok" for p in ports):
                return False
            primaries = self.primaries()
            return (len(primaries) == self.n_primaries
                    and all(_online_replicas(p) == self.n_replicas for p in primaries))

        _wait(whole, deadline, lambda: f"the cluster is not whole: {self._views(ports)}; primaries "
                                       f"{self.primaries()}, replicas {self.replicas()}")

    # -- the live cluster ------------------------------------------------------------------
    def _live(self) -> list[int]:
        return [p for p, n in self.nodes.items() if n.proc is not None and n.proc.poll() is None]

    def _roles(self) -> dict[int, str]:
        roles: dict[int, str] = {}
        for port in self._live():
            try:
                roles[port] = _ask(port, "ROLE")[0]
            except redis.RedisError:
                continue  # a node that does not answer has no role now
        return roles

    def primaries(self) -> list[int]:
        """The ports of the running nodes that are primaries now (a failover changes them)."""
        return sorted(p for p, role in self._roles().items() if role == "master")

    def replicas(self) -> list[int]:
        """The ports of the running nodes that are replicas now."""
        return sorted(p for p, role in self._roles().items() if role == "slave")

    def primary_of_slot(self, slot: int) -> int:
        """The port of the running primary that serves `slot`, by its own account: other nodes
        learn of a failover a moment later. Of two claims (a failed-over primary just restarted),
        the one with the newer config epoch."""
        claims = []
        for port in self.primaries():
            try:
                mine = next(line.split() for line in _nodes_lines(port) if "myself" in line.split()[2])
            except (redis.RedisError, StopIteration):
                continue
            if any(_in_range(slot, r) for r in mine[8:]):
                claims.append((int(mine[6]), port))
        if not claims:
            raise RuntimeError(f"slot {slot} has no running primary (primaries {self.primaries()})")
        return max(claims)[1]

    # -- failures --------------------------------------------------------------------------
    def kill_node(self, port: int) -> None:
        """SIGKILL one node: what it had not written to its AOF or sent to a replica is lost."""
        self.nodes[port].kill()

    def restart_node(self, port: int, timeout_s: float = 30.0) -> None:
        """Start a stopped node again on its port and directory; it rejoins from its nodes.conf (a
        primary that was failed over comes back as a replica of the one promoted)."""
        deadline = time.monotonic() + timeout_s
        self.nodes[port].start(timeout_s=timeout_s)
        _wait(lambda: _cluster_info(port).get("cluster_state") == "ok", deadline,
              lambda: f"node {port} did not rejoin: {self._views([port])}")

    # -- stop ------------------------------------------------------------------------------
    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM every node at once, and again every half second: a replica writing its first
        AOF after a sync refuses a SIGTERM ("Writing initial AOF, can't exit", Redis 6.2) for a
        moment. SIGKILL past the timeout. Idempotent."""
        running = [n.proc for n in self.nodes.values() if n.proc is not None and n.proc.poll() is None]
        deadline = time.monotonic() + timeout_s
        next_term = 0.0
        while running and time.monotonic() < deadline:
            if time.monotonic() >= next_term:
                for proc in running:
                    proc.terminate()
                next_term = time.monotonic() + 0.5
            time.sleep(0.02)
            running = [p for p in running if p.poll() is None]
        for node in self.nodes.values():
            node.kill()  # the ones still running; forgets the exited ones' processes

    def __enter__(self) -> "RedisClusterServers":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _nodes_lines(port: int) -> list[str]:
    raw = _ask(port, "CLUSTER", "NODES")
    return raw.splitlines() if isinstance(raw, str) else []


def _in_range(slot: int, field: str) -> bool:
    """A CLUSTER NODES slot field: "5461", "0-5460" (a slot migrating, "[…]", is not served yet)."""
    if field.startswith("["):
        return False
    lo, _, hi = field.partition("-")
    return int(lo) <= slot <= int(hi or lo)


def _cluster_info(port: int) -> dict[str, str]:
    try:
        info = _ask(port, "CLUSTER", "INFO")
    except redis.RedisError:
        return {}
    return dict(line.split(":", 1) for line in info.splitlines() if ":" in line)


def _online_replicas(port: int) -> int:
    try:
        info = _info(port, "replication")
    except redis.RedisError:
        return 0
    return sum(1 for k, v in info.items()
               if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online")


def _wait(ready: Callable[[], bool], deadline: float, why: Callable[[], str]) -> None:
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except redis.RedisError:
            pass  # a node still starting or syncing: ask again
        time.sleep(0.1)
    raise RuntimeError(f"Redis Cluster: {why()}")
