"""The chart pointed at an external store: a Redis Cluster's URL, the password from a Secret
apart from the URL, the NetworkPolicies' egress to every node's port, and the render-time
checks of a URL the pods would refuse when they start."""

from __future__ import annotations

import helm_python as helm
import pytest

from tests.deploy.chart import CHART, load_values, render

CLUSTER_URL = "redis+cluster://redis-a.data.example:7000,redis-b.data.example:7001?wait=1"
PASSWORD_REF = {"name": "bluedove-store-password", "key": "password"}
STORE_CLIENTS = (("StatefulSet", "bluedove-matcher"), ("Deployment", "bluedove-dispatcher"),
                 ("Deployment", "bluedove-autoscaler"))
NETPOLS = ("bluedove-dispatcher", "bluedove-matcher", "bluedove-autoscaler")
# The ci/ profile of a Redis Cluster whose nodes listen on 7000-7005 (linted and validated
# against Kubernetes' schemas with the other profiles by test_chart_render.py).
CLUSTER = load_values(CHART / "ci" / "redis-cluster-values.yaml")


def external(**redis) -> dict:
    return {"redis": {"enabled": False}, "externalRedis": redis}


def containers(r) -> list[tuple[str, dict]]:
    """Every container of every pod the release makes (workloads, the test hook, Redis)."""
    out = []
    for o in r.objects:
        spec = o["spec"] if o["kind"] == "Pod" else o.get("spec", {}).get("template", {}).get("spec")
        if spec:
            out += [(f"{o['kind']}/{o['metadata']['name']}", c)
                    for c in spec.get("initContainers", []) + spec["containers"]]
    return out


def env_of(c: dict) -> dict[str, dict]:
    return {e["name"]: e for e in c.get("env", [])}


def store_arg(c: dict) -> str:
    return c["args"][c["args"].index("--store") + 1]


def egress_ports(r, name: str) -> list[list[int]]:
    return [sorted(p["port"] for p in rule["ports"]) for rule in r.get("NetworkPolicy", name)["spec"]["egress"]]


def test_a_cluster_url_and_its_password_secret_reach_every_store_client():
    """The URL as --store, the password as BLUEDOVE_STORE_PASSWORD from its Secret: in each
    component that talks to the store, and in no other container (the `helm test` pod asks a
    dispatcher over HTTP, it has no business with the password)."""
    r = render(external(url=CLUSTER_URL, passwordSecret="bluedove-store-password"))
    assert r.find("StatefulSet", "bluedove-redis") is None
    for kind, name in STORE_CLIENTS:
        [c] = r.get(kind, name)["spec"]["template"]["spec"]["containers"]
        assert store_arg(c) == CLUSTER_URL, name
        env = env_of(c)
        assert env["BLUEDOVE_STORE_PASSWORD"]["valueFrom"] == {"secretKeyRef": PASSWORD_REF}, name
        assert "BLUEDOVE_STORE_URL" not in env, name  # the URL is in the values, not a Secret
    every = containers(r)
    assert {where for where, _ in every} >= {f"{k}/{n}" for k, n in STORE_CLIENTS} | {"Pod/bluedove-test-connection"}
    for where, c in every:
        talks_to_store = "--store" in c.get("args", [])
        assert ("BLUEDOVE_STORE_PASSWORD" in env_of(c)) == talks_to_store, where
    assert "its password in Secret bluedove-store-password" in r.notes


def test_url_and_password_both_from_secrets_url_first():
    """existingSecret and passwordSecret together: two env entries, the URL's declared first (the
    args refer to it as $(BLUEDOVE_STORE_URL), which the kubelet expands only from earlier ones)."""
    r = render(external(existingSecret="store", existingSecretKey="url", passwordSecret="store-pw"))
    for kind, name in STORE_CLIENTS:
        [c] = r.get(kind, name)["spec"]["template"]["spec"]["containers"]
        assert store_arg(c) == "$(BLUEDOVE_STORE_URL)"
        names = [e["name"] for e in c["env"]]
        assert names.index("BLUEDOVE_STORE_URL") < names.index("BLUEDOVE_STORE_PASSWORD"), name
        assert env_of(c)["BLUEDOVE_STORE_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "store-pw",
                                                                                     "key": "password"}


