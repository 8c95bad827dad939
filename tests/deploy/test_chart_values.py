"""What the values change: the schema and bluedove.validateValues refuse bad ones with clear
messages; replicas, checksums, optional objects and NOTES follow the values."""

from __future__ import annotations

import shutil

import helm_python as helm
import pytest

from bluedove.cli.main import build_parser
from tests.deploy.chart import CHART, load_values, render


def test_every_value_is_documented_by_an_param_comment():
    """values.yaml documents each key with a `## @param key.path text` comment above it (on the
    key itself, or on a map it belongs to when that map is one value, like resources): a key
    without one, an @param naming no key, or one without text fails, naming it."""
    import re

    import yaml

    text = (CHART / "values.yaml").read_text()
    params = dict(re.findall(r"^\s*## @param (\S+)(.*)$", text, re.MULTILINE))
    values = yaml.safe_load(text)

    def lookup(path):
        node = values
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    assert [p for p in params if not lookup(p)] == [], "@param naming no key"
    assert [p for p, doc in params.items() if not doc.strip()] == [], "@param without text"

    def undocumented(node, prefix=""):
        for key, value in node.items():
            path = f"{prefix}{key}"
            if path in params:
                continue
            if isinstance(value, dict) and value:
                yield from undocumented(value, f"{path}.")
            else:
                yield path

    assert list(undocumented(values)) == []


@pytest.mark.parametrize("values, message", [
    ({"matcher": {"replicas": "3"}}, "at '/matcher/replicas': got string, want integer"),
    ({"matcher": {"replica": 3}}, "at '/matcher': additional properties 'replica' not allowed"),
    ({"dispatcher": {"service": {"httpPort": 0}}}, "/dispatcher/service/httpPort"),
    ({"redis": {"appendfsync": "sometimes"}}, "/redis/appendfsync"),
    ({"space": {"dimensions": []}}, "/space/dimensions"),
    ({"spaces": [{"name": "Orders", "attributes": [{"name": "a", "type": "string"}]}]}, "/spaces/0/name"),
    ({"spaces": [{"name": "default", "attributes": [{"name": "a", "type": "string"}]}]}, "/spaces/0/name"),
    ({"spaces": [{"name": "orders", "attributes": [], "quotas": {"rate": 1}}]}, "/spaces/0"),
])
def test_the_schema_refuses_bad_values_naming_the_key(values, message):
    with pytest.raises(helm.HelmValuesError) as e:
        render(values)
    assert message in str(e.value)


def test_validate_values_reports_every_problem_at_once():
    values = {"redis": {"enabled": False}, "autoscaler": {"minMatchers": 5, "maxMatchers": 2},
              "dispatcher": {"ingress": {"enabled": True, "tls": {"enabled": True}}},
              "space": {"dimensions": [{"name": "x", "min": 3, "max": 3}]}}
    with pytest.raises(helm.HelmRenderError) as e:
        render(values)
    text = str(e.value)
    assert "bluedove: 5 problem(s) in the values:" in text
    for part in ("no store: redis.enabled is false", "autoscaler.minMatchers (5) is above autoscaler.maxMatchers (2)",
                 "dispatcher.ingress.enabled needs dispatcher.ingress.host",
                 "dispatcher.ingress.tls.enabled needs dispatcher.ingress.tls.secretName",
                 "space.dimensions[0] (x): min 3 is not below max 3"):
        assert part in text


@pytest.mark.parametrize("values, part", [
    ({"externalRedis": {"url": "redis://r:6379/0"}}, "two stores"),
    ({"redis": {"enabled": False}, "externalRedis": {"url": "http://r"}}, "is not a store URL: it starts with redis://"),
    ({"matcher": {"bootMembers": True}}, "matcher.bootMembers with autoscaler.enabled"),
    ({"rbac": {"create": False}}, "needs autoscaler.serviceAccount.name"),
    ({"dispatcher": {"hpa": {"minReplicas": 4, "maxReplicas": 3}}}, "dispatcher.hpa.minReplicas (4) is above"),
])
def test_validate_values_each_rule(values, part):
    with pytest.raises(helm.HelmRenderError, match="1 problem"):
        render(values)
    with pytest.raises(helm.HelmRenderError) as e:
        render(values)
    assert part in str(e.value)


