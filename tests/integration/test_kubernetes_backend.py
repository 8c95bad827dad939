"""The Kubernetes backend against kmock's in-memory API server over real HTTP, and its RBAC."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
import time

import httpx
import kmock
import pytest
import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from bluedove.autoscaler.kubernetes import SCALE_PATCH, KubernetesBackend, KubernetesBackendError
from bluedove.store.server import free_port
from tests.deploy.chart import render
from tests.integration.conftest import assert_no_children, start_cluster

NS, STS = "bd", "bluedove-matcher"
STATEFULSETS = "apps/v1/statefulsets"
SCALE_PATH = f"/apis/apps/v1/namespaces/{NS}/statefulsets/{STS}/scale"

pytestmark = pytest.mark.integration


# -- the emulated API server ----------------------------------------------------------------


def as_scale(k: kmock.KubernetesEmulator, req: kmock.Request) -> dict:
    """The autoscaling/v1 Scale kube-apiserver shows for the StatefulSet a request names."""
    key = (kmock.resource(STATEFULSETS), req.namespace, req.name)
    if key not in k.objects or k.objects[key].deleted:
        raise kmock.KubernetesObjectNotFoundError()
    sts = k.objects[key].raw
    replicas = sts["spec"].get("replicas", 1)
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": req.name, "namespace": req.namespace},
        # ScaleSpec.replicas is `omitempty` in the real API: zero is sent as no field.
        "spec": {"replicas": replicas} if replicas else {},
        "status": {"replicas": sts.get("status", {}).get("replicas", 0),
                   "selector": "app.kubernetes.io/name=bluedove,app.kubernetes.io/component=matcher"},
    }


def serve_scale_subresource(k: kmock.KubernetesEmulator) -> None:
    """Make kmock answer .../statefulsets/NAME/scale with Scale objects, as kube-apiserver does.

    kmock 0.8's emulator parses the subresource out of the path but then ignores it: a GET of
    .../scale answers the whole StatefulSet (kind StatefulSet), and a PATCH of .../scale merges
    its body into the StatefulSet before any reaction runs. For a body that sets only
    spec.replicas (the backend's, asserted below) that merge is exactly what the real scale
    subresource does, so the stored object is right; these two reactions, which take priority
    over the emulator's fallbacks, turn both answers into the Scale the client decodes.
    """
    scale = k[kmock.resource(STATEFULSETS), kmock.subresource("scale")]
    scale[kmock.action.FETCH] << (lambda req: as_scale(k, req))
    scale[kmock.action.UPDATE] << (lambda req: as_scale(k, req))
    k.resources[STATEFULSETS] = kmock.ResourceInfo(  # for discovery (/apis/apps/v1), as a real server lists it
        kind="StatefulSet", namespaced=True, subresources={"scale", "status"},
        verbs={"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"})


@pytest.fixture
async def apiserver():
    """kmock's Kubernetes emulator on a free loopback port, holding StatefulSet bd/bluedove-matcher (2 replicas)."""
    async with kmock.KubernetesEmulator() as k, kmock.Server(k, host="127.0.0.1") as server:
        serve_scale_subresource(k)
        k.objects[STATEFULSETS, NS, STS] = {
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": STS, "namespace": NS},
            "spec": {"replicas": 2, "serviceName": STS},
            "status": {"replicas": 2, "readyReplicas": 2},
        }
        yield k, server
        # The emulator answers a failing reaction with a 500 and keeps the error: only the
        # Kubernetes errors some tests ask for may be there.
        assert [e for e in k.errors if not isinstance(e, kmock.KubernetesError)] == []


def backend_for(server: kmock.Server, statefulset: str = STS) -> KubernetesBackend:
    """The backend with the official client pointed at the emulator (the backend runs in a thread, as in the runner)."""
    api = client.AppsV1Api(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{server.port}")))
    return KubernetesBackend(statefulset, NS, api=api)


def replicas_stored(k: kmock.KubernetesEmulator) -> int:
    return k.objects[STATEFULSETS, NS, STS].raw["spec"]["replicas"]


def wire(k: kmock.KubernetesEmulator) -> list[tuple[str, str, str, str | None, bytes]]:
    """Every request the emulator received: method, path, query, content type, raw body."""
    return [(r.method.value.upper(), r.url.path, r.url.query_string, r.headers.get("Content-Type"), r.body)
            for r in k]


async def test_the_emulator_answers_scale_objects(apiserver):
    """The fixture itself: kmock alone would answer the StatefulSet (see serve_scale_subresource)."""
    k, server = apiserver
    api = backend_for(server).api
    scale = await asyncio.to_thread(api.read_namespaced_stateful_set_scale, STS, NS)
    assert (scale.api_version, scale.kind) == ("autoscaling/v1", "Scale")
    assert (scale.spec.replicas, scale.status.replicas) == (2, 2)


# -- the requests ---------------------------------------------------------------------------


async def test_current_is_one_get_of_the_scale_subresource(apiserver):
    k, server = apiserver
    backend = backend_for(server)
    assert await asyncio.to_thread(backend.current) == 2
    assert wire(k) == [("GET", SCALE_PATH, "", None, b"")]
    assert list(k)[0].headers["Accept"] == "application/json"


async def test_scale_to_is_one_merge_patch_of_spec_replicas(apiserver):
    k, server = apiserver
    backend = backend_for(server)
    said = await asyncio.to_thread(backend.scale_to, 5)
    [(method, path, query, content_type, body)] = wire(k)
    assert (method, path, query) == ("PATCH", SCALE_PATH, "")
    assert content_type == SCALE_PATCH == "application/merge-patch+json"
    assert json.loads(body) == {"spec": {"replicas": 5}}
    assert replicas_stored(k) == 5
    assert said == f"statefulset {NS}/{STS} set to 5 replicas (2 pods running)"
    assert await asyncio.to_thread(backend.current) == 5


async def test_scale_in_to_zero_and_out_again(apiserver):
    k, server = apiserver
    backend = backend_for(server)
    await asyncio.to_thread(backend.scale_to, 0)
    assert replicas_stored(k) == 0
    assert await asyncio.to_thread(backend.current) == 0  # the Scale then has no spec.replicas
    await asyncio.to_thread(backend.scale_to, 3)
    assert replicas_stored(k) == 3
    history = [v["spec"]["replicas"] for v in k.objects[STATEFULSETS, NS, STS].history]
    assert history == [2, 0, 3]
    assert [m for m, *_ in wire(k)] == ["PATCH", "GET", "PATCH"]


async def test_a_negative_count_sends_nothing(apiserver):
    k, server = apiserver
    with pytest.raises(ValueError):
        await asyncio.to_thread(backend_for(server).scale_to, -1)
    assert wire(k) == []


# -- scale-in drains first ------------------------------------------------------------------


class RecordingDrainer:
    """A stand-in for the store and the matchers' Leave RPC (tests/integration/test_kubernetes_drain.py
    drains real matchers): owners as given, each Leave recorded with the replicas stored at that moment."""

    def __init__(self, k: kmock.KubernetesEmulator, owners: dict[str, str], refuse: dict[str, str] | None = None):
        self.k = k
        self.table = dict(owners)
        self.refuse = refuse or {}
        self.left: list[tuple[str, int]] = []

    def owners(self) -> dict[str, str]:
        return dict(self.table)

    def leave(self, address: str, timeout_s: float) -> tuple[bool, str]:
        member = next(m for m, a in self.table.items() if a == address)
        self.left.append((member, replicas_stored(self.k)))
        if member in self.refuse:
            return False, self.refuse[member]
        del self.table[member]  # the hand-off is stored before Leave answers
        return True, ""


def drained_backend(server: kmock.Server, drainer: RecordingDrainer) -> KubernetesBackend:
    backend = backend_for(server)
    backend.drainer, backend.drain_timeout_s = drainer, 5.0
    return backend


def pods(*ordinals: int) -> dict[str, str]:
    return {f"{STS}-{i}": f"10.0.0.{i}:7001" for i in ordinals}


async def test_scale_in_drains_each_pod_before_the_replicas_go_below_it(apiserver):
    k, server = apiserver
    k.objects[STATEFULSETS, NS, STS].raw["spec"]["replicas"] = 4
    drainer = RecordingDrainer(k, pods(0, 1, 2, 3))
    said = await asyncio.to_thread(drained_backend(server, drainer).scale_to, 2)
    # Highest ordinal first, each while the StatefulSet still has its pod.
    assert drainer.left == [(f"{STS}-3", 4), (f"{STS}-2", 3)]
    assert set(drainer.table) == {f"{STS}-0", f"{STS}-1"}
    assert [(m, json.loads(b) if b else None) for m, _, _, _, b in wire(k)] == [
        ("GET", None), ("PATCH", {"spec": {"replicas": 3}}), ("PATCH", {"spec": {"replicas": 2}})]
    assert said.startswith(f"{STS}-3 drained in ") and said.endswith(f"statefulset {NS}/{STS} set to 2 replicas "
                                                                     "(2 pods running)")


async def test_a_refused_leave_keeps_the_replicas_and_says_why(apiserver):
    k, server = apiserver
    k.objects[STATEFULSETS, NS, STS].raw["spec"]["replicas"] = 3
    drainer = RecordingDrainer(k, pods(0, 1, 2), refuse={f"{STS}-1": "hand-off not done in 30 s"})
    said = await asyncio.to_thread(drained_backend(server, drainer).scale_to, 1)
    assert replicas_stored(k) == 2  # the first pod drained and went; the second stays
    assert said.endswith(f"{STS}-1 did not leave: hand-off not done in 30 s; statefulset {NS}/{STS} "
                         "stays at 2 replicas")
    assert [m for m, *_ in wire(k)] == ["GET", "PATCH"]


async def test_a_pod_that_owns_nothing_goes_without_a_drain(apiserver):
    """Not an owner (a new pod not yet given segments): no Leave, straight to the patch."""
    k, server = apiserver
    drainer = RecordingDrainer(k, pods(0))
    said = await asyncio.to_thread(drained_backend(server, drainer).scale_to, 1)
    assert drainer.left == [] and replicas_stored(k) == 1
    assert said == f"{STS}-1 owns no segments (not drained); statefulset {NS}/{STS} set to 1 replicas (2 pods running)"


async def test_scale_out_with_a_drainer_reads_then_patches_once(apiserver):
    k, server = apiserver
    drainer = RecordingDrainer(k, pods(0, 1))
    await asyncio.to_thread(drained_backend(server, drainer).scale_to, 3)
    assert [m for m, *_ in wire(k)] == ["GET", "PATCH"] and drainer.left == [] and replicas_stored(k) == 3


# -- errors ---------------------------------------------------------------------------------


async def test_a_missing_statefulset_is_named(apiserver):
    k, server = apiserver
    with pytest.raises(KubernetesBackendError, match=f"statefulset {NS}/nope not found.*--statefulset"):
        await asyncio.to_thread(backend_for(server, "nope").current)


async def test_forbidden_says_which_rbac_is_missing(apiserver):
    k, server = apiserver
    message = (f'statefulsets.apps "{STS}" is forbidden: User "system:serviceaccount:{NS}:default" '
               'cannot get resource "statefulsets/scale" in API group "apps" in the namespace "bd"')
    # `.override`: ahead of the Scale reaction above (reactions of equal priority serve in order).
    k[kmock.resource(STATEFULSETS), kmock.subresource("scale"), kmock.action.FETCH].override << kmock.KubernetesError(
        status=403, reason="Forbidden", message=message)
    with pytest.raises(KubernetesBackendError) as e:
        await asyncio.to_thread(backend_for(server).current)
    assert str(e.value).startswith(f"not allowed to get statefulset {NS}/{STS}/scale ({message})")
    assert "get and patch on statefulsets/scale" in str(e.value)


async def test_an_unreachable_api_server_is_named():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    cfg = client.Configuration(host=f"http://127.0.0.1:{port}")
    cfg.retries = 0
    backend = KubernetesBackend(STS, NS, api=client.AppsV1Api(client.ApiClient(cfg)))
    with pytest.raises(KubernetesBackendError, match=f"cannot reach the API server at http://127.0.0.1:{port}"):
        await asyncio.to_thread(backend.current)


# -- RBAC: the chart's Role allows exactly what the backend sends ----------------------------


def chart_rbac() -> dict[str, dict]:
    """The autoscaler's ServiceAccount, Role and RoleBinding as Helm renders them with the chart's defaults."""
    r = render()
    return {kind: r.get(kind, "bluedove-autoscaler") for kind in ("ServiceAccount", "Role", "RoleBinding")}


def authorization(req: kmock.Request) -> tuple[str, str, str, str, str]:
    """What kube-apiserver's RBAC check is asked for a request: (verb, group, resource, namespace, name).

    As its RequestInfo resolution: /apis/GROUP/VERSION/namespaces/NS/RESOURCE/NAME[/SUBRESOURCE];
    GET of a named object is `get`, PATCH is `patch`; a subresource is checked as RESOURCE/SUB.
    """
    m = re.fullmatch(r"/apis/([^/]+)/[^/]+/namespaces/([^/]+)/([^/]+)/([^/]+)(?:/([^/]+))?", req.url.path)
    assert m, f"not a namespaced named-object path: {req.url.path}"
    group, namespace, resource, name, sub = m.groups()
    verb = {"GET": "get", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[req.method.value.upper()]
    return verb, group, f"{resource}/{sub}" if sub else resource, namespace, name


def allowed(rules: list[dict], verb: str, group: str, resource: str, name: str) -> bool:
    return any(verb in r["verbs"] and group in r["apiGroups"] and resource in r["resources"]
               and (not r.get("resourceNames") or name in r["resourceNames"]) for r in rules)


async def test_the_charts_role_allows_every_request_and_nothing_more(apiserver):
    k, server = apiserver
    backend = backend_for(server)
    await asyncio.to_thread(backend.current)
    await asyncio.to_thread(backend.scale_to, 4)
    # Scale-in with its drain: the matchers are asked over gRPC, the API server no more than before.
    await asyncio.to_thread(drained_backend(server, RecordingDrainer(k, pods(0, 1, 2, 3))).scale_to, 2)
    assert replicas_stored(k) == 2
    asked = {authorization(r) for r in k}
    assert asked == {("get", "apps", "statefulsets/scale", NS, STS), ("patch", "apps", "statefulsets/scale", NS, STS)}

    rbac = chart_rbac()
    sa, role, binding = rbac["ServiceAccount"], rbac["Role"], rbac["RoleBinding"]
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == NS  # a namespaced Role, not a ClusterRole
    for verb, group, resource, namespace, name in asked:
        assert namespace == role["metadata"]["namespace"]
        assert allowed(role["rules"], verb, group, resource, name), (verb, resource)
    granted = {(v, g, res, n) for r in role["rules"] for v in r["verbs"] for g in r["apiGroups"]
               for res in r["resources"] for n in r.get("resourceNames") or ["*"]}
    assert granted == {(v, g, res, n) for v, g, res, _, n in asked}, "the Role grants more than the backend uses"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["metadata"]["namespace"] == NS
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NS}]
    assert sa["automountServiceAccountToken"] is True


def test_the_role_is_the_only_rbac_the_chart_renders():
    """The autoscaler's Role is all the chart grants: no other Role, ClusterRole or binding."""
    kinds = [k for k in render().kinds()
             if k.split("/")[0] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")]
    assert kinds == ["Role/bluedove-autoscaler", "RoleBinding/bluedove-autoscaler"]
    assert chart_rbac()["Role"]["metadata"]["labels"]["app.kubernetes.io/component"] == "autoscaler"


# -- the command: a real cluster's load, the policy, and the API server through a kubeconfig ----


async def terminate(proc: asyncio.subprocess.Process) -> tuple[bytes, bytes]:
    """SIGTERM, then what it printed; SIGKILL if it has not exited within 15 s."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(proc.communicate(), 15)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise


async def test_the_autoscaler_command_scales_the_statefulset_of_a_real_cluster(apiserver, tmp_path):
    k, server = apiserver
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": f"http://127.0.0.1:{server.port}"}}],
        "users": [{"name": "autoscaler", "user": {"token": "test-token"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "autoscaler"}}],
    }))
    env = {key: v for key, v in os.environ.items() if key != "KUBERNETES_SERVICE_HOST"}
    env.update(KUBECONFIG=str(kubeconfig), HOME=str(tmp_path))
    # Two real matchers report their loads; the StatefulSet says 2 replicas; the minimum is 3.
    cluster = await asyncio.to_thread(start_cluster, tmp_path / "cluster", matchers=2)
    metrics_port = free_port()
    proc = None
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bluedove", "autoscaler", "--statefulset", STS, "--namespace", NS,
            "--store", cluster.store_url, "--min-matchers", "3", "--max-matchers", "6",
            "--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        first = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert first.decode().strip() == f"autoscaler  statefulset {NS}/{STS}: 2 replicas; keeping 3 to 6 matchers"
        second = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert second.decode().strip() == f"metrics     http://127.0.0.1:{metrics_port}/metrics"
        deadline = time.monotonic() + 20
        while replicas_stored(k) != 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert replicas_stored(k) == 3
        async with httpx.AsyncClient(base_url=cluster.url, timeout=10) as http:
            view = (await http.get("/v1/cluster")).json()["autoscaler"]
        assert {key: view[key] for key in ("enabled", "min", "max", "backend")} == {
            "enabled": True, "min": 3, "max": 6, "backend": "kubernetes"}
        event = view["events"][0]
        assert (event["action"], event["matchers"]) == ("scale_out", 3)
        assert event["reason"] == (f"2 matchers, below the minimum 3; kubernetes: statefulset {NS}/{STS} "
                                   "set to 3 replicas (2 pods running)")
        # Its /metrics (docs/metrics.md): the decision counted, the matchers it wants and sees.
        async with httpx.AsyncClient(timeout=10) as http:
            text = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        decisions = {s.labels["action"]: s.value for s in fams["bluedove_autoscaler_decisions"].samples
                     if s.name.endswith("_total")}
        assert decisions["scale_out"] >= 1, decisions
        assert fams["bluedove_autoscaler_actual_matchers"].samples[0].value == 2
        assert fams["bluedove_autoscaler_min_matchers"].samples[0].value == 3
        assert [s.labels["role"] for s in fams["bluedove_build_info"].samples] == ["autoscaler"]
    finally:
        out, err = await terminate(proc) if proc is not None else (b"", b"")
        await asyncio.to_thread(cluster.stop)
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip().endswith("autoscaler stopped")
    assert_no_children(cluster)
    reqs = list(k)
    assert {(r.method.value.upper(), r.url.path, r.headers["Authorization"]) for r in reqs} == {
        ("GET", SCALE_PATH, "Bearer test-token"), ("PATCH", SCALE_PATH, "Bearer test-token")}
    [patch] = [r for r in reqs if r.method.value.upper() == "PATCH"]  # then held: 3 is the minimum
    assert (patch.headers["Content-Type"], json.loads(patch.body)) == (SCALE_PATCH, {"spec": {"replicas": 3}})