def test_no_password_env_without_a_password_secret():
    for values in ({}, external(url="redis+cluster://r:6379")):
        r = render(values)
        assert all("BLUEDOVE_STORE_PASSWORD" not in env_of(c) for _, c in containers(r)), values


@pytest.mark.parametrize("url", [
    "redis+cluster://r:6379",
    "redis+cluster://a.data.svc:7000,b.data.svc:7001,[fd00::3]:7002",
    "rediss+cluster://user@a:6379,b:6379/0?wait=1&wait_ms=250",
    "redis+cluster://:pw@a:6379/?wait=0",
    "REDIS+CLUSTER://a:6379",
    "redis://r:6380/2",
    "rediss://user:pw@r/0?ssl_cert_reqs=none",
])
def test_good_urls_pass_as_they_are(url):
    [(_, c)] = [(w, c) for w, c in containers(render(external(url=url))) if w == "StatefulSet/bluedove-matcher"]
    assert store_arg(c) == url


@pytest.mark.parametrize("url, part", [
    ("http://r:6379", "is not a store URL: it starts with redis:// or rediss:// (one server), "
                      "or redis+cluster:// or rediss+cluster:// (a Redis Cluster)"),
    ("unix:///run/redis.sock", "is not a store URL"),
    ("redis+cluster://", "names no node: a Redis Cluster's URL is redis+cluster://host:port[,host:port...]"),
    ("redis+cluster://a:6379,b", 'node "b" is not host:port'),
    ("redis+cluster://a:6379,,b:6379", 'node "" is not host:port'),
    ("redis+cluster://a:6379,b:70000", 'node "b:70000": port 70000 is not in 1-65535'),
    ("redis+cluster://a:6379/1", 'only "/0" (a Redis Cluster has database 0 alone)'),
    ("redis+cluster://a:6379?wiat=1", 'unknown option "wiat" (known: wait, wait_ms)'),
    ("redis+cluster://a:6379?wait=-1", 'wait="-1" is not a whole number >= 0'),
    ("redis+cluster://a:6379?wait", 'wait="" is not a whole number >= 0'),
    ("redis+cluster://a:6379?wait_ms=0", 'wait_ms="0" is not a whole number >= 1'),
    ("redis://a:6379,b:6379", "lists several nodes: a Redis Cluster's URL starts with redis+cluster://"),
    ("rediss://a:6379,b:6379", "starts with rediss+cluster://"),
    ("redis:///0", '"" is not host[:port]'),
    ("redis://r:99999/0", "port 99999 is not in 1-65535"),
])
def test_a_bad_url_is_refused_when_the_chart_renders(url, part):
    """Each a URL the store client would refuse (or could not reach from a pod), with what is
    wrong with it, before anything is installed."""
    with pytest.raises(helm.HelmRenderError) as e:
        render(external(url=url))
    assert "1 problem(s)" in str(e.value)
    assert f'externalRedis.url "{url}"' in str(e.value)  # which value, as given
    assert part in str(e.value)


def test_a_refused_url_is_shown_without_its_password():
    with pytest.raises(helm.HelmRenderError) as e:
        render(external(url="redis+cluster://app:s3cr%40t@a:6379,b"))
    assert 'externalRedis.url "redis+cluster://app:***@a:6379,b": node "b"' in str(e.value)
    assert "s3cr" not in str(e.value)


