"""The store a delivery bench runs on, node by node: one private redis-server, or a local Redis
Cluster (`--store-cluster N`, `--store-replicas R`), and what each node did in a phase.

A node's CPU is its redis-server process's (psutil); its commands are its own `INFO
commandstats`, read from every primary. Commands a script runs count in commandstats alone too,
so a node's XADD calls are the deliveries written to it (the only XADDs of a bench phase: no
subscription changes then). What a node's pollers acked is what was written there less the
growth of its queues' backlog. Replicas are measured apart: on a cluster a replica repeats every
write of its primary.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.crc import key_slot

from bluedove.store import Store
from bluedove.store import keys as K
from bluedove.store.redis_cluster import RedisClusterServers
from bluedove.store.server import RedisServer

_SHAPE = re.compile(r"(single)|(\d+)(?:x(\d+))?")


@dataclass(frozen=True)
class StoreShape:
    """One server (`primaries` None) or a cluster of `primaries` with `replicas` each."""

    primaries: int | None = None
    replicas: int = 1

    @property
    def label(self) -> str:
        return "single" if self.primaries is None else f"{self.primaries}x{self.replicas}"


def parse_shapes(text: str, replicas: int) -> list[StoreShape]:
    """`--compare-stores`: "single", "N" (N primaries with `replicas` each) or "NxR", by commas."""
    out = []
    for part in text.split(","):
        m = _SHAPE.fullmatch(part.strip())
        if not m or (m[2] is not None and int(m[2]) < 1):
            raise ValueError(f"--compare-stores: {part!r} is not 'single', N or NxR (N >= 1 primaries, "
                             "R replicas each)")
        out.append(StoreShape() if m[1] else StoreShape(int(m[2]), int(m[3]) if m[3] else replicas))
    return out


def shapes_from_args(args: argparse.Namespace) -> list[StoreShape]:
    """The stores to run on, from --store-cluster, --store-replicas and --compare-stores
    (ValueError naming the flag)."""
    if args.store_replicas < 0:
        raise ValueError(f"--store-replicas: {args.store_replicas}; expected 0 or more")
    if args.compare_stores is not None:
        if args.store_cluster is not None:
            raise ValueError("--store-cluster and --compare-stores exclude each other: list the cluster in "
                             "--compare-stores")
        return parse_shapes(args.compare_stores, args.store_replicas)
    if args.store_cluster is None:
        return [StoreShape()]
    if args.store_cluster < 1:
        raise ValueError(f"--store-cluster: {args.store_cluster}; a cluster needs at least 1 primary")
    return [StoreShape(args.store_cluster, args.store_replicas)]


@dataclass(frozen=True)
class StoreNode:
    """One redis-server of the bench's store: its name, port, pid, and primary or replica."""

    name: str  # "redis" (one server); "redis-p1"… primaries, "redis-r1"… replicas
    port: int
    pid: int
    primary: bool


class BenchStore:
    """The store of one bench run, started in `data_dir`."""

    def __init__(self, data_dir: Path, shape: StoreShape) -> None:
        self.shape = shape
        self.server: RedisServer | None = None
        self.cluster: RedisClusterServers | None = None
        if shape.primaries is None:
            self.server = RedisServer(data_dir / "redis")
        else:
            self.cluster = RedisClusterServers(data_dir / "redis-cluster", primaries=shape.primaries,
                                               replicas=shape.replicas)

    def start(self) -> "BenchStore":
        if self.server:
            self.server.start()
        else:
            self.cluster.start(timeout_s=60)
        return self

    def stop(self) -> None:
        if self.server:
            self.server.stop()
        if self.cluster:
            self.cluster.stop()

    @property
    def url(self) -> str:
        return self.server.url if self.server else self.cluster.url

    def nodes(self) -> list[StoreNode]:
        """Every redis-server of the store, primaries first (roles as they are now)."""
        if self.server:
            return [StoreNode("redis", self.server.port, self.server.proc.pid, True)]
        c = self.cluster
        prim, repl = c.primaries(), c.replicas()
        return ([StoreNode(f"redis-p{i + 1}", p, c.nodes[p].proc.pid, True) for i, p in enumerate(prim)]
                + [StoreNode(f"redis-r{i + 1}", p, c.nodes[p].proc.pid, False) for i, p in enumerate(repl)])

    def queue_nodes(self, queues: list[str]) -> dict[str, list[str]]:
        """The queues each primary holds (by its name), from the cluster's slot map."""
        primaries = [n for n in self.nodes() if n.primary]
        if self.server:
            return {primaries[0].name: list(queues)}
        owner = [""] * 16384
        for n in primaries:  # each primary's own slot ranges, from its CLUSTER NODES "myself" line
            with redis.Redis(host="127.0.0.1", port=n.port, decode_responses=True) as r:
                mine = next(line.split() for line in r.execute_command("CLUSTER", "NODES").splitlines()
                            if "myself" in line.split()[2])
            for field in mine[8:]:
                if not field.startswith("["):  # "[…]": a slot migrating
                    lo, _, hi = field.partition("-")
                    owner[int(lo):int(hi or lo) + 1] = [n.name] * (int(hi or lo) + 1 - int(lo))
        out: dict[str, list[str]] = {n.name: [] for n in primaries}
        for q in queues:
            out[owner[key_slot(K.queue_stream(q).encode())]].append(q)
        return out


