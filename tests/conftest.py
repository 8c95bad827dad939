"""Fixtures shared by every test package.

One section per thing a fixture provides (so far: the store, a real private redis-server).
Add new fixtures to the section they belong to, or start a new one; give each a one-line
docstring saying what it gives and how long it lives.

The store fixtures never talk to a fake Redis: a session starts one real `redis-server`
(the one `bluedove up` would use) on a free loopback port the first time a test asks for
it, and stops it at the end of the session. Tests that need an empty store ask for
`redis_clean_url`, which flushes it first.

`pytest --store-kind cluster` runs the same tests against a local Redis Cluster instead (3
primaries with a replica each, bluedove/store/redis_cluster.py): `redis_url` is then a
`redis+cluster://` URL and `redis_clean_url` flushes every primary.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bluedove.store.redis_cluster import RedisClusterServers
from bluedove.store.server import RedisServer

# -- two workers ---------------------------------------------------------------------------------


# Tests that start processes but check only what they compute (no timings beyond generous
# waits, no machine-wide process checks): the Spark job against its numpy oracle, the chart
# rendered and validated, and the integration tests of answers and exactness. They run on
# a worker of their own, beside the other process tests.
_INTEGRATION = ("api_errors", "autoscaler_heartbeat", "boot", "cli_pubsub", "client_distribution", "concurrent_leave",
                "dispatcher_gossip", "exactness", "export_catalogue", "extras", "filter_bounds", "grpc_fuzz",
                "hostile_clients", "kubernetes_backend", "lab_cli", "message_sample", "metrics", "metrics_pieces",
                "partition_baselines", "queue_bounds_api", "queue_hostile", "queue_seek", "replay", "reseed",
                "rest_fuzz", "sdk", "seeded", "spaces_changes", "spaces_clients", "spaces_exact", "spaces_grow",
                "spaces_lifecycle", "spaces_quotas", "spaces_reseed", "spaces_routes", "store", "store_bounds",
                "store_bulk", "store_durability", "store_runner", "store_kinds", "store_receipts", "store_replays",
                "store_undeliverable", "subscribe_batch", "subscription_update", "tokens", "typed_delivery",
                "typed_grpc", "up_auth", "up_store_cluster")
_DEPLOY = ("chart_contract", "chart_processes", "chart_render", "chart_store", "chart_tls", "chart_values",
           "dockerfile", "grafana")
# The Spark tests beside, but for `bluedove seed`'s (two clusters and three spark-submits), which
# even out the two workers' time.
_SPARK = ("job", "pipeline", "transforms")
BESIDE = (*(f"tests/spark/test_{n}.py" for n in _SPARK), *(f"tests/integration/test_{n}.py" for n in _INTEGRATION),
          *(f"tests/deploy/test_{n}.py" for n in _DEPLOY))
IN_PROCESS = ("tests/unit/",)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Two workers (pyproject.toml's addopts `-n 2`), two units of work, each in file order:
    the tests that start processes but check only their answers (`BESIDE`) on one; every other
    test that starts processes (clusters, redis-server, a browser), then the in-process tests
    (tests/unit), on the other. No test that times something or checks the machine's processes
    ever shares the machine with another process test, so its timings and process checks hold
    as in one process; only the first worker's CPU runs beside it. (With every process test on
    one worker CI took ~30 min, the other worker idle after ~4; with tests/unit on the first,
    that worker ran ~30 % longer than the other on a loaded machine, 2026-11-28.) When no test
    that times something is chosen (the inner loop, `tests/unit`), the two workers share the
    files instead."""
    from xdist.scheduler import LoadScopeScheduling

    class TwoUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if self._untimed_only():
                return nodeid.split("::", 1)[0]
            return "beside" if nodeid.startswith(BESIDE) else "processes"

        def _untimed_only(self) -> bool:
            if not hasattr(self, "untimed_only"):
                self.untimed_only = all(n.startswith(BESIDE + IN_PROCESS) for n in self.collection)
            return self.untimed_only

    return TwoUnits(config, log)


# -- store -----------------------------------------------------------------------------------

STORE_KINDS = ("single", "cluster")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-kind", choices=STORE_KINDS, default="single",
                     help="the store the tests' redis_url points at: one redis-server (single, the default) "
                          "or a local Redis Cluster of 3 primaries with a replica each (cluster)")


# The session's --store-kind, for helpers that are not fixtures (tests/integration/conftest.py's
# start_cluster gives its LocalCluster a store of that kind). In the environment: a conftest
# module may be imported twice, under two names, each with globals of its own.
STORE_KIND_ENV = "BLUEDOVE_TEST_STORE_KIND"


def pytest_configure(config: pytest.Config) -> None:
    os.environ[STORE_KIND_ENV] = config.getoption("--store-kind")
    if not hasattr(config, "workerinput"):  # once, in the controller, before the workers start
        _compile_the_package()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Processes a test left running under the session's temporary folder (a cluster's data
    dir): stopped, and named. A test killed by its timeout never runs its fixtures' ends, and
    what it started would load the machine under every test after it, and after the run."""
    if hasattr(session.config, "workerinput"):
        return
    import psutil

    root = str(session.config._tmp_path_factory.getbasetemp())  # the controller's: every worker's is inside
    procs = [p for p in psutil.process_iter(["cmdline"])
             if p.pid != os.getpid() and root in " ".join(p.info["cmdline"] or ())]
    left = {p.pid: " ".join(p.info["cmdline"])[:160] for p in procs}
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=1.0)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if left and reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(f"stopped {len(left)} processes the tests left running:", red=True)
        for args in left.values():
            reporter.write_line(f"  {args}")


def _compile_the_package() -> None:
    """The package's bytecode, written once. Where PYTHONDONTWRITEBYTECODE is set (as on the
    machines CI runs on), no import writes it, and every process of every cluster a test starts
    compiles each module it imports from source: ~30 % of a matcher's start-up CPU. (pip wrote
    the dependencies' bytecode at install; an editable install of this package has none.)"""
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "bluedove"), quiet=1)


@pytest.fixture(scope="session")
def store_kind(request: pytest.FixtureRequest) -> str:
    """"single" or "cluster": the session's --store-kind (for a test that holds for one kind only)."""
    return request.config.getoption("--store-kind")


@pytest.fixture(scope="session")
def redis_server(store_kind: str, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[RedisServer | RedisClusterServers]:
    """The session's store, started on first use and stopped at the session's end: a RedisServer,
    or with --store-kind cluster a RedisClusterServers (3 primaries, 1 replica each)."""
    if store_kind == "cluster":
        server = RedisClusterServers(tmp_path_factory.mktemp("redis-cluster"), primaries=3, replicas=1)
    else:
        server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer | RedisClusterServers) -> str:
    """URL of the session's store: redis://… (single) or redis+cluster://… (cluster)."""
    return redis_server.url


def flush_store(server: RedisServer | RedisClusterServers) -> None:
    """FLUSHALL on the server, or on every primary of the cluster now (their replicas follow)."""
    ports = server.primaries() if isinstance(server, RedisClusterServers) else [server.port]
    for port in ports:
        client = redis.Redis(host="127.0.0.1", port=port)
        try:
            client.flushall()
        finally:
            client.close()


@pytest.fixture
def redis_clean_url(redis_server: RedisServer | RedisClusterServers, redis_url: str) -> str:
    """`redis_url`, emptied (FLUSHALL on every primary) before the test so tests never see each
    other's keys."""
    flush_store(redis_server)
    return redis_url
