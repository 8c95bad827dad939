"""The pieces of the metrics on their own: a lone dispatcher's exposition (no multiprocess
files, as on Kubernetes) parses, passes promtool and holds every dispatcher metric of
docs/metrics.md; failovers count once each; the matcher's batch-size tally; the /metrics server
answers nothing but GET /metrics, and a metrics port already taken is refused in one line, by
the server and by the matcher's command (exit 2, naming --metrics-port), before it starts."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from bluedove.dispatcher.metrics import Metrics
from bluedove.matcher.load import BATCH_BOUNDS, Totals
from bluedove.runtime.telemetry import MULTIPROC_ENV, BuildInfo, MetricsBindError, serve_metrics
from bluedove.store.server import free_port
from tests.metrics_doc import documented, family_name

pytestmark = pytest.mark.integration


def values(text: str, family: str) -> dict[tuple, float]:
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    return {tuple(sorted(s.labels.items())): s.value for s in fams[family].samples
            if not s.name.endswith("_created")}


def test_a_lone_dispatcher_exposes_every_documented_metric_and_counts_failovers_once(monkeypatch):
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    m = Metrics()
    assert m.multiprocess_dir is None
    m.space("default").published.inc(3)
    m.tick(2)
    m.tick(2)  # the same forwarder count again: nothing more
    cluster = SimpleNamespace(table=SimpleNamespace(members={"m1": "a", "m2": "b"}))
    text = m.render(cluster, 5, {"split": 2}).decode()
    assert values(text, "bluedove_forward_failovers") == {(): 5}
    assert values(text, "bluedove_messages_published") == {(("space", "default"),): 3}
    assert values(text, "bluedove_cluster_events") == {(("action", "split"),): 2}
    assert values(text, "bluedove_cluster_matchers") == {(): 2}
    fams = {f.name for f in text_string_to_metric_families(text)}
    want = {family_name(n, t) for n, (t, owners) in documented().items() if "dispatcher" in owners}
    assert want <= fams, want - fams
    run = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_space_label_names_default_and_the_first_spaces_met_and_sums_the_rest_under_other(monkeypatch):
    """At most `metrics_spaces` named spaces get a label value of their own, the first met, for
    good; the others' figures add up under `_other`; quota refusals are counted by space and quota."""
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    m = Metrics(metrics_spaces=2)
    for space, n in (("orders", 1), ("fleet", 2), ("shop", 4), ("orders", 8), ("traffic", 16), ("default", 32)):
        m.space(space).published.inc(n)
    m.space("shop").subscriptions.inc(5)
    m.refused_by_quota("traffic", "messages_per_s")
    m.refused_by_quota("orders", "subscriptions")
    text = m.render(SimpleNamespace(table=None), 0, {}).decode()
    assert values(text, "bluedove_messages_published") == {
        (("space", "default"),): 32, (("space", "orders"),): 9, (("space", "fleet"),): 2, (("space", "_other"),): 20}
    assert values(text, "bluedove_subscriptions_created") == {
        (("space", "default"),): 0, (("space", "orders"),): 0, (("space", "fleet"),): 0, (("space", "_other"),): 5}
    assert values(text, "bluedove_quota_refused") == {(("quota", "messages_per_s"), ("space", "_other")): 1,
                                                      (("quota", "subscriptions"), ("space", "orders")): 1}
    assert len(m.labels) == 2 and m.space("shop") is m.space("traffic")  # one child set for `_other`


def test_totals_file_each_batch_under_its_bucket():
    t = Totals(2)
    for n in (1, 3, 1024, 5000):
        t.batch(n, written=2)
    assert t.written == 8 and t.batch_messages == 1 + 3 + 1024 + 5000
    expect = [0] * (len(BATCH_BOUNDS) + 1)
    expect[BATCH_BOUNDS.index(1)] += 1
    expect[BATCH_BOUNDS.index(4)] += 1  # 3 goes under the bound 4
    expect[BATCH_BOUNDS.index(1024)] += 1
    expect[-1] += 1  # above the last bound
    assert t.batches == expect


@pytest.mark.parametrize("request_line, status", [
    (b"GET /metrics HTTP/1.1", b"200"), (b"GET /metrics?x=1 HTTP/1.1", b"200"),
    (b"GET / HTTP/1.1", b"404"), (b"POST /metrics HTTP/1.1", b"405"),
])
async def test_the_metrics_server_answers_only_get_metrics(request_line, status):
    r = CollectorRegistry()
    r.register(BuildInfo("matcher"))
    server = await serve_metrics("127.0.0.1", 0, r)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(request_line + b"\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert answer.split(b" ", 2)[1] == status, answer
        assert (b'role="matcher"' in answer) == (status == b"200")
    finally:
        await server.close()


def test_a_metrics_port_taken_is_refused_in_one_line_before_the_matcher_starts():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(MetricsBindError, match=f"127.0.0.1:{port}"):
            asyncio.run(serve_metrics("127.0.0.1", port, CollectorRegistry()))
        # The store's address leads nowhere: a matcher that went past the metrics port would
        # wait there instead of exiting.
        r = subprocess.run([sys.executable, "-m", "bluedove", "matcher", "--id", "m1", "--port", str(free_port()),
                            "--store", f"redis://127.0.0.1:{free_port()}/0", "--metrics-port", str(port)],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert f"--metrics-port {port}" in r.stderr and "Traceback" not in r.stderr, r.stderr
