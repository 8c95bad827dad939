"""The chart's own commands make a working cluster: rendered by Helm, run as local processes.

The chart is rendered with the real Helm engine; each workload's container command, args
and env are taken from the render and started as they are (tests/deploy/chart_pods.py says
what stands in for the kubelet and the cluster's DNS). The store is the embedded
redis-server, given as `externalRedis.url`; the autoscaler talks to kmock, an in-memory
Kubernetes API server holding the matcher StatefulSet.

What must hold:
- the rendered matcher, dispatcher and autoscaler commands form a cluster that boots itself
  on an empty store, and matches exactly (a brute-force oracle on random subscriptions);
- a rolling restart of the matcher StatefulSet (highest ordinal first, one pod at a time,
  SIGTERM with the chart's grace period, the next pod only once the restarted one is ready
  again) under steady publishing loses no accepted message and delivers none twice;
- a store that requires a password is opened by the password the chart takes from a Secret
  (externalRedis.passwordSecret), the URL in the values carrying none.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import time

import grpc
import httpx
import pytest
import redis
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bluedove.core.space import Space
from bluedove.store.server import RedisServer
from tests.deploy.chart import NAMESPACE, render
from tests.deploy.chart_pods import PodNetwork, workloads
from tests.integration.cluster_checks import EXACT, publish_until, random_workload
from tests.integration.helpers import compare, drain, new_queue, oracle
from tests.integration.test_kubernetes_backend import NS, STATEFULSETS, STS, apiserver  # noqa: F401

pytestmark = [pytest.mark.timeout(420),
              pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")]

MATCHERS = 3


async def ready(address: str, service: str) -> bool:
    try:
        async with grpc.aio.insecure_channel(address) as ch:
            r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=1)
        return r.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.aio.AioRpcError:
        return False


async def wait_for(what: str, check, net: PodNetwork, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in net.pods.values():
            if p.proc is not None and not p.alive() and p.workload.kind != "Job":
                pytest.fail(f"{p.name} exited ({p.proc.returncode}) while waiting for {what}:\n{net.tail(p)}")
        if await check():
            return
        await asyncio.sleep(0.2)
    logs = "\n".join(f"--- {p.name}\n{net.tail(p, 1500)}" for p in net.pods.values())
    pytest.fail(f"not within {timeout_s}s: {what}\n{logs}")


@pytest.fixture
async def chart_cluster(tmp_path, redis_clean_url, apiserver):
    """The chart rendered for 3 matchers, 1 dispatcher and the autoscaler; its pods started,
    and stopped afterwards. The autoscaler is held at 3 matchers (min = max): it runs, reads
    the StatefulSet's scale from the API server, and has nothing to change."""
    k, server = apiserver
    k.objects[STATEFULSETS, NS, STS].raw["spec"]["replicas"] = MATCHERS
    values = {
        "externalRedis": {"url": redis_clean_url},
        "redis": {"enabled": False},
        "dispatcher": {"replicas": 1},
        "autoscaler": {"enabled": True, "minMatchers": MATCHERS, "maxMatchers": MATCHERS},
        # Exactness and restarts, not API keys (tests/integration/test_api_keys.py): open publishing.
        "auth": {"mode": "off"},
        # A leaving matcher serves what it handed off for 2 s, not the default 10, before it exits
        # (dispatchers and matchers alike): each restart of the rolling restart is that much shorter.
        "matcher": {"handoffGraceSeconds": 2},
        # A space besides default: the dispatcher makes it at its start (--spaces).
        "spaces": [{"name": "orders", "attributes": [{"name": "status", "type": "string"}], "partition": ["status"]}],
    }
    manifests = render(values).objects
    net = PodNetwork(manifests, NAMESPACE, tmp_path, subnet=random.randrange(64, 250))
    loads = workloads(manifests)
    sts = loads[STS]
    assert sts.replicas is None, "with the autoscaler on, the chart leaves the replicas to it"
    assert (sts.kind, NS) == ("StatefulSet", NAMESPACE)
    matchers = [net.add_pod(sts, f"{sts.name}-{i}") for i in range(MATCHERS)]
    dispatcher = net.add_pod(loads["bluedove-dispatcher"], "bluedove-dispatcher-7c9d5-x1k2q")
    scaler = net.add_pod(loads["bluedove-autoscaler"], "bluedove-autoscaler-5f6b7-p9z8w")
    kubeconfig = tmp_path / "kubeconfig"  # outside a cluster the autoscaler reads one
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": f"http://127.0.0.1:{server.port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "u"}}]}))
    try:
        for p in [*matchers, dispatcher]:
            net.start(p)
        net.start(scaler, {"KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)})
        yield net, sts, matchers, dispatcher, scaler, k
    finally:
        await asyncio.to_thread(net.stop_all)


def container_port(pod, name: str) -> int:
    return next(p["containerPort"] for p in pod.workload.container["ports"] if p["name"] == name)


async def test_the_charts_commands_make_a_cluster_that_matches_exactly_and_survives_a_rolling_restart(
        chart_cluster):
    net, sts, matchers, dispatcher, scaler, k = chart_cluster
    grpc_port = container_port(matchers[0], "grpc")
    url = f"http://{dispatcher.ip}:{container_port(dispatcher, 'http')}"

    async def all_ready() -> bool:
        oks = [await ready(f"{m.ip}:{grpc_port}", "bluedove.ready") for m in matchers]
        if not all(oks):
            return False
        async with httpx.AsyncClient(timeout=2) as c:
            try:
                return (await c.get(f"{url}/readyz")).status_code == 200
            except httpx.TransportError:
                return False

    await wait_for("every matcher ready and the dispatcher ready", all_ready, net, 90)
    scale_reads = [r for r in k if r.url.path.endswith(f"/statefulsets/{STS}/scale")]
    assert scale_reads and scaler.alive(), f"the autoscaler did not reach the API server:\n{net.tail(scaler)}"

    async with httpx.AsyncClient(base_url=url, timeout=10) as c:
        cluster = (await c.get("/v1/cluster")).json()
    owners = {m["id"] for m in cluster["members"] if m.get("role", "matcher") == "matcher" and not m["idle"]}
    assert owners == {m.name for m in matchers}, cluster
    async with httpx.AsyncClient(base_url=url, timeout=10) as c:  # the chart's space, made by the dispatcher
        orders = (await c.get("/v1/spaces/orders")).json()
    assert orders["partition"] == ["status"] and orders["state"] == "active", orders

    # Exactness through the chart's dispatcher, against the brute-force oracle.
    rng = random.Random(13)
    space = Space.from_json(cluster["space"])
    with httpx.Client(base_url=url, timeout=30) as api:
        queues = dict(new_queue(api) for _ in range(20))
    subs, messages, got = await random_workload(url, queues, rng, n_subs=600, n_messages=600)
    assert compare(oracle(space, subs, messages), got) == EXACT

    # A rolling restart under steady publishing (from a second before the first restart to three
    # seconds after the last pod is ready again), as the StatefulSet controller does it.
    grace = sts.pod_spec["terminationGracePeriodSeconds"]
    steady: dict = {}
    refused: list = []
    restarted = asyncio.Event()
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        publishing = asyncio.create_task(publish_until(client, rng, restarted, steady, refused, rate=25))
        await asyncio.sleep(1.0)
        for m in reversed(matchers):
            code = await asyncio.to_thread(net.terminate, m, grace + 5)
            assert code == 0, f"{m.name} did not leave cleanly on SIGTERM ({code}):\n{net.tail(m)}"
            net.start(m)
            await wait_for(f"{m.name} ready again", lambda m=m: ready(f"{m.ip}:{grpc_port}", "bluedove.ready"),
                           net, 90)
        restarted.set()
        sent = await publishing
        assert len(steady) == sent  # every publish accepted, retried with its id if refused
        got = await drain(client, queues)
    assert compare(oracle(space, subs, steady), got) == EXACT


async def test_a_password_from_a_secret_opens_a_store_that_requires_one(tmp_path):
    """A redis-server requiring a password; the URL in the values has none. Rendered without
    externalRedis.passwordSecret, the matcher cannot write to the store (NOAUTH): nothing is
    stored while it runs. Rendered with it, the Secret's password reaches the pod as
    BLUEDOVE_STORE_PASSWORD and the matcher boots the table (ready, the store no longer empty).
    Skipped until the store client reads BLUEDOVE_STORE_PASSWORD (it lands from another branch)."""
    pytest.importorskip("bluedove.store.client")
    server = RedisServer(tmp_path / "redis").start()
    admin = redis.Redis(port=server.port, password="s3cret pw")
    try:
        redis.Redis(port=server.port).config_set("requirepass", "s3cret pw")
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "store-pw", "namespace": NAMESPACE},
                  "stringData": {"password": "s3cret pw"}}
        for with_password in (False, True):
            external = {"url": server.url} | ({"passwordSecret": "store-pw"} if with_password else {})
            manifests = render({"redis": {"enabled": False}, "externalRedis": external,
                                "autoscaler": {"enabled": False}, "matcher": {"replicas": 1}}).objects
            net = PodNetwork([*manifests, secret], NAMESPACE, tmp_path / f"pods-{with_password}",
                             subnet=random.randrange(64, 250))
            sts = workloads(manifests)[STS]
            pod = net.add_pod(sts, f"{sts.name}-0")
            assert ("BLUEDOVE_STORE_PASSWORD" in pod.env) is with_password
            address = f"{pod.ip}:{container_port(pod, 'grpc')}"
            try:
                net.start(pod)
                if with_password:
                    await wait_for("the matcher ready on the password-protected store",
                                   lambda: ready(address, "bluedove.ready"), net, 120)
                    assert admin.dbsize() > 0
                else:
                    # Until the matcher gives up on the store (a refused password ends its wait
                    # at once), however long a loaded machine makes its start take.
                    deadline = time.monotonic() + 60
                    while time.monotonic() < deadline and pod.alive() and "Authentication" not in net.tail(pod, 20_000):
                        assert not await ready(address, "bluedove.ready"), "ready without the store's password"
                        await asyncio.sleep(0.5)
                    assert admin.dbsize() == 0, "something was stored without the password"
                    assert "Authentication" in net.tail(pod, 20_000), "refused for another reason than the password"
            finally:
                await asyncio.to_thread(net.stop_all)
    finally:
        admin.close()
        server.stop()
