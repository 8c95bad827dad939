"""The rendered chart against the deployment contract and the code it runs.

Names, ports and args as the contract gives them; RBAC as the autoscaler's backend uses it;
probes on ports the containers expose and paths the dispatcher serves; the space ConfigMap as
bluedove.core.space reads it.
"""

from __future__ import annotations

import re

import pytest
import yaml

from bluedove.core.space import Space, default_space, load_space
from bluedove.dispatcher.app import create_app
from bluedove.runtime.settings import DispatcherSettings
from tests.deploy.chart import CHART, load_values, render

HEADLESS = "bluedove-matcher-headless"
PEERS_DNS = f"{HEADLESS}.$(POD_NAMESPACE).svc:7001"
STORE = "redis://bluedove-redis:6379/0"


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"] if obj["kind"] != "Pod" else obj["spec"]


def container(obj: dict) -> dict:
    [c] = pod_spec(obj)["containers"]
    return c


def env_of(c: dict) -> dict[str, dict]:
    return {e["name"]: e for e in c.get("env", [])}


def test_the_matcher_args_are_the_contracts():
    c = container(render().get("StatefulSet", "bluedove-matcher"))
    assert c["args"] == [
        "matcher", "--id", "$(POD_NAME)", "--host", "0.0.0.0", "--port", "7001",
        "--advertise", f"$(POD_NAME).{HEADLESS}.$(POD_NAMESPACE).svc:7001", "--store", STORE,
        "--space", "/etc/bluedove/space.yaml", "--peers-dns", PEERS_DNS, "--leave-on-sigterm",
        "--metrics-port", "9100"]
    env = env_of(c)
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"  # pod id = pod name
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_the_dispatcher_and_autoscaler_args_are_the_contracts():
    r = render()
    assert container(r.get("Deployment", "bluedove-dispatcher"))["args"] == [
        "dispatcher", "--id", "$(POD_NAME)", "--host", "0.0.0.0", "--http-port", "8080", "--grpc-port", "50051",
        "--gossip-port", "7002", "--advertise", "$(POD_IP):7002", "--store", STORE, "--peers-dns", PEERS_DNS]
    assert container(r.get("Deployment", "bluedove-autoscaler"))["args"] == [
        "autoscaler", "--statefulset", "bluedove-matcher", "--namespace", "$(POD_NAMESPACE)", "--store", STORE,
        "--min-matchers", "2", "--max-matchers", "8", "--metrics-port", "9101"]


def test_the_statefulset_its_headless_service_and_port_agree():
    """serviceName is the headless Service; 7001 is the container's port, the Service's, and every arg's."""
    r = render()
    sts, svc = r.get("StatefulSet", "bluedove-matcher"), r.get("Service", HEADLESS)
    assert sts["spec"]["serviceName"] == HEADLESS
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    port, metrics = svc["spec"]["ports"]
    cport, cmetrics = container(sts)["ports"]
    assert (metrics["name"], metrics["port"], metrics["targetPort"]) == ("metrics", 9100, cmetrics["name"])
    assert cmetrics["containerPort"] == 9100
    assert (port["name"], port["port"], port["targetPort"]) == ("grpc", 7001, cport["name"])
    assert cport["containerPort"] == 7001
    args = container(sts)["args"]
    flag = {args[i]: args[i + 1] for i in range(1, len(args) - 1) if args[i].startswith("--")}
    assert flag["--port"] == "7001"
    assert flag["--advertise"].endswith(f".{svc['metadata']['name']}.$(POD_NAMESPACE).svc:7001")
    assert flag["--peers-dns"] == f"{svc['metadata']['name']}.$(POD_NAMESPACE).svc:{cport['containerPort']}"


def test_the_autoscaler_role_is_exactly_scale_of_the_matcher_statefulset():
    """get and patch on statefulsets/scale of that one StatefulSet: the two requests of
    bluedove/autoscaler/kubernetes.py (current() GETs the scale subresource, scale_to() merge-patches it;
    tests/integration/test_kubernetes_backend.py records them on the wire), under any release name."""
    for values, sts_name in (({}, "bluedove-matcher"), ({"fullnameOverride": "pubsub"}, "pubsub-matcher")):
        r = render(values)
        role = r.get("Role", r.get("RoleBinding", f"{values.get('fullnameOverride', 'bluedove')}-autoscaler")
                     ["roleRef"]["name"])
        assert role["rules"] == [{"apiGroups": ["apps"], "resources": ["statefulsets/scale"],
                                  "resourceNames": [sts_name], "verbs": ["get", "patch"]}]
        r.get("StatefulSet", sts_name)  # the StatefulSet the Role names is the one rendered
        args = container(r.get("Deployment", role["metadata"]["name"]))["args"]
        assert args[args.index("--statefulset") + 1] == sts_name
    # The client methods the backend calls, as RBAC sees them: read_* is a GET (verb get),
    # patch_* a PATCH (verb patch); *_stateful_set_scale is resource statefulsets/scale.
    from bluedove.autoscaler import kubernetes as backend

    source = backend.__loader__.get_source(backend.__name__)
    calls = set(re.findall(r"self\.api\.(\w+)_namespaced_stateful_set_scale\b", source))
    assert calls == {"read", "patch"}
    assert {{"read": "get"}.get(c, c) for c in calls} == set(role["rules"][0]["verbs"])
    assert not re.findall(r"self\.api\.(?!read_namespaced_stateful_set_scale|patch_namespaced_stateful_set_scale)"
                          r"\w+_namespaced_\w+", source), "the backend calls something the Role does not grant"


