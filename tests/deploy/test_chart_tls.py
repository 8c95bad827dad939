"""The chart's in-cluster TLS (values `tls`): the Secret's files reach the matchers, the
dispatchers and the autoscaler as the BLUEDOVE_TLS_* settings they read; probes use a scheme
that works (the kubelet's gRPC probe speaks no TLS); the connection test speaks HTTPS."""

from __future__ import annotations

import helm_python as helm
import pytest

from bluedove.runtime.settings import DispatcherSettings, MatcherSettings, TlsSettings, from_env
from tests.deploy.chart import CHART, load_values, render
from tests.deploy.test_chart_contract import container, env_of, pod_spec

TLS = load_values(CHART / "ci" / "tls-values.yaml")
WORKLOADS = (("StatefulSet", "bluedove-matcher", MatcherSettings),
             ("Deployment", "bluedove-dispatcher", DispatcherSettings),
             ("Deployment", "bluedove-autoscaler", TlsSettings))


@pytest.mark.parametrize("kind, name, settings", WORKLOADS)
def test_each_component_reads_the_secrets_files_as_its_tls_settings(monkeypatch, kind, name, settings):
    obj = render(TLS).get(kind, name)
    c, spec = container(obj), pod_spec(obj)
    env = {k: e["value"] for k, e in env_of(c).items() if k.startswith("BLUEDOVE_TLS_")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    s = from_env(settings)
    assert (s.tls_cert, s.tls_key, s.tls_ca) == ("/etc/bluedove-tls/tls.crt", "/etc/bluedove-tls/tls.key",
                                                 "/etc/bluedove-tls/ca.crt")
    # every internal connection checks the matchers' headless Service name (pods gossip IPs)
    assert s.tls_server_name == "bluedove-matcher-headless.bd.svc"
    [mount] = [m for m in c["volumeMounts"] if m["name"] == "tls"]
    assert mount == {"name": "tls", "mountPath": "/etc/bluedove-tls", "readOnly": True}
    assert {"name": "tls", "secret": {"secretName": "bluedove-internal-tls"}} in spec["volumes"]


def test_without_tls_nothing_of_it_is_rendered():
    for kind, name, _ in WORKLOADS:
        obj = render().get(kind, name)
        c = container(obj)
        assert not [k for k in env_of(c) if k.startswith("BLUEDOVE_TLS_")]
        assert "tls" not in {v["name"] for v in pod_spec(obj)["volumes"]}


def test_probes_use_a_scheme_that_works_with_tls():
    r = render(TLS)
    m = container(r.get("StatefulSet", "bluedove-matcher"))
    # the matcher's gRPC port now requires client certificates: its plain metrics port answers
    assert m["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert m["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert m["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "grpc" not in m["readinessProbe"]
    d = container(r.get("Deployment", "bluedove-dispatcher"))
    assert d["livenessProbe"]["httpGet"]["scheme"] == d["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert "scheme" not in container(render().get("Deployment", "bluedove-dispatcher"))["livenessProbe"]["httpGet"]


def test_the_connection_test_trusts_the_ca_over_https():
    pod = render(TLS).get("Pod", "bluedove-test-connection")
    c = container(pod)
    assert c["command"][-1] == "https://bluedove-dispatcher:8080/readyz"
    assert env_of(c)["BLUEDOVE_TLS_CA"]["value"] == "/etc/bluedove-tls/ca.crt"
    assert {"name": "tls", "secret": {"secretName": "bluedove-internal-tls"}} in pod["spec"]["volumes"]


def test_the_service_monitor_scrapes_over_https_trusting_the_ca():
    r = render(TLS | {"metrics": {"serviceMonitor": {"enabled": True}}})
    [ep] = r.get("ServiceMonitor", "bluedove-dispatcher")["spec"]["endpoints"]
    assert ep["scheme"] == "https"
    assert ep["tlsConfig"]["ca"] == {"secret": {"name": "bluedove-internal-tls", "key": "ca.crt"}}


def test_a_server_name_value_replaces_the_default():
    c = container(render(TLS | {"tls": {**TLS["tls"], "serverName": "bluedove.internal"}}).get(
        "StatefulSet", "bluedove-matcher"))
    assert env_of(c)["BLUEDOVE_TLS_SERVER_NAME"]["value"] == "bluedove.internal"


def test_tls_without_a_secret_is_refused():
    with pytest.raises(helm.HelmRenderError) as e:
        render({"tls": {"enabled": True}})
    assert "tls.enabled needs tls.secretName" in str(e.value)
