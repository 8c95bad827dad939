"""The chart's workloads as local processes: each pod's container runs exactly as rendered.

What a kubelet and the cluster's network would give a pod, and nothing more, is supplied
here:
- a pod IP of its own on the loopback range (127.0.X.Y), so every pod binds the ports the
  chart gives it, as in a cluster;
- cluster DNS: a hosts file naming every pod's stable name (`POD.HEADLESS.NS.svc`), every
  headless Service (one record per pod: it publishes not-ready addresses) and every Service
  (the first pod behind it). Each process runs in a mount namespace of its own
  (`unshare --mount`) where that file is bind-mounted on /etc/hosts, so names resolve through
  the ordinary resolver, the gRPC one included;
- the downward API (`fieldRef` metadata.name, metadata.namespace, status.podIP), ConfigMap
  and Secret values, and `$(VAR)` expansion of args, as the kubelet does it;
- volumes: a ConfigMap volume is written to a directory and an emptyDir is an empty one;
  an argument naming a path under a mount is pointed at that directory.
The container's entrypoint is `bluedove` (the image's), so a pod runs `bluedove ARGS…`.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from bluedove.local.cluster import bluedove_command

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: a defined variable is replaced, an undefined one kept
    as written, and `$$` is a literal `$`."""
    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _VAR.sub(one, text)


@dataclass
class Workload:
    kind: str  # Deployment or StatefulSet
    name: str
    replicas: int | None
    service_name: str | None  # a StatefulSet's headless Service
    pod_spec: dict
    labels: dict

    @property
    def container(self) -> dict:
        (c,) = self.pod_spec["containers"]
        return c


def workloads(manifests: list[dict]) -> dict[str, Workload]:
    out = {}
    for m in manifests:
        if m.get("kind") in ("Deployment", "StatefulSet"):
            spec = m["spec"]
            tpl = spec["template"]
            out[m["metadata"]["name"]] = Workload(m["kind"], m["metadata"]["name"], spec.get("replicas"),
                                                  spec.get("serviceName"), tpl["spec"],
                                                  tpl["metadata"].get("labels", {}))
    return out


def by_kind(manifests: list[dict], kind: str) -> dict[str, dict]:
    return {m["metadata"]["name"]: m for m in manifests if m.get("kind") == kind}