def test_the_checksum_rolls_the_matchers_on_a_change_of_space_only():
    def checksum(values):
        sts = render(values).get("StatefulSet", "bluedove-matcher")
        return sts["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    base = checksum({})
    space = {"dimensions": [{"name": "x0", "min": 0, "max": 500}]}
    assert checksum({"space": space}) != base
    assert checksum({"dispatcher": {"replicas": 5}}) == base


def test_with_the_autoscaler_the_statefulset_has_no_replicas():
    """`helm upgrade` then keeps the count the autoscaler chose; without it, matcher.replicas."""
    assert "replicas" not in render().get("StatefulSet", "bluedove-matcher")["spec"]
    off = render({"autoscaler": {"enabled": False}, "matcher": {"replicas": 4}})
    assert off.get("StatefulSet", "bluedove-matcher")["spec"]["replicas"] == 4
    assert off.find("Deployment", "bluedove-autoscaler") is None and off.find("Role", "bluedove-autoscaler") is None


def test_the_dispatcher_hpa_owns_replicas_when_on():
    r = render({"dispatcher": {"hpa": {"enabled": True, "minReplicas": 3, "maxReplicas": 9}}})
    assert "replicas" not in r.get("Deployment", "bluedove-dispatcher")["spec"]
    hpa = r.get("HorizontalPodAutoscaler", "bluedove-dispatcher")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 9)
    assert hpa["spec"]["scaleTargetRef"]["name"] == "bluedove-dispatcher"
    assert render().get("Deployment", "bluedove-dispatcher")["spec"]["replicas"] == 2


def test_the_tls_profile_has_an_ingress_with_its_secret():
    r = render(load_values(CHART / "ci" / "tls-values.yaml"))
    ing = r.get("Ingress", "bluedove-dispatcher")
    assert ing["spec"]["tls"] == [{"hosts": ["bluedove.example.com"], "secretName": "bluedove-example-com-tls"}]
    backend = ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "bluedove-dispatcher", "port": {"name": "http"}}
    assert "https://bluedove.example.com/dashboard" in r.notes
    assert "port-forward service/bluedove-dispatcher 8080:8080" in render().notes


def test_network_policies_allow_what_each_component_needs():
    r = render({"networkPolicy": {"enabled": True}})
    names = sorted(o["metadata"]["name"] for o in r.objects if o["kind"] == "NetworkPolicy")
    assert names == ["bluedove-autoscaler", "bluedove-dispatcher", "bluedove-matcher", "bluedove-redis"]

    def ingress(name):
        return [(sorted(p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in rule.get("from", [])),
                 sorted(p["port"] for p in rule["ports"]))
                for rule in r.get("NetworkPolicy", name)["spec"]["ingress"]]

    assert ingress("bluedove-dispatcher") == [([], [8080, 50051]), (["dispatcher", "matcher"], [7002])]
    assert ingress("bluedove-matcher") == [(["autoscaler", "dispatcher", "matcher"], [7001]), ([], [9100])]
    assert ingress("bluedove-redis") == [(["autoscaler", "dispatcher", "matcher"], [6379])]
    assert ingress("bluedove-autoscaler") == [([], [9101])]  # Prometheus only
    egress = {p["port"] for rule in r.get("NetworkPolicy", "bluedove-matcher")["spec"]["egress"] for p in rule["ports"]}
    assert egress == {53, 7001, 7002, 6379}
    assert render().find("NetworkPolicy", "bluedove-matcher") is None  # off by default


