"""The store's tests once more, against a local Redis Cluster (3 primaries with a
replica each): `pytest --store-kind cluster` on those files, in a pytest of its own, so that
the one test command runs both kinds of store. The whole integration suite takes the option
too (docs/operations.md, "A local Redis Cluster")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
# The store's own tests and the matcher's delivery queue: what the cluster's slots change.
# End to end on a cluster, exactness is test_store_cluster.py's (a primary killed under steady
# publishing) and test_up_store_cluster.py's. (Every other integration test runs on a cluster
# with `pytest --store-kind cluster`; the one test command keeps to these for CI's time: with
# test_exactness.py and a replay too, this took 300 s on a loaded machine.)
ON_A_CLUSTER = [
    "test_store.py", "test_store_deliveries.py", "test_store_bounds.py", "test_store_bulk.py", "test_store_series.py",
    "test_store_wakeups.py", "test_store_replays.py", "test_matcher_queue.py",
]


@pytest.mark.timeout(900)
def test_the_store_tests_pass_on_a_redis_cluster(store_kind, tmp_path):
    if store_kind == "cluster":
        pytest.skip("this session runs every test on a cluster already")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-n", "0", "-q", "-x", "-p", "no:cacheprovider",
                             "--store-kind", "cluster", "--basetemp", str(tmp_path / "t"),
                             *(str(HERE / f) for f in ON_A_CLUSTER)],
                            cwd=HERE.parent.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        out, _ = proc.communicate(timeout=780)
    except subprocess.TimeoutExpired:
        # Interrupted as Ctrl-C does, so that its fixtures stop their clusters: killed, it would
        # leave a Redis Cluster and its matchers running under every test after this one.
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        pytest.fail("the store's tests on a Redis Cluster took over 780 s:\n" + out[-3000:])
    tail = "\n".join(out.splitlines()[-40:])
    assert proc.returncode == 0 and " passed" in tail, tail