@dataclass
class Pod:
    name: str
    ip: str
    workload: Workload
    namespace: str
    root: Path  # this pod's volumes live under it
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    log_path: Path | None = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class PodNetwork:
    """Pod IPs, cluster DNS (a hosts file) and the processes of one namespace's pods."""

    def __init__(self, manifests: list[dict], namespace: str, root: Path, subnet: int) -> None:
        self.manifests = manifests
        self.namespace = namespace
        self.root = root
        self.subnet = subnet  # pods get 127.0.<subnet>.<n>
        self.configmaps = by_kind(manifests, "ConfigMap")
        self.secrets = by_kind(manifests, "Secret")
        self.services = by_kind(manifests, "Service")
        self.pods: dict[str, Pod] = {}
        self._next_ip = 10
        self.hosts_path = root / "hosts"

    # -- pods ------------------------------------------------------------------------------
    def add_pod(self, workload: Workload, name: str) -> Pod:
        ip = f"127.0.{self.subnet}.{self._next_ip}"
        self._next_ip += 1
        pod = Pod(name, ip, workload, self.namespace, self.root / name)
        pod.root.mkdir(parents=True, exist_ok=True)
        mounts = self._volumes(pod)
        pod.env = {k: self._localise(v, mounts, None) for k, v in self._env(pod).items()}
        pod.args = [self._localise(expand(a, pod.env), mounts, pod.ip)
                    for a in [*workload.container.get("command", [])[1:], *workload.container.get("args", [])]]
        self.pods[name] = pod
        self.write_hosts()
        return pod

    def _env(self, pod: Pod) -> dict[str, str]:
        env: dict[str, str] = {}
        for e in pod.workload.container.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(str(e["value"]), env)
                continue
            src = e["valueFrom"]
            if "fieldRef" in src:
                path = src["fieldRef"]["fieldPath"]
                env[e["name"]] = {"metadata.name": pod.name, "metadata.namespace": pod.namespace,
                                  "status.podIP": pod.ip}[path]
            elif "secretKeyRef" in src:
                ref = src["secretKeyRef"]
                secret = self.secrets[ref["name"]]
                data = {**{k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()},
                        **secret.get("stringData", {})}
                env[e["name"]] = data[ref["key"]]
            elif "configMapKeyRef" in src:
                ref = src["configMapKeyRef"]
                env[e["name"]] = self.configmaps[ref["name"]]["data"][ref["key"]]
            else:
                raise ValueError(f"{pod.name}: env {e['name']}: unsupported source {src}")
        return env

    def _volumes(self, pod: Pod) -> dict[str, Path]:
        """mountPath -> local directory."""
        dirs: dict[str, Path] = {}
        for v in pod.workload.pod_spec.get("volumes", []):
            d = pod.root / "volumes" / v["name"]
            d.mkdir(parents=True, exist_ok=True)
            if "configMap" in v:
                for key, text in self.configmaps[v["configMap"]["name"]].get("data", {}).items():
                    (d / key).write_text(text)
            elif "emptyDir" not in v:
                raise ValueError(f"{pod.name}: volume {v['name']}: only configMap and emptyDir are supported here")
            dirs[v["name"]] = d
        return {m["mountPath"]: dirs[m["name"]] for m in pod.workload.container.get("volumeMounts", [])}

    @staticmethod
    def _localise(arg: str, mounts: dict[str, Path], ip: str | None) -> str:
        if arg == "0.0.0.0" and ip:
            return ip  # the pod's own address: every pod binds the same ports, on its own IP
        for mount, local in mounts.items():
            if arg == mount or arg.startswith(mount.rstrip("/") + "/"):
                return str(local) + arg[len(mount.rstrip("/")):]
        return arg

    # -- DNS -------------------------------------------------------------------------------
    def write_hosts(self) -> None:
        lines = ["127.0.0.1 localhost"]
        suffix = f"{self.namespace}.svc"
        for svc_name, svc in self.services.items():
            selector = svc["spec"].get("selector", {})
            behind = [p for p in self.pods.values()
                      if selector and all(p.workload.labels.get(k) == v for k, v in selector.items())]
            headless = svc["spec"].get("clusterIP") == "None"
            for p in (behind if headless else behind[:1]):
                for name in (f"{svc_name}.{suffix}", f"{svc_name}.{suffix}.cluster.local"):
                    lines.append(f"{p.ip} {name}")
        for p in self.pods.values():
            if p.workload.service_name:
                base = f"{p.name}.{p.workload.service_name}.{suffix}"
                lines += [f"{p.ip} {base}", f"{p.ip} {base}.cluster.local"]
        tmp = self.hosts_path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        # Bind mounts follow the inode: rewrite in place so running pods see new names.
        if self.hosts_path.exists():
            with open(self.hosts_path, "w") as f:
                f.write(tmp.read_text())
            tmp.unlink()
        else:
            tmp.rename(self.hosts_path)

    # -- processes -------------------------------------------------------------------------
    def start(self, pod: Pod, extra_env: dict[str, str] | None = None) -> None:
        pod.log_path = pod.root / "log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "BLUEDOVE_"))}
        env.update(pod.env)
        # gRPC's own resolver (c-ares) reads a hosts file differently from libc: with several
        # names sharing a suffix it answers every pod's name with the first pod's address. A
        # cluster's DNS server answers each name exactly; libc's resolver over this file does too.
        env["GRPC_DNS_RESOLVER"] = "native"
        env.update(extra_env or {})
        script = 'mount --bind "$0" /etc/hosts && exec "$@"'
        argv = ["unshare", "--mount", "sh", "-c", script, str(self.hosts_path), *bluedove_command(), *pod.args]
        with open(pod.log_path, "ab") as log:
            pod.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True)

    def terminate(self, pod: Pod, timeout_s: float) -> int | None:
        """SIGTERM, as the kubelet sends it; SIGKILL after the grace period. The exit code."""
        if not pod.alive():
            return pod.proc.returncode if pod.proc else None
        pod.proc.send_signal(signal.SIGTERM)
        try:
            return pod.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pod.proc.kill()
            return pod.proc.wait()

    def stop_all(self) -> None:
        for p in self.pods.values():
            if p.alive():
                p.proc.send_signal(signal.SIGTERM)
        for p in self.pods.values():
            if p.proc is not None:
                try:
                    p.proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.proc.pid, signal.SIGKILL)
                    p.proc.wait()

    def tail(self, pod: Pod, n: int = 3000) -> str:
        return pod.log_path.read_text()[-n:] if pod.log_path and pod.log_path.exists() else ""