def test_probes_hit_ports_the_containers_expose():
    for profile in (None, "autoscaling-off-values.yaml"):
        r = render(load_values(CHART / "ci" / profile) if profile else {})
        workloads = [o for o in r.objects if o["kind"] in ("Deployment", "StatefulSet")]
        assert {"bluedove-dispatcher", "bluedove-matcher"} <= {o["metadata"]["name"] for o in workloads}
        for obj in workloads:
            c = container(obj)
            ports = {p["containerPort"] for p in c.get("ports", [])} | {p["name"] for p in c.get("ports", [])}
            for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
                probe = c.get(kind)
                if probe is None:
                    continue
                target = probe.get("httpGet") or probe.get("grpc") or probe.get("tcpSocket")
                if target is not None:
                    assert target["port"] in ports, (obj["metadata"]["name"], kind, target)


def test_the_dispatcher_probes_ask_paths_the_app_serves():
    c = container(render().get("Deployment", "bluedove-dispatcher"))
    assert (c["livenessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["path"]) == ("/healthz", "/readyz")
    paths = create_app(DispatcherSettings(), default_space()).openapi()["paths"]
    for kind in ("livenessProbe", "readinessProbe"):
        assert "get" in paths[c[kind]["httpGet"]["path"]], kind
    assert "get" in paths["/metrics"]  # what the ServiceMonitor scrapes


def test_the_matcher_probes_are_grpc_health_of_the_contract():
    c = container(render().get("StatefulSet", "bluedove-matcher"))
    assert c["startupProbe"]["grpc"] == {"port": 7001, "service": ""}
    assert c["livenessProbe"]["grpc"] == {"port": 7001, "service": ""}
    assert c["readinessProbe"]["grpc"] == {"port": 7001, "service": "bluedove.ready"}
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 300
    assert "lifecycle" not in c  # no preStop: SIGTERM's leave does the hand-off


def test_the_termination_grace_covers_leave_and_hand_off():
    values = {"matcher": {"leaveTimeoutSeconds": 40, "handoffGraceSeconds": 7, "terminationMarginSeconds": 5}}
    sts = render(values).get("StatefulSet", "bluedove-matcher")
    assert pod_spec(sts)["terminationGracePeriodSeconds"] == 52
    env = env_of(container(sts))
    assert (env["BLUEDOVE_LEAVE_TIMEOUT_S"]["value"], env["BLUEDOVE_HANDOFF_GRACE_S"]["value"]) == ("40", "7")
    dispatcher = env_of(container(render(values).get("Deployment", "bluedove-dispatcher")))
    assert dispatcher["BLUEDOVE_HANDOFF_GRACE_S"]["value"] == "7"  # the same grace on both sides


def test_the_space_configmap_is_the_default_space_and_mounted():
    r = render()
    cm = r.get("ConfigMap", "bluedove-space")
    data = yaml.safe_load(cm["data"]["space.yaml"])
    assert data.pop("retention_s") == 0  # no log for the default space unless the values ask for one
    assert Space.from_json(data) == default_space()
    sts = r.get("StatefulSet", "bluedove-matcher")
    [mount] = [m for m in container(sts)["volumeMounts"] if m["mountPath"] == "/etc/bluedove"]
    [vol] = [v for v in pod_spec(sts)["volumes"] if v["name"] == mount["name"]]
    assert vol["configMap"]["name"] == "bluedove-space"


def test_a_custom_space_is_what_the_loader_reads(tmp_path):
    space = {"dimensions": [{"name": "price", "min": 0, "max": 250.5}, {"name": "volume", "min": -10, "max": 10}]}
    cm = render({"space": space}).get("ConfigMap", "bluedove-space")
    path = tmp_path / "space.yaml"
    path.write_text(cm["data"]["space.yaml"])
    assert load_space(path) == Space.from_json(space)


def test_a_typed_space_reaches_the_loader_without_the_default_dimensions(tmp_path):
    """The defaults' `dimensions` merge into a typed space the values give: the ConfigMap
    leaves them out (they would contradict the partition attributes)."""
    space = {"attributes": [{"name": "status", "type": "string"}, {"name": "amount", "min": 0, "max": 10000},
                            {"name": "coupon", "type": "string", "optional": True}],
             "partition": ["status", "amount"]}
    data = yaml.safe_load(render({"space": space}).get("ConfigMap", "bluedove-space")["data"]["space.yaml"])
    assert data == {**space, "retention_s": 0}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_space(path) == Space.from_json(space) and load_space(path).typed


def test_the_store_url_in_a_secret_reaches_every_component():
    """externalRedis.existingSecret: BLUEDOVE_STORE_URL from the Secret, declared before the
    args refer to it as $(BLUEDOVE_STORE_URL) (the kubelet expands only variables it knows)."""
    r = render(load_values(CHART / "ci" / "external-redis-values.yaml"))
    assert r.find("StatefulSet", "bluedove-redis") is None
    for kind, name in (("StatefulSet", "bluedove-matcher"), ("Deployment", "bluedove-dispatcher"),
                       ("Deployment", "bluedove-autoscaler")):
        c = container(r.get(kind, name))
        assert c["args"][c["args"].index("--store") + 1] == "$(BLUEDOVE_STORE_URL)", name
        assert env_of(c)["BLUEDOVE_STORE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "bluedove-store", "key": "url"}


def test_a_plain_external_url_is_passed_as_is():
    r = render(load_values(CHART / "ci" / "autoscaling-off-values.yaml"))
    c = container(r.get("StatefulSet", "bluedove-matcher"))
    assert c["args"][c["args"].index("--store") + 1] == "redis://redis-master.data.svc:6379/0"
    assert "BLUEDOVE_STORE_URL" not in env_of(c)


def test_boot_members_name_the_first_pods_at_their_advertised_addresses():
    c = container(render(load_values(CHART / "ci" / "autoscaling-off-values.yaml"))
                  .get("StatefulSet", "bluedove-matcher"))
    members = c["args"][c["args"].index("--boot-members") + 1].split(",")
    assert members == [f"bluedove-matcher-{i}=bluedove-matcher-{i}.{HEADLESS}.$(POD_NAMESPACE).svc:7001"
                       for i in range(3)]
    advertise = c["args"][c["args"].index("--advertise") + 1]
    assert members[0].split("=")[1] == advertise.replace("$(POD_NAME)", "bluedove-matcher-0")


@pytest.mark.parametrize("profile", [None, "external-redis-values.yaml"])
def test_every_pod_is_locked_down(profile):
    """Non-root, read-only root filesystem, no capabilities, RuntimeDefault seccomp, resources set;
    the bluedove containers write only to their /tmp emptyDir (numba's cache among it)."""
    r = render(load_values(CHART / "ci" / profile) if profile else {})
    pods = [o for o in r.objects if o["kind"] in ("Deployment", "StatefulSet", "Pod")]
    assert len(pods) >= 4
    for obj in pods:
        spec, c = pod_spec(obj), container(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        sc = c["securityContext"]
        assert (sc["readOnlyRootFilesystem"], sc["allowPrivilegeEscalation"], sc["capabilities"]) == (
            True, False, {"drop": ["ALL"]}), obj["metadata"]["name"]
        assert c["resources"]["requests"] and c["resources"]["limits"], obj["metadata"]["name"]
        if c["image"].startswith("bluedove:"):
            assert sc["runAsUser"] == 10001
            if obj["kind"] != "Pod":
                assert env_of(c)["NUMBA_CACHE_DIR"]["value"] == "/tmp/numba-cache"
                [tmp] = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
                assert {"name": tmp["name"], "emptyDir": {}} in spec["volumes"]


def test_the_connection_test_asks_readyz_with_python():
    pod = render().get("Pod", "bluedove-test-connection")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    c = container(pod)
    assert c["command"][:2] == ["python", "-c"]
    assert c["command"][-1] == "http://bluedove-dispatcher:8080/readyz"
    compile(c["command"][2], "test-connection", "exec")  # the script is valid Python


def test_api_keys_are_on_by_default_and_off_when_asked():
    """auth.mode reaches every dispatcher as BLUEDOVE_AUTH, a value DispatcherSettings takes."""
    for values, mode in ((None, "keys"), ({"auth": {"mode": "off"}}, "off")):
        env = env_of(container(render(values).get("Deployment", "bluedove-dispatcher")))
        assert env["BLUEDOVE_AUTH"]["value"] == mode
        assert DispatcherSettings(auth=mode).auth == mode
    with pytest.raises(Exception, match="auth"):
        render({"auth": {"mode": "tokens"}})