@pytest.mark.parametrize("values, part", [
    (external(url="redis+cluster://:pw@a:6379", passwordSecret="pw"),
     "externalRedis.url carries a password and externalRedis.passwordSecret is set too"),
    ({"externalRedis": {"passwordSecret": "pw"}}, "externalRedis.passwordSecret with redis.enabled"),
    (external(url="redis+cluster://a:6379", passwordSecret="pw", passwordSecretKey=""),
     "externalRedis.passwordSecret needs externalRedis.passwordSecretKey"),
    (external(url="redis+cluster://a:7000,b:7001", ports=[7000]) | {"networkPolicy": {"enabled": True}},
     "externalRedis.url names port 7001, which the NetworkPolicies' egress does not open (it opens 7000"),
    (external(url="redis://r:6380/0") | {"networkPolicy": {"enabled": True}},
     "externalRedis.url names port 6380, which the NetworkPolicies' egress does not open (it opens 6379"),
])
def test_password_and_port_rules(values, part):
    with pytest.raises(helm.HelmRenderError) as e:
        render(values)
    assert "1 problem(s)" in str(e.value) and part in str(e.value)


def test_egress_opens_every_node_port_and_nothing_else_to_the_store():
    """externalRedis.ports replaces externalRedis.port: the cluster's six ports on each bluedove
    component's NetworkPolicy, 6379 not among them; without it, externalRedis.port alone."""
    r = render(CLUSTER)
    [c] = r.get("StatefulSet", "bluedove-matcher")["spec"]["template"]["spec"]["containers"]
    assert store_arg(c) == CLUSTER["externalRedis"]["url"]
    assert env_of(c)["BLUEDOVE_STORE_PASSWORD"]["valueFrom"] == {"secretKeyRef": PASSWORD_REF}
    for name in NETPOLS:
        rules = egress_ports(r, name)
        assert [7000, 7001, 7002, 7003, 7004, 7005] in rules, name
        assert all(6379 not in ports for ports in rules), name
    r = render(external(url="redis://r:6380/0", port=6380) | {"networkPolicy": {"enabled": True}})
    for name in NETPOLS:
        rules = egress_ports(r, name)
        assert [6380] in rules and all(6379 not in ports for ports in rules), name
    assert render(CLUSTER).find("NetworkPolicy", "bluedove-redis") is None  # no in-chart Redis to guard


@pytest.mark.parametrize("ports, message", [
    ([7000, 7000], "/externalRedis/ports"),
    ([0], "/externalRedis/ports/0"),
    (["7000"], "/externalRedis/ports/0"),
])
def test_the_schema_refuses_bad_ports(ports, message):
    with pytest.raises(helm.HelmValuesError) as e:
        render(external(url="redis+cluster://a:7000", ports=ports))
    assert message in str(e.value)


# URLs the chart and the store client must judge alike (the chart mirrors the client's parser).
AGREED = ["redis+cluster://a:7000,b:7001", "rediss+cluster://u:p@a:6379/0?wait=1&wait_ms=5",
          "redis+cluster://a:6379/", "redis+cluster://a", "redis+cluster://a:6379/1",
          "redis+cluster://a:6379?wait=x", "redis+cluster://a:6379?wait=-1", "redis+cluster://a:6379?wait_ms=0",
          "redis+cluster://a:6379?nope=1", "redis+cluster://"]


@pytest.mark.parametrize("url", AGREED)
def test_the_chart_and_the_store_client_agree_on_cluster_urls(url):
    """Accepted by one iff by the other, and for an accepted URL the NetworkPolicies must open
    exactly the nodes' ports the client will dial: all of them pass, one short is refused.
    Skipped until the store client with cluster URLs is there (it lands from another branch)."""
    client = pytest.importorskip("bluedove.store.client")
    try:
        nodes = client.parse_cluster_url(url).nodes
    except client.StoreUrlError:
        nodes = None
    netpol = {"networkPolicy": {"enabled": True}}
    if nodes is None:
        with pytest.raises(helm.HelmRenderError):
            render(external(url=url))
        return
    ports = sorted({p for _, p in nodes})
    render(external(url=url, ports=ports) | netpol)
    with pytest.raises(helm.HelmRenderError, match=f"names port {ports[-1]}"):
        render(external(url=url, ports=ports[:-1] or [1]) | netpol)
