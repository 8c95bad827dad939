"""Prometheus metrics on real processes: every metric docs/metrics.md lists is exposed by the
process kind that owns it, the text parses with prometheus_client's parser and passes
`promtool check metrics`; with three dispatchers on one port (multiprocess mode) a counter read
over many scrapes never decreases and ends equal to what was published."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bluedove.autoscaler.local import AutoscalerThread
from bluedove.autoscaler.policy import ScalingConfig
from bluedove.local.cluster import LocalCluster
from bluedove.store.server import free_port
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import stop_up
from tests.metrics_doc import documented, family_name

pytestmark = pytest.mark.integration

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
POINT = {"x0": 120.5, "x1": 7, "x2": 3.25, "x3": 999}


def scrape(url: str) -> str:
    # A new connection each time: with several dispatchers on the port, any of them may answer.
    with httpx.Client(timeout=10) as c:
        r = c.get(url)
    assert r.status_code == 200, (url, r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("text/plain"), r.headers
    return r.text


def families(text: str) -> dict[str, object]:
    """Parsed with prometheus_client's parser: a malformed line raises here."""
    return {f.name: f for f in text_string_to_metric_families(text)}

METERED = {"name": "metered", "attributes": [{"name": "a", "min": 0, "max": 10}], "quotas": {"messages_per_s": 1}}


def promtool(text: str, what: str) -> None:
    """`promtool check metrics` reads the exposition on stdin; it fails (exit 1) on a format
    error or a naming problem (a counter without _total, a unit it does not accept, …)."""
    run = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, f"promtool check metrics on the {what}: {run.stdout}{run.stderr}"


def missing(kind: str, fams: dict) -> list[str]:
    return [name for name, (t, owners) in documented().items()
            if kind in owners and family_name(name, t) not in fams]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("metrics"), matchers=2, dispatchers=3)
    yield c
    c.stop()
    assert_no_children(c)


