"""The Kubernetes backend: scales the matcher StatefulSet through its `scale` subresource."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from bluedove.autoscaler.backends import Drainer
from bluedove.autoscaler.drain import drain, pods_to_drain

# Only the replica count changes here. A new pod joins through gossip and is given segments by
# a split. Scale-in drains first (bluedove/autoscaler/drain.py): the pod the StatefulSet removes next (the
# highest ordinal) is asked to leave and its segments merged into neighbours' before the replicas
# go down by one; a pod that owned nothing gets SIGTERM and, run with `bluedove matcher
# --leave-on-sigterm`, still hands off whatever it was given meanwhile.
#
# Two requests, both on `apps/v1` `statefulsets/scale` (the Role in
# deploy/helm/bluedove/templates/autoscaler/role.yaml grants exactly these):
#   current()     GET   /apis/apps/v1/namespaces/NS/statefulsets/NAME/scale
#   scale_to(n)   PATCH the same path, `application/merge-patch+json`, `{"spec": {"replicas": n}}`;
#                 with a drainer, a GET first, and for scale-in one PATCH per pod, each after its drain

# A merge patch touches only the fields it names. Sent explicitly: the client's default for a
# dict body is a strategic merge patch, chosen by rules that changed between client versions.
SCALE_PATCH = "application/merge-patch+json"
SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"
DEFAULT_KUBECONFIG = "~/.kube/config"
# Mounted into every pod with a service account token: the pod's own namespace.
POD_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class KubernetesConfigError(RuntimeError):
    """No usable way to reach an API server was found."""


class KubernetesBackendError(RuntimeError):
    """The API server refused or failed a request; the message says which and why."""


def pod_namespace(path: str = POD_NAMESPACE_FILE) -> str | None:
    """The namespace of the pod we run in, or None outside a pod."""
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def load_configuration() -> client.Configuration:
    """The client's configuration: in a pod its service account, elsewhere the kubeconfig.

    A pod is recognised by KUBERNETES_SERVICE_HOST (set by the kubelet in every container).
    Elsewhere KUBECONFIG (a list of paths, as kubectl reads it) or ~/.kube/config is used.
    """
    cfg = client.Configuration()
    if os.environ.get(SERVICE_HOST_ENV):
        try:  # the client's config loaders carry no annotations
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except config.ConfigException as e:
            raise KubernetesConfigError(
                f"running in a pod ({SERVICE_HOST_ENV} is set) but its service account cannot be used: {e} "
                "(is automountServiceAccountToken off for the autoscaler's pod?)") from None
        return cfg
    listed = os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    paths = [os.path.expanduser(p) for p in listed.split(os.pathsep) if p]
    found = [p for p in paths if os.path.isfile(p)]
    if not found:
        where = "KUBECONFIG=" + listed if os.environ.get("KUBECONFIG") else DEFAULT_KUBECONFIG
        raise KubernetesConfigError(
            f"no Kubernetes configuration: not in a pod ({SERVICE_HOST_ENV} is unset) and no kubeconfig "
            f"file at {where}; run the autoscaler in the cluster (the Helm chart gives it a service "
            "account), or point KUBECONFIG at a kubeconfig file")
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=os.pathsep.join(found), client_configuration=cfg, persist_config=False)
    except config.ConfigException as e:
        raise KubernetesConfigError(f"kubeconfig {os.pathsep.join(found)}: {e}") from None
    return cfg


class KubernetesBackend:
    """Sets the replica count of the matcher StatefulSet `namespace/statefulset`."""

    name = "kubernetes"

    def __init__(self, statefulset: str, namespace: str, api: client.AppsV1Api | None = None,
                 timeout_s: float = 10.0, drainer: Drainer | None = None, drain_timeout_s: float = 120.0) -> None:
        self.statefulset = statefulset
        self.namespace = namespace
        self.api = api if api is not None else client.AppsV1Api(client.ApiClient(load_configuration()))
        self.timeout_s = timeout_s
        # None: scale-in only patches the replicas (the pods leave on SIGTERM). `bluedove autoscaler`
        # always sets one once its store is open.
        self.drainer = drainer
        self.drain_timeout_s = drain_timeout_s

    @property
    def target(self) -> str:
        return f"statefulset {self.namespace}/{self.statefulset}"

    def current(self) -> int:
        """The replicas asked for (spec), not the pods running: pods still starting or leaving
        count as they will be, as the local backend does not count matchers that are leaving."""
        scale = self._call("get", self.api.read_namespaced_stateful_set_scale)
        # ScaleSpec.replicas is `omitempty`: zero replicas arrive as no field at all.
        return (scale.spec.replicas if scale.spec else None) or 0

    def scale_to(self, n: int) -> str:
        if n < 0:
            raise ValueError(f"replicas must be >= 0, not {n}")
        if self.drainer is not None:
            replicas = self.current()
            if n < replicas:
                return self._drain_and_scale_in(self.drainer, replicas, n)
        return self._patch(n)

    def _drain_and_scale_in(self, drainer: Drainer, replicas: int, n: int) -> str:
        """One pod at a time, the highest ordinal first: drain it, then one replica fewer. Stops at
        the first pod that does not drain, with the replicas left as they are."""
        said = []
        for pod in pods_to_drain(self.statefulset, replicas, n):
            ok, what = drain(drainer, pod, self.drain_timeout_s)
            if not ok:
                said.append(f"{what}; {self.target} stays at {replicas} replicas")
                break
            replicas -= 1
            said.append(f"{what}; {self._patch(replicas)}")
        return "; ".join(said)

    def _patch(self, n: int) -> str:
        scale = self._call("patch", self.api.patch_namespaced_stateful_set_scale,
                           {"spec": {"replicas": n}}, _content_type=SCALE_PATCH)
        running = (scale.status.replicas if scale.status else None) or 0
        return f"{self.target} set to {n} replicas ({running} pods running)"

    def _call(self, verb: str, method: Callable[..., client.V1Scale], *body: object, **kw: object) -> client.V1Scale:
        try:
            return method(self.statefulset, self.namespace, *body, _request_timeout=self.timeout_s, **kw)
        except ApiException as e:
            raise KubernetesBackendError(self._explain(verb, e)) from None
        except urllib3.exceptions.HTTPError as e:
            raise KubernetesBackendError(
                f"{verb} {self.target}/scale: cannot reach the API server at {self.api.api_client.configuration.host}: "
                f"{e}") from None

    def _explain(self, verb: str, e: ApiException) -> str:
        said = e.reason or ""
        try:
            said = json.loads(e.body or "").get("message") or said
        except (ValueError, AttributeError):
            pass
        if e.status == 403:
            return (f"not allowed to {verb} {self.target}/scale ({said}); the autoscaler's service account "
                    "needs get and patch on statefulsets/scale in this namespace (the chart's autoscaler Role)")
        if e.status == 404:
            return f"{self.target} not found ({said}); check --statefulset and --namespace"
        return f"{verb} {self.target}/scale: HTTP {e.status} {said}"