def test_the_service_monitors_scrape_dispatchers_matchers_and_the_autoscaler():
    """Each ServiceMonitor selects its component's Service by labels and names a port that
    Service has, whose target is a container port of that component's pods serving /metrics
    (the matchers' and the autoscaler's given by --metrics-port)."""
    r = render({"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}})
    pods = {"dispatcher": r.get("Deployment", "bluedove-dispatcher"),
            "matcher": r.get("StatefulSet", "bluedove-matcher"),
            "autoscaler": r.get("Deployment", "bluedove-autoscaler")}
    services = {"dispatcher": "bluedove-dispatcher", "matcher": "bluedove-matcher-headless",
                "autoscaler": "bluedove-autoscaler"}
    for component, port in (("dispatcher", "http"), ("matcher", "metrics"), ("autoscaler", "metrics")):
        sm = r.get("ServiceMonitor", f"bluedove-{component}")
        assert sm["metadata"]["labels"]["release"] == "prom"
        assert sm["spec"]["endpoints"] == [{"port": port, "path": "/metrics", "interval": "30s",
                                            "scrapeTimeout": "10s"}]
        svc = r.get("Service", services[component])
        by_name = {p["name"]: p for p in svc["spec"]["ports"]}
        assert port in by_name, (component, by_name)
        assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
        container = pods[component]["spec"]["template"]["spec"]["containers"][0]
        target = {p["name"]: p["containerPort"] for p in container["ports"]}[by_name[port]["targetPort"]]
        if component != "dispatcher":
            args = container["args"]
            assert args[args.index("--metrics-port") + 1] == str(target), (component, args)
    off = render({"metrics": {"serviceMonitor": {"enabled": True, "matchers": False, "autoscaler": False}}})
    assert off.find("ServiceMonitor", "bluedove-matcher") is None
    assert off.find("ServiceMonitor", "bluedove-autoscaler") is None
    assert render({"autoscaler": {"enabled": False}, "metrics": {"serviceMonitor": {"enabled": True}}}).find(
        "ServiceMonitor", "bluedove-autoscaler") is None


def test_dashboards_render_only_from_files_that_exist(tmp_path):
    """Enabled, the chart renders one ConfigMap per file of dashboards/ (it ships bluedove.json;
    tests/deploy/test_grafana.py checks its content): a file added there (to a copy of the chart
    here) becomes one more, labelled for the Grafana sidecar."""
    on = {"grafana": {"dashboards": {"enabled": True}}}
    shipped = [o["metadata"]["name"] for o in render(on).objects if "grafana_dashboard" in o["metadata"]["labels"]]
    assert shipped == ["bluedove-dashboard-bluedove"]
    chart = tmp_path / "bluedove"
    shutil.copytree(CHART, chart)
    (chart / "dashboards" / "cluster.json").write_text('{"title": "BlueDove"}\n')
    cm = render(on, chart=chart).get("ConfigMap", "bluedove-dashboard-cluster")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"] == {"cluster.json": '{"title": "BlueDove"}'}
    assert render(chart=chart).find("ConfigMap", "bluedove-dashboard-cluster") is None  # off by default


def test_per_component_pod_settings_reach_their_pods():
    values = {"imagePullSecrets": [{"name": "shared"}],
              "matcher": {"imagePullSecrets": [{"name": "own"}], "podLabels": {"team": "m"},
                          "podAnnotations": {"a": "b"}, "priorityClassName": "high",
                          "nodeSelector": {"pool": "m"}, "extraEnv": [{"name": "BLUEDOVE_BATCH_MAX", "value": "64"}],
                          "securityContext": {"runAsUser": 20000}},
              "image": {"repository": "reg.example/bluedove", "tag": "1.2.3"}}
    r = render(values)
    sts = r.get("StatefulSet", "bluedove-matcher")
    meta, spec = sts["spec"]["template"]["metadata"], sts["spec"]["template"]["spec"]
    assert spec["imagePullSecrets"] == [{"name": "shared"}, {"name": "own"}]
    assert meta["labels"]["team"] == "m" and meta["annotations"]["a"] == "b"
    assert (spec["priorityClassName"], spec["nodeSelector"]) == ("high", {"pool": "m"})
    c = spec["containers"][0]
    assert c["image"] == "reg.example/bluedove:1.2.3"
    assert {"name": "BLUEDOVE_BATCH_MAX", "value": "64"} in c["env"]
    assert c["securityContext"]["runAsUser"] == 20000 and c["securityContext"]["readOnlyRootFilesystem"] is True
    d = r.get("Deployment", "bluedove-dispatcher")["spec"]["template"]["spec"]
    assert d["imagePullSecrets"] == [{"name": "shared"}] and "priorityClassName" not in d
    assert render().get("StatefulSet", "bluedove-matcher")["spec"]["template"]["spec"]["containers"][0][
        "image"] == "bluedove:0.1.0"  # the chart's appVersion


def test_the_cli_accepts_the_rendered_args():
    """Each component's args, $(VAR)s filled in, through `bluedove`'s own parser (usage errors exit 2).
    Skipped while the CLI lacks a flag of the deployment contract (they land from other branches)."""
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    r = render(load_values(CHART / "ci" / "autoscaling-off-values.yaml") | {"autoscaler": {"enabled": True}}
               | {"matcher": {"bootMembers": False}})
    argvs = [r.get(k, n)["spec"]["template"]["spec"]["containers"][0]["args"]
             for k, n in (("StatefulSet", "bluedove-matcher"), ("Deployment", "bluedove-dispatcher"),
                          ("Deployment", "bluedove-autoscaler"))]
    assert [argv[0] for argv in argvs] == ["matcher", "dispatcher", "autoscaler"]
    missing = sorted(f"{argv[0]} {a}" for argv in argvs for a in argv if a.startswith("--")
                     and a not in {o for act in commands[argv[0]]._actions for o in act.option_strings})
    if missing:
        pytest.skip(f"the CLI does not have {missing} yet")
    env = {"$(POD_NAME)": "bluedove-matcher-0", "$(POD_NAMESPACE)": "bd", "$(POD_IP)": "10.0.0.7"}
    for argv in argvs:
        filled = list(argv)
        for var, value in env.items():
            filled = [a.replace(var, value) for a in filled]
        parser.parse_args(filled)  # SystemExit(2) with argparse's message on a bad flag


SEED = {"version": 1, "matchers": 2,
        "dimensions": {d: {"boundaries": [0, 300, 1000]} for d in ("x0", "x1", "x2", "x3")},
        "placement": [{"matcher": 0, "segments": {"x0": 1, "x1": 0, "x2": 0, "x3": 0}},
                      {"matcher": 1, "segments": {"x0": 0, "x1": 1, "x2": 1, "x3": 1}}]}


def test_a_seed_reaches_the_matchers_as_a_mounted_file_and_lays_out_the_first_table(tmp_path):
    """The value `seed` becomes a ConfigMap mounted into matchers and passed as --seed; the file
    it renders is one `bluedove.core.partition.seeds` reads into the table the seed describes. Without it,
    nothing of it is rendered; a change of seed alone rolls no pod (the store keeps its table)."""
    import json

    import yaml

    from bluedove.core.partition.bootstrap import initial_table
    from bluedove.core.space import Space

    values = load_values(CHART / "ci" / "autoscaling-off-values.yaml") | {"seed": SEED}
    values["matcher"] = {**values.get("matcher", {}), "bootMembers": True, "replicas": 2}
    r = render(values)
    cm = r.get("ConfigMap", "bluedove-seed")
    assert json.loads(cm["data"]["seed.json"]) == SEED
    pod = r.get("StatefulSet", "bluedove-matcher")["spec"]["template"]
    c = pod["spec"]["containers"][0]
    seed_file = c["args"][c["args"].index("--seed") + 1]
    [mount] = [m for m in c["volumeMounts"] if m["name"] == "seed"]
    assert seed_file == f"{mount['mountPath']}/seed.json"
    assert {"name": "seed", "configMap": {"name": "bluedove-seed"}} in pod["spec"]["volumes"]
    space = Space.from_json({k: v for k, v in yaml.safe_load(r.get("ConfigMap", "bluedove-space")["data"][
        "space.yaml"]).items() if k != "retention_s"})
    table = initial_table(space, {"bluedove-matcher-0": "", "bluedove-matcher-1": ""},
                          json.loads(cm["data"]["seed.json"]))
    assert table.owners[0] == ("bluedove-matcher-1", "bluedove-matcher-0")

    other = {**SEED, "created": "later"}
    annotations = pod["metadata"].get("annotations", {})
    assert render(values | {"seed": other}).get("StatefulSet", "bluedove-matcher")["spec"]["template"][
        "metadata"].get("annotations", {}) == annotations
    plain = render(load_values(CHART / "ci" / "autoscaling-off-values.yaml"))
    assert plain.find("ConfigMap", "bluedove-seed") is None
    args = plain.get("StatefulSet", "bluedove-matcher")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--seed" not in args


@pytest.mark.parametrize("matcher, part", [
    ({"bootMembers": False, "replicas": 2}, "seed needs matcher.bootMembers=true"),
    ({"bootMembers": True, "replicas": 3}, "seed.matchers (2) differs from matcher.replicas (3)"),
])
def test_a_seed_that_cannot_place_its_matchers_is_refused(matcher, part):
    values = load_values(CHART / "ci" / "autoscaling-off-values.yaml") | {"seed": SEED}
    values["matcher"] = {**values.get("matcher", {}), **matcher}
    with pytest.raises(helm.HelmRenderError) as e:
        render(values)
    assert part in str(e.value)


SPACES = [{"name": "orders", "attributes": [{"name": "status", "type": "string"},
                                            {"name": "total", "type": "number", "min": 0, "max": 10000}],
           "partition": ["status", "total"], "quotas": {"messages_per_s": 500}},
          {"name": "traffic", "attributes": [{"name": "speed", "type": "number", "min": 0, "max": 200}]}]


def test_spaces_reach_every_dispatcher_as_a_mounted_file_and_roll_only_the_dispatchers(tmp_path):
    """The value `spaces` becomes a ConfigMap mounted into dispatchers and passed as --spaces; the
    file it renders is one the dispatcher reads into those definitions. A change of spaces rolls
    the dispatchers (a checksum) and not the matchers; without it nothing of it is rendered."""
    from bluedove.core.spaces import load_spaces_file, parse_space_spec

    values = load_values(CHART / "ci" / "autoscaling-off-values.yaml") | {"spaces": SPACES}
    r = render(values)
    pod = r.get("Deployment", "bluedove-dispatcher")["spec"]["template"]
    c = pod["spec"]["containers"][0]
    spaces_file = c["args"][c["args"].index("--spaces") + 1]
    [mount] = [m for m in c["volumeMounts"] if m["name"] == "spaces"]
    assert spaces_file == f"{mount['mountPath']}/spaces.json"
    assert {"name": "spaces", "configMap": {"name": "bluedove-spaces"}} in pod["spec"]["volumes"]
    local = tmp_path / "spaces.json"
    local.write_text(r.get("ConfigMap", "bluedove-spaces")["data"]["spaces.json"])
    assert load_spaces_file(str(local)) == [parse_space_spec(s) for s in SPACES]

    def annotations(rendered, kind, name):
        return rendered.get(kind, name)["spec"]["template"]["metadata"].get("annotations", {})

    other = render(values | {"spaces": SPACES[:1]})
    assert annotations(other, "Deployment", "bluedove-dispatcher") != annotations(r, "Deployment",
                                                                                  "bluedove-dispatcher")
    assert annotations(other, "StatefulSet", "bluedove-matcher") == annotations(r, "StatefulSet", "bluedove-matcher")
    plain = render(load_values(CHART / "ci" / "autoscaling-off-values.yaml"))
    assert plain.find("ConfigMap", "bluedove-spaces") is None
    assert "--spaces" not in plain.get("Deployment", "bluedove-dispatcher")["spec"]["template"]["spec"][
        "containers"][0]["args"]


def test_replay_values_reach_the_dispatchers_and_give_declared_spaces_a_log(tmp_path):
    """`replay.rate` and `replay.leaseSeconds` become the dispatchers' BLUEDOVE_REPLAY_RATE and
    BLUEDOVE_REPLAY_LEASE_S; `replay.defaultRetentionSeconds` is the log of a declared space whose
    body leaves `retention_s` out, and one that says 0 keeps 0; the default space's too (space.yaml)."""
    from bluedove.core.space import default_space, read_space_file
    from bluedove.core.spaces import load_spaces_file

    spaces = [SPACES[0], {**SPACES[1], "retention_s": 0}]
    values = load_values(CHART / "ci" / "autoscaling-off-values.yaml") | {
        "spaces": spaces, "replay": {"defaultRetentionSeconds": 3600, "rate": 5000, "leaseSeconds": 4}}
    r = render(values)
    env = {e["name"]: e.get("value") for e in
           r.get("Deployment", "bluedove-dispatcher")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["BLUEDOVE_REPLAY_RATE"] == "5000" and env["BLUEDOVE_REPLAY_LEASE_S"] == "4"
    local = tmp_path / "spaces.json"
    local.write_text(r.get("ConfigMap", "bluedove-spaces")["data"]["spaces.json"])
    assert [s.retention_s for s in load_spaces_file(str(local))] == [3600, 0]
    own = tmp_path / "space.yaml"  # the default space's log: the same default, or its own `retention_s`
    own.write_text(r.get("ConfigMap", "bluedove-space")["data"]["space.yaml"])
    assert read_space_file(own) == (default_space(), 3600)
    said = render(values | {"space": {**default_space().to_json(), "retention_s": 0}})
    own.write_text(said.get("ConfigMap", "bluedove-space")["data"]["space.yaml"])
    assert read_space_file(own)[1] == 0