def test_every_documented_metric_is_exposed_parses_and_passes_promtool(cluster):
    assert shutil.which(PROMTOOL) or PROMTOOL, "promtool is installed by scripts/system-deps.sh"
    scaler = AutoscalerThread(cluster, ScalingConfig(min_matchers=2, max_matchers=2), metrics_port=0).start()
    try:
        with httpx.Client(base_url=cluster.url, timeout=10) as api:
            q = api.post("/v1/queues").json()
            api.post("/v1/subscriptions", json={"queue": q["queue"], "predicates": {"x0": [100, 200]}},
                     headers={"Authorization": f"Bearer {q['token']}"})
            for _ in range(5):
                assert api.post("/v1/messages", json={"attributes": POINT}).status_code == 202
            # A named space with a quota of 1 message/s: published into until its quota refuses.
            assert api.post("/v1/spaces", json=METERED).status_code == 201
            codes = [api.post("/v1/spaces/metered/messages", json={"attributes": {"a": 1}}).status_code
                     for _ in range(6)]
            assert 202 in codes and 429 in codes, codes
        urls = {"dispatcher": f"{cluster.url}/metrics",
                "autoscaler": f"http://{cluster.host}:{scaler.metrics_port}/metrics"}
        urls |= {f"matcher {c.name}": cluster.metrics_url(c) for c in cluster.matchers()}
        deadline = time.monotonic() + 20
        while True:  # the autoscaler's sample-based metrics appear after its first step
            texts = {what: scrape(u) for what, u in urls.items()}
            gaps = {what: missing(what.split()[0], families(t)) for what, t in texts.items()}
            if not any(gaps.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert not any(gaps.values()), f"documented but not exposed: {gaps}"
        for what, text in texts.items():
            promtool(text, what)
            kind = what.split()[0]
            info = [s for s in families(text)["bluedove_build_info"].samples]
            assert len(info) == 1 and info[0].labels["role"] == kind and info[0].value == 1, info
        # The matchers' counters add up to what was published: each message reached one matcher.
        received = sum(s.value for what, t in texts.items() if what.startswith("matcher")
                       for s in families(t)["bluedove_matcher_messages_received"].samples)
        assert received == 5
        # The space label: the default's and the named space's figures apart, its refusals by quota.
        disp = families(texts["dispatcher"])
        published = {s.labels["space"]: s.value for s in disp["bluedove_messages_published"].samples
                     if s.name.endswith("_total")}
        assert published == {"default": 5, "metered": codes.count(202)}
        assert [(s.labels, s.value) for s in disp["bluedove_quota_refused"].samples if s.name.endswith("_total")] == [
            ({"space": "metered", "quota": "messages_per_s"}, codes.count(429))]
        by_space: dict[str, float] = {}
        for what, t in texts.items():
            for x in families(t)["bluedove_matcher_space_messages_received"].samples if what.startswith("m") else ():
                by_space[x.labels["space"]] = by_space.get(x.labels["space"], 0) + x.value
        assert by_space == {"default": 5, "metered": codes.count(202)}
        # The matcher of x0 = 120.5's segment delivered into the one queue (1 subscription matched).
        written = sum(families(t)["bluedove_matcher_deliveries_written"].samples[0].value
                      for what, t in texts.items() if what.startswith("matcher"))
        assert written == 5
    finally:
        scaler.stop()


def test_a_counter_never_decreases_across_scrapes_of_three_dispatchers(cluster):
    """One thread publishes steadily through the shared port while another scrapes it 150 times
    on fresh connections (so all three dispatchers answer). The published counter read at each
    scrape must never decrease (it would, were each process to answer with its own count), and
    once publishing stops it must equal the 202s received (a lost or doubled count fails)."""
    before = _published(scrape(f"{cluster.url}/metrics"))
    accepted = 0
    stop = threading.Event()

    def publish() -> None:
        nonlocal accepted
        with httpx.Client(base_url=cluster.url, timeout=10, limits=httpx.Limits(max_keepalive_connections=0)) as api:
            while not stop.is_set():
                r = api.post("/v1/messages:batch", json={"messages": [{"attributes": POINT}] * 4})
                assert r.status_code == 202, r.text
                accepted += 4

    t = threading.Thread(target=publish)
    t.start()
    seen = []
    try:
        for _ in range(150):
            text = scrape(f"{cluster.url}/metrics")
            seen.append(_published(text))
            time.sleep(0.02)
    finally:
        stop.set()
        t.join(30)
    drops = [(a, b) for a, b in zip(seen, seen[1:]) if b < a]
    assert not drops, f"the summed counter went back: {drops[:5]}"
    assert seen[-1] > seen[0], "publishing did not show in the counter"
    final = _published(scrape(f"{cluster.url}/metrics"))
    assert final - before == accepted, (final, before, accepted)
    for _ in range(20):  # every dispatcher answers the same total
        assert _published(scrape(f"{cluster.url}/metrics")) == final


def _published(text: str) -> float:
    (s,) = [s for s in families(text)["bluedove_messages_published"].samples
            if s.name.endswith("_total") and s.labels["space"] == "default"]
    return s.value


def test_matcher_metrics_port_out_of_range_is_a_usage_error():
    run = subprocess.run([sys.executable, "-m", "bluedove", "matcher", "--id", "m1", "--port", "1", "--store",
                          "redis://127.0.0.1:1/0", "--metrics-port", "70000"], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and "--metrics-port" in run.stderr, run.stderr


def test_up_prints_every_metrics_address_and_records_them_for_prometheus(tmp_path):
    """`bluedove up --autoscale`: each matcher's line and the autoscaler's line give a /metrics
    address that answers with that role's build info; DATA_DIR/metrics/targets.json lists the
    same addresses in file_sd form (a missing or wrong address fails)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bluedove", "up", "--matchers", "2", "--autoscale",
                             "--min-matchers", "2", "--max-matchers", "2", "--http-port", str(port),
                             "--grpc-port", "0", "--data-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("ready"):
                break
        out = "".join(lines)
        matchers = re.findall(r"matcher +(m\d) .* metrics (http://\S+/metrics)", out)
        assert [m for m, _ in matchers] == ["m1", "m2"], out
        (scaler,) = re.findall(r"autoscaler .* metrics (http://\S+/metrics)", out)
        roles = {url: "matcher" for _, url in matchers} | {scaler: "autoscaler", f"http://127.0.0.1:{port}/metrics":
                                                             "dispatcher"}
        for url, role in roles.items():
            info = families(scrape(url))["bluedove_build_info"].samples
            assert [s.labels["role"] for s in info] == [role], (url, info)
        groups = json.loads((tmp_path / "metrics" / "targets.json").read_text())
        listed = {(g["labels"]["role"], t) for g in groups for t in g["targets"]}
        assert listed == {(role, url.split("/")[2]) for url, role in roles.items()}, (listed, roles)
    finally:
        stop_up(proc, tmp_path)


def test_a_killed_dispatcher_keeps_its_counts_and_leaves_the_live_gauges(tmp_path):
    """SIGKILL one of three dispatchers: what it counted stays in the sum (the published total
    does not fall back), the supervisor drops its live gauges' file (else its memory would be
    summed forever), and its restart counts on from there. (30 publishes on fresh connections
    reach all three dispatchers but with odds of about 1 in 200,000.)"""
    c = LocalCluster(matchers=1, dispatchers=3, http_port=0, data_dir=tmp_path, quiet=True, restart=True).start()
    try:
        with httpx.Client(base_url=c.url, timeout=10, limits=httpx.Limits(max_keepalive_connections=0)) as api:
            for _ in range(30):
                assert api.post("/v1/messages", json={"attributes": POINT}).status_code == 202
            time.sleep(1.5)  # every dispatcher has ticked its process figures into the files
            victim = c.child("d2")
            pid = victim.pid
            assert list(c.metrics_dir.glob(f"gauge_livesum_{pid}.db")), sorted(os.listdir(c.metrics_dir))
            os.kill(pid, signal.SIGKILL)
            victim.proc.wait(10)
            assert c.check() == [f"dispatcher d2 died (signal {signal.SIGKILL}); restarted (restart #1)"]
            assert not list(c.metrics_dir.glob(f"gauge_livesum_{pid}.db")), "the dead one's live gauges remain"
            for _ in range(30):
                assert api.post("/v1/messages", json={"attributes": POINT}).status_code == 202
            for _ in range(30):
                assert _published(scrape(f"{c.url}/metrics")) == 60
    finally:
        c.stop()
        assert_no_children(c)
