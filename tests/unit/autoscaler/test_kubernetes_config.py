"""How the Kubernetes backend finds its API server: in-cluster, else a kubeconfig, else a clear error."""

from __future__ import annotations

import os

import pytest
import yaml

from bluedove.autoscaler.kubernetes import KubernetesBackend, KubernetesConfigError, load_configuration, pod_namespace
from bluedove.cli.main import build_parser

IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


@pytest.fixture
def outside_a_pod(monkeypatch, tmp_path):
    """No KUBERNETES_SERVICE_HOST, no KUBECONFIG, and a HOME without ~/.kube."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def write_kubeconfig(path, server="https://10.0.0.1:6443", token="t0k3n", current="ctx"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    }))
    return path


def test_nothing_found_says_what_was_tried_and_what_to_do(outside_a_pod):
    with pytest.raises(KubernetesConfigError) as e:
        load_configuration()
    assert str(e.value) == (
        "no Kubernetes configuration: not in a pod (KUBERNETES_SERVICE_HOST is unset) and no kubeconfig "
        "file at ~/.kube/config; run the autoscaler in the cluster (the Helm chart gives it a service "
        "account), or point KUBECONFIG at a kubeconfig file")


def test_a_kubeconfig_variable_naming_no_file_is_quoted(outside_a_pod, monkeypatch):
    missing = outside_a_pod / "missing.yaml"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    with pytest.raises(KubernetesConfigError, match=f"no kubeconfig file at KUBECONFIG={missing};"):
        load_configuration()


def test_the_default_kubeconfig_is_read(outside_a_pod):
    write_kubeconfig(outside_a_pod / ".kube" / "config")
    cfg = load_configuration()
    assert cfg.host == "https://10.0.0.1:6443"
    assert cfg.api_key["BearerToken"] == "Bearer t0k3n"


def test_kubeconfig_wins_over_the_default_and_may_list_files(outside_a_pod, monkeypatch):
    write_kubeconfig(outside_a_pod / ".kube" / "config", server="https://default:6443")
    mine = write_kubeconfig(outside_a_pod / "mine.yaml", server="https://mine:6443")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(outside_a_pod / "absent.yaml"), str(mine)]))
    assert load_configuration().host == "https://mine:6443"


def test_a_broken_kubeconfig_is_named(outside_a_pod):
    path = write_kubeconfig(outside_a_pod / ".kube" / "config", current="no-such-context")
    with pytest.raises(KubernetesConfigError, match=f"^kubeconfig {path}: .*no-such-context"):
        load_configuration()


@pytest.mark.skipif(os.path.exists(IN_CLUSTER_TOKEN), reason="this machine is a pod with a service account")
def test_in_a_pod_the_service_account_is_used_even_with_a_kubeconfig(outside_a_pod, monkeypatch):
    write_kubeconfig(outside_a_pod / ".kube" / "config")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(KubernetesConfigError) as e:
        load_configuration()
    assert str(e.value).startswith("running in a pod (KUBERNETES_SERVICE_HOST is set) but its service account "
                                   "cannot be used: Service token file does not exist.")
    assert "automountServiceAccountToken" in str(e.value)


def test_the_backend_without_a_client_loads_the_configuration(outside_a_pod):
    with pytest.raises(KubernetesConfigError, match="no Kubernetes configuration"):
        KubernetesBackend("bluedove-matcher", "bd")
    write_kubeconfig(outside_a_pod / ".kube" / "config")
    backend = KubernetesBackend("bluedove-matcher", "bd")
    assert backend.api.api_client.configuration.host == "https://10.0.0.1:6443"


def test_pod_namespace(tmp_path):
    (tmp_path / "namespace").write_text("bd\n")
    assert pod_namespace(str(tmp_path / "namespace")) == "bd"
    assert pod_namespace(str(tmp_path / "absent")) is None


def test_the_command_exits_2_with_the_message(outside_a_pod, capsys):
    args = build_parser().parse_args(["autoscaler", "--statefulset", "bluedove-matcher", "--store",
                                      "redis://127.0.0.1:1/0"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("bluedove autoscaler: no Kubernetes configuration: not in a pod")


@pytest.mark.parametrize("flags", [["--min-matchers", "5", "--max-matchers", "3"], ["--min-matchers", "-1"]])
def test_the_command_refuses_bad_bounds(outside_a_pod, capsys, flags):
    args = build_parser().parse_args(["autoscaler", "--statefulset", "s", "--store", "redis://h/0", *flags])
    assert args.func(args) == 2
    assert "need 0 <= min" in capsys.readouterr().err
