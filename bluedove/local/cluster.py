"""A local cluster as real OS processes: embedded redis-server, matchers, dispatchers.

Each role runs as `bluedove <role> …` so `ps` shows what is what. The supervisor reports a
child that dies and starts it again (same id and port); stopping sends SIGTERM to all and
SIGKILL to any that does not exit in time, so nothing is left behind.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.multiprocess import mark_process_dead

from bluedove.core.partition.bootstrap import ensure_table
from bluedove.core.partition.modes import MPARTITION
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import default_space, read_space_file
from bluedove.local.child import Child, bluedove_command
from bluedove.local.compiled import compile_once
from bluedove.local.cpu_quota import CpuQuota
from bluedove.runtime import tls
from bluedove.runtime.settings import DispatcherSettings, TlsSettings, from_env
from bluedove.runtime.telemetry import MULTIPROC_ENV
from bluedove.store import Store
from bluedove.store.redis_cluster import RedisClusterServers
from bluedove.store.server import RedisServer, free_port, port_in_use
from bluedove.store.spaces import SpaceStore


class LocalCluster:
    """A local cluster's processes: its store (unless given one), matchers and dispatchers."""

    def __init__(self, matchers: int = 4, dispatchers: int = 1, http_port: int = 8080, grpc_port: int = 0,
                 data_dir: str | Path = ".bluedove", store: str | None = None, space_file: str | None = None,
                 policy: str = "adaptive", host: str = "127.0.0.1", restart: bool = True,
                 matcher_env: dict[str, str] | None = None, quiet: bool = False, deliver: str = "store",
                 partition: str | None = None, matcher_ids: list[str] | None = None,
                 sample_rate: float = 0.0, sample_dir: str | Path | None = None,
                 seed: dict[str, Any] | None = None, store_cluster: int | None = None, auth: str | None = None,
                 matcher_net: dict[str, tuple[str, list[str]]] | None = None,
                 tls_files: TlsSettings | None = None, child_env: dict[str, str] | None = None,
                 matcher_cpu: float | None = None, dispatcher_cpu: float | None = None) -> None:
        if store is not None and store_cluster is not None:
            raise ValueError("store and store_cluster exclude each other: one names a running store, "
                             "the other starts one")
        self.n_matchers = matchers
        # The matchers' ids (None: m1..mN); a test names them as a StatefulSet names its pods.
        self.matcher_ids = matcher_ids
        self.seed = seed  # the first table's layout (bluedove/core/partition/seeds.py); None: equal widths
        # Matchers on their own network: {id: (the host it binds and is reached at, the command
        # prefix that runs it there, e.g. `ip netns exec NS`)} — the fault bench's partitions.
        self.matcher_net = matcher_net or {}
        self.n_dispatchers = dispatchers
        self.http_port = http_port or free_port()
        self.grpc_port = grpc_port or free_port()  # one port for every dispatcher
        self.data_dir = Path(data_dir)
        self.store_url = store
        # None: one private redis-server (DATA_DIR/redis); N: a private Redis Cluster of N primaries
        # with a replica each (DATA_DIR/redis-cluster). Either only when `store` is None.
        self.store_cluster = store_cluster
        # the default space, and its log as the space file declares it (None: not said)
        self.space, self.retention_s = read_space_file(space_file) if space_file else (default_space(), None)
        self.policy, self.host, self.restart = policy, host, restart
        self.matcher_env = matcher_env or {}
        # Environment of every matcher and dispatcher (BLUEDOVE_* settings: `bluedove up`'s bounds flags).
        self.child_env = child_env or {}
        self.quiet = quiet
        self.deliver = deliver  # "store", or "count": matchers match without writing (benchmarks)
        # Every matcher and dispatcher gets the same mode (None: BLUEDOVE_PARTITION, else mpartition).
        self.partition = from_env(DispatcherSettings, partition=partition).partition
        # API keys on every dispatcher: "off" or "keys" (None: BLUEDOVE_AUTH, else off).
        self.auth = from_env(DispatcherSettings, auth=auth).auth
        # The dispatchers' message sample (0 = off), by default in DATA_DIR/samples.
        self.sample_rate = sample_rate
        self.sample_dir = Path(sample_dir) if sample_dir else self.data_dir / "samples"
        self.redis: RedisServer | None = None
        self.redis_cluster: RedisClusterServers | None = None
        self.children: list[Child] = []
        self.table: SegmentTable | None = None
        self.addresses: dict[str, str] = {}  # matcher name -> gRPC address
        self.metrics_ports: dict[str, int] = {}  # matcher name -> its /metrics port
        # The dispatchers' shared Prometheus files (prometheus_client's multiprocess mode:
        # they share a port, so whichever answers a scrape sums them all; docs/metrics.md).
        self.metrics_dir = self.data_dir / "metrics" / "dispatchers"
        self.extra_targets: dict[str, str] = {}  # role -> host:port of another /metrics
        # TLS on every port of every process, mutual inside with a CA (bluedove/runtime/tls.py); None: plain.
        self.tls = tls_files if tls.enabled(tls_files) else None
        # CPU cores of each matcher / dispatcher, every process in a cgroup of its own as a pod under its
        # CPU limit (docs/operations.md, "Matchers as pods on one machine"); a role not here runs uncapped.
        self.cpu = {r: CpuQuota(n) for r, n in (("matcher", matcher_cpu), ("dispatcher", dispatcher_cpu))
                    if n is not None}

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def grpc_url(self) -> str:
        """The SDK's URL of the gRPC API (grpcs:// with TLS)."""
        return f"{'grpcs' if self.tls else 'grpc'}://{self.grpc_address}"

    def _tls_args(self) -> list[str]:
        if self.tls is None:
            return []
        files = (("--tls-cert", self.tls.tls_cert), ("--tls-key", self.tls.tls_key), ("--tls-ca", self.tls.tls_ca))
        name = ["--tls-server-name", self.tls.tls_server_name] if self.tls.tls_server_name else []
        return [x for flag, path in files if path for x in (flag, str(Path(path).resolve()))] + name

    def _open(self, path: str, timeout_s: float) -> http.client.HTTPResponse:
        """GET one of the dispatchers' URLs (trusting the cluster's CA with TLS)."""
        ctx = tls.client_context(self.tls.tls_ca) if self.tls else None
        resp: http.client.HTTPResponse = urllib.request.urlopen(f"{self.url}{path}", timeout=timeout_s, context=ctx)
        return resp

    def say(self, *args: object) -> None:
        if not self.quiet:
            print(*args, flush=True)

    # -- start -----------------------------------------------------------------------------
    def start(self, timeout_s: float = 60.0) -> "LocalCluster":
        for flag, wanted in (("--http-port", self.http_port), ("--grpc-port", self.grpc_port)):
            if port_in_use(self.host, wanted):
                raise RuntimeError(f"{flag} {wanted}: {self.host}:{wanted} is already in use (another cluster?)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        logs = self.data_dir / "logs"
        logs.mkdir(exist_ok=True)
        shutil.rmtree(self.metrics_dir, ignore_errors=True)  # counters of an earlier run would add up
        self.metrics_dir.mkdir(parents=True)
        try:
            store_url = self.start_store()
            space_args = self._space_args()
            table, self.addresses = self._init_table(store_url)
            self.table = table
            cmd = bluedove_command()
            owners = [a for m, a in self.addresses.items() if m in table.members]
            for m, address in self.addresses.items():
                port = address.rsplit(":", 1)[1]
                # A matcher beyond the owners joins by split: it meets them at their new addresses.
                joins = [] if m in table.members else [x for a in owners for x in ("--join", a)]
                self.metrics_ports[m] = free_port()
                self.children.append(Child("matcher", m, self.matcher_net.get(m, ("", []))[1] + cmd + [
                    "matcher", "--id", m, "--host", self.matcher_host(m), "--port", port, "--store", store_url,
                    "--deliver", self.deliver, "--partition", self.partition, *space_args, *joins,
                    "--metrics-port", str(self.metrics_ports[m]), *self._tls_args(),
                ], logs / f"{m}.log", extra_env={**self.child_env, **self.matcher_env}, cpu=self.cpu.get("matcher")))
            for j in range(self.n_dispatchers):
                d = f"d{j + 1}"
                self.children.append(Child("dispatcher", d, cmd + [
                    "dispatcher", "--id", d, "--host", self.host, "--http-port", str(self.http_port),
                    "--grpc-port", str(self.grpc_port), "--gossip-port", str(free_port()),
                    "--store", store_url, "--policy", self.policy, "--partition", self.partition,
                    "--auth", self.auth, *space_args, *self._sample_args(), *self._tls_args(),
                ], logs / f"{d}.log", extra_env={**self.child_env, MULTIPROC_ENV: str(self.metrics_dir.resolve())},
                    cpu=self.cpu.get("dispatcher")))
            compile_once()  # before the children, which then load it from the cache
            for c in self.children:
                c.start()
            self.write_targets()
            self.wait_ready(timeout_s)
            self.table = self._stored_table(store_url) or table  # with the addresses the matchers registered
        except BaseException:
            self.stop()
            raise
        return self

    def matcher_host(self, m: str) -> str:
        return self.matcher_net[m][0] if m in self.matcher_net else self.host

    def start_store(self) -> str:
        """The store's URL; starts the private one first unless `store` named one (or it runs)."""
        if self.store_url is None:
            if self.store_cluster is not None:
                self.redis_cluster = RedisClusterServers(self.data_dir / "redis-cluster",
                                                         primaries=self.store_cluster, replicas=1).start()
                self.store_url = self.redis_cluster.url
            else:
                self.redis = RedisServer(self.data_dir / "redis").start()
                self.store_url = self.redis.url
        return self.store_url

    def metrics_url(self, c: Child) -> str:
        """Where a child's Prometheus metrics are (dispatchers: the port they share)."""
        if c.role == "matcher":
            return f"http://{self.host}:{self.metrics_ports[c.name]}/metrics"
        return f"{self.url}/metrics"

    def write_targets(self) -> Path:
        """DATA_DIR/metrics/targets.json: every /metrics address, in Prometheus' file_sd format
        (`file_sd_configs`), labelled by role; `extra_targets` adds others (the autoscaler's)."""
        extra = self.extra_targets
        groups = [{"targets": [f"{self.host}:{self.http_port}"], "labels": {"role": "dispatcher"}}]
        groups += [{"targets": [f"{self.host}:{p}"], "labels": {"role": "matcher", "matcher": m}}
                   for m, p in self.metrics_ports.items()]
        groups += [{"targets": [a], "labels": {"role": role}} for role, a in extra.items()]
        path = self.data_dir / "metrics" / "targets.json"
        path.write_text(json.dumps(groups, indent=1))
        return path

    def _sample_args(self) -> list[str]:
        if self.sample_rate <= 0:
            return []
        return ["--sample-rate", repr(float(self.sample_rate)), "--sample-dir", str(self.sample_dir.resolve())]

    def _space_args(self) -> list[str]:
        path = self.data_dir / "space.json"
        path.write_text(json.dumps(self.space.to_json()))
        return ["--space", str(path)]

    def _init_table(self, store_url: str) -> tuple[SegmentTable, dict[str, str]]:
        """`bluedove init --members m1=HOST:P1,…` (the same function): the matchers to start, each
        with a free port. A store that already holds a table (`up` again on the same data dir)
        keeps it: its owners start again, on new ports they register themselves, and matchers
        beyond them (up to --matchers) join by split. (the table, the matchers' addresses)"""
        ids = self.matcher_ids or [f"m{i + 1}" for i in range(self.n_matchers)]
        members = {m: f"{self.matcher_host(m)}:{free_port()}" for m in ids}

        async def run() -> tuple[SegmentTable, bool]:
            store = Store(store_url)
            try:
                return (await SpaceStore(store.r).declare_default(store, self.space, self.retention_s, lambda: (
                    ensure_table(store, self.space, members, self.seed, given_from="--space"))))[0]
            finally:
                await store.close()

        table, created = asyncio.run(run())
        if created:
            return table, dict(table.members)
        self.say(f"the store already holds a table (epoch {table.epoch}, owners "
                 f"{', '.join(table.members)}): kept")
        out = {m: f"{self.host}:{free_port()}" for m in table.members}
        for m, address in members.items():  # the rest of --matchers join
            if len(out) >= self.n_matchers:
                break
            out.setdefault(m, address)
        return table, out

    def _stored_table(self, store_url: str) -> SegmentTable | None:
        async def run() -> dict[str, Any] | None:
            store = Store(store_url)
            try:
                return await store.get_table()
            finally:
                await store.close()

        return SegmentTable.from_json(raw) if (raw := asyncio.run(run())) else None

    def wait_ready(self, timeout_s: float) -> None:
        """Until /readyz answers 200 and every matcher reports ready."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            for c in self.children:
                if not c.alive() and c.restarts < 3 and c.bind_failed():
                    self._start_elsewhere(c)
                elif not c.alive():
                    tail = c.log_path.read_text()[-3000:] if c.log_path.exists() else ""
                    code = c.proc.returncode if c.proc is not None else None
                    raise RuntimeError(f"{c.name} exited during start-up (code {code}):\n{tail}")
            try:
                with self._open("/readyz", 2) as resp:
                    if resp.status == 200:
                        cluster = self.cluster_state()
                        states = [m["status"] for m in cluster["members"]]
                        if states and all(s == "alive" for s in states):
                            return
                        last = f"matchers: {states}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.2)
        raise RuntimeError(f"cluster not ready within {timeout_s}s ({last})")

    def _start_elsewhere(self, c: Child) -> None:
        """Start again, on new ports, a child whose picked port another process took first."""
        ports = c.pick_ports()
        if c.role == "matcher":  # it registers its new address in the table as it starts
            self.addresses[c.name] = f"{self.matcher_host(c.name)}:{ports['--port']}"
            self.metrics_ports[c.name] = ports["--metrics-port"]
        self.write_targets()
        c.restarts += 1
        self.say(f"{c.role} {c.name}: a port it was given was taken; starting it on {sorted(ports.values())}")
        c.start()

    def cluster_state(self) -> dict[str, Any]:
        with self._open("/v1/cluster", 5) as resp:
            state: dict[str, Any] = json.loads(resp.read())
            return state

    # -- supervise -------------------------------------------------------------------------
    def check(self) -> list[str]:
        """Report children that died; start them again if `restart`. Returns the reports."""
        events = []
        for c in self.children:
            if c.proc is not None and not c.alive():
                if c.role == "dispatcher":  # its live gauges leave the sums; its counters stay
                    # prometheus_client leaves this one unannotated
                    mark_process_dead(c.proc.pid, str(self.metrics_dir))  # type: ignore[no-untyped-call]
                code = c.proc.returncode
                how = f"signal {-code}" if code < 0 else f"exit code {code}"
                if code == 0 and c.role == "matcher":  # it left (handed its segments off): done
                    events.append(f"matcher {c.name} left the cluster")
                    c.forget()
                elif self.restart:
                    c.restarts += 1
                    c.start()
                    events.append(f"{c.role} {c.name} died ({how}); restarted (restart #{c.restarts})")
                else:
                    events.append(f"{c.role} {c.name} died ({how}); the rest keep serving")
                    c.forget()
        return events

    # -- elasticity -----------------------------------------------------------------------
    def matchers(self) -> list[Child]:
        """Matcher processes running now."""
        return [c for c in self.children if c.role == "matcher" and c.alive()]

    def add_matcher(self, extra_args: list[str] | None = None) -> Child:
        """Start one more matcher; it joins through gossip and is given segments by a split."""
        if self.partition != MPARTITION:
            raise RuntimeError(f"cannot add a matcher under partition {self.partition}: joins split mPartition's "
                               "segments, and the baselines are fixed-size")
        if self.store_url is None:
            raise RuntimeError("cannot add a matcher before the cluster's store is started")
        taken = [int(c.name[1:]) for c in self.children if c.role == "matcher"]
        name = f"m{max(taken, default=0) + 1}"
        port = free_port()
        self.metrics_ports[name] = free_port()
        seeds = [a for c in self.matchers() if (a := self.addresses.get(c.name))]
        args = bluedove_command() + ["matcher", "--id", name, "--host", self.host, "--port", str(port),
                                     "--store", self.store_url, "--deliver", self.deliver,
                                     "--metrics-port", str(self.metrics_ports[name]),
                                     *(x for a in seeds for x in ("--join", a)), *self._tls_args(),
                                     *(extra_args or [])]
        child = Child("matcher", name, args, self.data_dir / "logs" / f"{name}.log",
                      extra_env={**self.child_env, **self.matcher_env}, cpu=self.cpu.get("matcher"))
        self.addresses[name] = f"{self.host}:{port}"
        self.children.append(child)
        child.start()
        self.write_targets()
        return child

    def remove_matcher(self, name: str, timeout_s: float = 60.0) -> str:
        """Ask a matcher to leave (it hands its segments off, serves out the grace, exits)."""
        from bluedove.v1 import matcher_pb2 as pb
        from bluedove.v1 import matcher_pb2_grpc as pb_grpc

        with tls.channel(self.addresses[name], self.tls) as ch:
            reply = pb_grpc.MatcherStub(ch).Leave(pb.LeaveRequest(), timeout=timeout_s)
        if not reply.ok:
            raise RuntimeError(f"{name} could not leave: {reply.reason}")
        return f"{name} left at epoch {reply.epoch}"

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.name == name)

    def pids(self) -> dict[str, int | None]:
        return {c.name: c.pid for c in self.children}

    # -- stop ------------------------------------------------------------------------------
    def stop(self, timeout_s: float = 10.0) -> None:
        for c in self.children:
            if c.proc is not None and c.alive():
                c.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for c in self.children:
            if c.proc is None:
                continue
            try:
                c.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait()
        self.children = []
        if self.redis:
            self.redis.stop()
            self.redis = None
        if self.redis_cluster:
            self.redis_cluster.stop()
            self.redis_cluster = None
        for quota in self.cpu.values():  # the capped processes' cgroups, now empty
            quota.release_all()

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