class NodeProbe:
    """Snapshots of every node's CPU, every primary's command stats and backlog."""

    def __init__(self, bench_store: BenchStore, queues: list[str], loop: asyncio.AbstractEventLoop,
                 store: Store) -> None:
        self.nodes = bench_store.nodes()
        self.replicas_each = bench_store.shape.replicas if bench_store.cluster else 0
        self.queues = bench_store.queue_nodes(queues)
        self.clients = {n.name: redis.Redis(host="127.0.0.1", port=n.port) for n in self.nodes if n.primary}
        self.loop, self.store = loop, store

    def close(self) -> None:
        for r in self.clients.values():
            r.close()

    def pids(self) -> dict[str, int]:
        return {n.name: n.pid for n in self.nodes}

    def snap(self) -> dict:
        """{node: {cmd: commandstats, backlog: its queues' XLEN sum}} of every primary."""
        return {name: {"cmd": r.info("commandstats"),
                       "backlog": self.loop.run_until_complete(self.store.backlog(self.queues[name]))}
                for name, r in self.clients.items()}

    def phase(self, a: dict, b: dict, written: int, acked: int) -> dict:
        """The store's share of a phase between two of the bench's snapshots (each with "t",
        "cpu" by process and "nodes", this probe's `snap`): CPU per delivery (primaries and
        replicas apart) and each node's part. A delivery is counted once: written or drained,
        whichever the phase did more of (both, about equally, in `sustain`)."""
        dt = b["t"] - a["t"]
        deliveries = max(written, acked)
        cpu = {n.name: b["cpu"][n.name] - a["cpu"][n.name] for n in self.nodes}
        prim = sum(cpu[n.name] for n in self.nodes if n.primary)
        repl = sum(cpu[n.name] for n in self.nodes if not n.primary)
        na, nb = a["nodes"], b["nodes"]
        total_w = sum(_calls(na[n]["cmd"], nb[n]["cmd"], "xadd") for n in self.clients) or 1
        nodes = []
        for n in self.nodes:
            row = {"name": n.name, "port": n.port, "role": "primary" if n.primary else "replica",
                   "cpu_pct": round(100 * cpu[n.name] / dt, 1)}
            if n.primary:
                w = _calls(na[n.name]["cmd"], nb[n.name]["cmd"], "xadd")
                ack = w - (nb[n.name]["backlog"] - na[n.name]["backlog"])
                row.update({"queues": len(self.queues[n.name]), "written_per_s": round(w / dt),
                            "acked_per_s": round(ack / dt), "share_written": round(w / total_w, 3),
                            "scripts_per_s": round(_calls(na[n.name]["cmd"], nb[n.name]["cmd"], "evalsha") / dt),
                            "cpu_us_per_delivery": _per(cpu[n.name], max(w, ack))})
            nodes.append(row)
        return {"primaries": len(self.clients), "replicas_each": self.replicas_each,
                "redis_cpu_us_per_delivery": _per(prim, deliveries),
                "replica_cpu_us_per_delivery": _per(repl, deliveries),
                "nodes": nodes}


def _per(cpu_s: float, deliveries: int) -> float | None:
    """µs of CPU per delivery; None for a phase without deliveries (its senders stopped)."""
    return round(1e6 * cpu_s / deliveries, 2) if deliveries > 0 else None


def summed_commandstats(nodes: dict) -> dict:
    """`INFO commandstats` summed over the primaries of a `NodeProbe.snap`."""
    out: dict[str, dict] = {}
    for snap in nodes.values():
        for key, st in snap["cmd"].items():
            acc = out.setdefault(key, {"calls": 0, "usec": 0})
            acc["calls"] += st["calls"]
            acc["usec"] += st["usec"]
    return out


def _calls(a: dict, b: dict, command: str) -> int:
    key = f"cmdstat_{command}"
    return b.get(key, {}).get("calls", 0) - a.get(key, {}).get("calls", 0)


def store_line(st: dict) -> str:
    """A phase's store figures as one line of text."""
    out = f"store: redis {_us(st['redis_cpu_us_per_delivery'])} of CPU per delivery"
    if st["primaries"] > 1 or st["replicas_each"]:
        out += f" over {st['primaries']} primaries, replicas {_us(st['replica_cpu_us_per_delivery'])}; " + ", ".join(
            f"{n['name']} {100 * n['share_written']:.0f}% of writes, cpu {n['cpu_pct']:.0f}%"
            if n["role"] == "primary" else f"{n['name']} cpu {n['cpu_pct']:.0f}%" for n in st["nodes"])
    return out


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} µs"
