"""A real cluster with TLS on every port and mutual TLS inside (certificates made in the test).

Publishing over https:// REST and grpcs:// through the SDK delivers exactly what the oracle
says; a client that does not trust the CA, and a plain-text client, are refused at the public
ports; an internal port (a matcher's, a dispatcher's gossip port) refuses a client without a
certificate, and one whose certificate another CA signed; gossip runs and a killed matcher's
segments are taken over under mutual TLS, after which messages are still matched exactly."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bluedove.client import Client, Unavailable
from bluedove.core.partition.segments import SegmentTable
from bluedove.local.cluster import bluedove_command
from bluedove.local.selfsigned import issue, make_ca
from bluedove.runtime import tls
from bluedove.runtime.settings import TlsSettings
from bluedove.store.server import free_port
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc
from tests.integration.cluster_checks import random_point, subscribe_random
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import compare, drain, oracle, output_until_ready, stop_up

pytestmark = pytest.mark.integration
DIMS = ("x0", "x1", "x2", "x3")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ours = issue(d / "ours", make_ca(d / "ours"))
    theirs = issue(d / "theirs", make_ca(d / "theirs", "another CA"))
    return TlsSettings(ours.tls_cert, ours.tls_key, ours.tls_ca), TlsSettings(theirs.tls_cert, theirs.tls_key,
                                                                              theirs.tls_ca)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, pki):
    c = start_cluster(tmp_path_factory.mktemp("tls"), matchers=3, tls_files=pki[0])
    yield c
    c.stop()
    assert_no_children(c)


def api(cluster, ca: str) -> httpx.Client:
    return httpx.Client(base_url=cluster.url, timeout=30, verify=tls.client_context(ca))


def publish_and_check(cluster, ca: str, rng: random.Random, prefix: str, n: int) -> None:
    """Subscribe over https, publish n messages half over https and half over grpcs (SDK),
    drain: exactly the oracle's deliveries."""
    with api(cluster, ca) as rest:
        queues, subs = subscribe_random(rest, rng, 5, 200)
    bounds = [v for _, preds in subs.values() for r in preds.values() for v in r]  # messages on the edges too
    messages = {f"{prefix}-{i}": random_point(rng, bounds) for i in range(n)}
    halves = [(cluster.url, list(messages.items())[:n // 2]), (cluster.grpc_url, list(messages.items())[n // 2:])]
    for url, part in halves:
        with Client(url, tls_ca=ca) as client:
            ids = client.publish_many([{"attributes": attrs, "payload": None, "id": mid} for mid, attrs in part])
            assert ids == [mid for mid, _ in part]

    async def collect():
        async with httpx.AsyncClient(base_url=cluster.url, timeout=30, verify=tls.client_context(ca)) as client:
            return await drain(client, queues)

    got = asyncio.run(collect())
    points = {mid: tuple(attrs[d] for d in DIMS) for mid, attrs in messages.items()}
    expected = oracle(cluster.space, subs, points)
    assert expected, "the workload matched nothing: the check would be empty"
    assert compare(expected, got) == {"missing": [], "unexpected": [], "duplicates": [], "wrong_subscriptions": []}


def test_https_and_grpcs_publishes_are_matched_exactly(cluster, pki):
    assert cluster.url.startswith("https://") and cluster.grpc_url.startswith("grpcs://")
    publish_and_check(cluster, pki[0].tls_ca, random.Random(11), "tls", 300)


def test_public_ports_refuse_untrusting_and_plain_clients(cluster, pki):
    ours, theirs = pki
    host_port = cluster.url.removeprefix("https://")
    for url in (cluster.url, cluster.grpc_url):
        with Client(url, tls_ca=theirs.tls_ca, retries=0, timeout_s=5) as client:  # does not trust our CA
            with pytest.raises(Unavailable):
                client.space()
    with Client(f"http://{host_port}", retries=0, timeout_s=5) as client:  # plain HTTP to the TLS port
        with pytest.raises(Unavailable):
            client.space()
    with Client(f"grpc://{cluster.grpc_address}", retries=0, timeout_s=5) as client:  # plain gRPC
        with pytest.raises(Unavailable):
            client.space()
    # No client certificate is asked on the public ports: trusting the CA is enough.
    with Client(cluster.grpc_url, tls_ca=ours.tls_ca) as client:
        assert [d["name"] for d in client.space()["dimensions"]] == list(DIMS)
    # The CLI: --tls-ca trusts the CA; without it the system's roots refuse the certificate.
    cmd = bluedove_command() + ["publish", "--url", cluster.url, "--x0", "1", "--x1", "2", "--x2", "3", "--x3", "4"]
    ok = subprocess.run(cmd + ["--tls-ca", ours.tls_ca], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and len(ok.stdout.strip()) == 32, ok.stderr  # the message's id
    env = {k: v for k, v in os.environ.items() if k != "BLUEDOVE_TLS_CA"}
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr, refused.stderr
    ok_env = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                            env={**env, "BLUEDOVE_TLS_CA": ours.tls_ca})
    assert ok_env.returncode == 0, ok_env.stderr


def _internal_addresses(cluster) -> list[str]:
    d = next(c for c in cluster.children if c.role == "dispatcher")
    gossip = d.args[d.args.index("--gossip-port") + 1]
    return [*cluster.addresses.values(), f"{cluster.host}:{gossip}"]


def test_internal_ports_are_mutual_tls(cluster, pki):
    ours, theirs = pki

    async def status(address: str, ch: grpc.aio.Channel):
        async with ch:
            try:
                if address in cluster.addresses.values():
                    r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
                    return r.status
                # a dispatcher's gossip port serves Gossip alone: an unknown method means we got in
                await pb_grpc.MatcherStub(ch).Report(pb.ReportRequest(), timeout=5)
            except grpc.aio.AioRpcError as exc:
                return exc.code()

    async def run():
        for address in _internal_addresses(cluster):
            got_in = await status(address, tls.aio_channel(address, ours))
            assert got_in in (health_pb2.HealthCheckResponse.SERVING, grpc.StatusCode.UNIMPLEMENTED), address
            ca_only = grpc.ssl_channel_credentials(root_certificates=Path(ours.tls_ca).read_bytes())
            refused = {
                "no client certificate": grpc.aio.secure_channel(address, ca_only),
                "another CA's certificate": tls.aio_channel(address, TlsSettings(theirs.tls_cert, theirs.tls_key,
                                                                                  ours.tls_ca)),
                "plain text": tls.aio_channel(address, None),
            }
            for why, ch in refused.items():
                assert await status(address, ch) == grpc.StatusCode.UNAVAILABLE, (address, why)

    asyncio.run(run())
    # Kubernetes' probes cannot speak TLS to gRPC: the plain metrics port answers them instead.
    for m, port in cluster.metrics_ports.items():
        for path in ("/healthz", "/readyz"):
            r = httpx.get(f"http://{cluster.host}:{port}{path}", timeout=5)
            assert r.status_code == 200, (m, path, r.text)


async def _views(addresses: list[str], files) -> list[tuple[SegmentTable, dict[str, str]]]:
    out = []
    for a in addresses:
        async with tls.aio_channel(a, files) as ch:
            r = await pb_grpc.MatcherStub(ch).GetTable(pb.TableRequest(), timeout=2)
        out.append((SegmentTable.from_json(json.loads(r.table_json)), {m.id: m.status for m in r.members}))
    return out


def test_gossip_and_takeover_under_mutual_tls(cluster, pki):
    """Last in the module: it kills m3. Gossip over mTLS sees every member alive, then m3 dead;
    its segments are taken over (the hand-off's calls are mTLS too) and matching stays exact."""
    ours = pki[0]
    survivors = [a for m, a in cluster.addresses.items() if m != "m3"]
    views = asyncio.run(_views(list(cluster.addresses.values()), ours))
    assert all(set(v[1]) >= {"m1", "m2", "m3"} and set(v[1].values()) == {"alive"} for v in views), views
    os.kill(cluster.child("m3").pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        views = asyncio.run(_views(survivors, ours))
        if all(v[1].get("m3") == "dead" and "m3" not in v[0].members for v in views):
            break
        assert time.monotonic() < deadline, f"no takeover of m3 within 60 s: {[(v[0].epoch, v[1]) for v in views]}"
        time.sleep(0.2)
    epoch = max(v[0].epoch for v in views)
    with api(cluster, ours.tls_ca) as rest:  # the dispatcher learns the table by gossip, over mTLS
        deadline = time.monotonic() + 30
        while rest.get("/v1/cluster").json()["epoch"] < epoch:
            assert time.monotonic() < deadline, f"the dispatcher never adopted epoch {epoch}"
            time.sleep(0.2)
    publish_and_check(cluster, ours.tls_ca, random.Random(12), "after", 200)


def test_up_with_self_signed_tls_serves_https_and_grpcs(tmp_path):
    """`bluedove up --tls self-signed`: a CA and a certificate in DATA_DIR/tls, every process
    started with them, https:// and grpcs:// printed, and the SDK trusting the CA gets through."""
    port, grpc_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bluedove", "up", "--matchers", "1", "--http-port", str(port),
                             "--grpc-port", str(grpc_port), "--data-dir", str(tmp_path), "--tls", "self-signed"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = output_until_ready(proc)
        ca = tmp_path / "tls" / "ca.pem"
        assert f"self-signed CA {ca}" in out, out
        assert (f"REST API    https://127.0.0.1:{port}" in out
                and f"gRPC API    grpcs://127.0.0.1:{grpc_port}" in out), out
        for pid in (int(p) for p in re.findall(r"pid (\d+)", out)):
            assert f"--tls-ca\0{ca}" in Path(f"/proc/{pid}/cmdline").read_text(), pid
        for url in (f"https://127.0.0.1:{port}", f"grpcs://127.0.0.1:{grpc_port}"):
            with Client(url, tls_ca=str(ca)) as client:
                q = client.create_queue()
                sub = client.subscribe(q, x0=(0, 10))
                client.publish({"x0": 5, "x1": 1, "x2": 1, "x3": 1}, url)
                got = q.deliveries(wait=5)
                assert [(d.payload, d.subscriptions) for d in got] == [(url, [sub.id])]
    finally:
        stop_up(proc, tmp_path)


@pytest.mark.parametrize("flags, says", [
    (["--tls", "self-signed", "--tls-ca", "/etc/hostname"], "--tls self-signed makes its own files"),
    (["--tls-cert", "/no/cert.pem", "--tls-key", "/no/key.pem"], "--tls-cert /no/cert.pem: no such file"),
])
def test_up_refuses_bad_tls_flags_before_starting_anything(tmp_path, flags, says):
    r = subprocess.run([sys.executable, "-m", "bluedove", "up", "--data-dir", str(tmp_path), *flags],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert not (tmp_path / "logs").exists()  # nothing was started
