"""One process of a local cluster: the `bluedove <role> …` command line that starts it, its log and restarts.

Each child runs in a session of its own (a Ctrl-C to the terminal reaches the supervisor, which
stops them); its output goes to its log file, appended to across restarts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bluedove.local.cpu_quota import CpuQuota
from bluedove.store.server import free_port

# What a process that could not listen on its port prints (gRPC's bind error, and Python's)
BIND_FAILED = ("Address already in use", "Failed to bind to address")
# The ports a local cluster picks for a child (never the ones a user gave: --http-port, --grpc-port)
PICKED_PORTS = ("--port", "--metrics-port", "--gossip-port")


def bluedove_command() -> list[str]:
    """How to start a role: the console script beside this interpreter, else `python -m`."""
    script = Path(sys.executable).parent / "bluedove"
    if script.exists():
        return [str(script)]
    found = shutil.which("bluedove")
    return [found] if found else [sys.executable, "-m", "bluedove"]


@dataclass
class Child:
    """One process of the local cluster: its role, command line and log, and how often it restarted."""

    role: str
    name: str
    args: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)
    cpu: CpuQuota | None = None  # its CPU quota: each start goes into its own cgroup (None: uncapped)
    log_from: int = 0  # where this start's output begins in the log

    def start(self) -> None:
        env = {**os.environ, **self.extra_env}
        self.log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        if self.cpu is not None:
            self.cpu.cap(self.proc.pid, self.name)

    def bind_failed(self) -> bool:
        """True if this start's output says a port it was to listen on was taken: picked free,
        then bound by another process before this one started (two clusters on one machine)."""
        with open(self.log_path, "rb") as log:
            log.seek(self.log_from)
            text = log.read().decode(errors="replace")
        return any(s in text for s in BIND_FAILED)

    def pick_ports(self) -> dict[str, int]:
        """Free ports in place of those the cluster picked for it (PICKED_PORTS): {flag: port}."""
        out = {}
        for i, arg in enumerate(self.args[:-1]):
            if arg in PICKED_PORTS:
                out[arg] = free_port()
                self.args[i + 1] = str(out[arg])
        return out

    def forget(self) -> None:
        """The process is gone for good (it left, or died and is not restarted): drop it and its cgroup."""
        self.proc = None
        if self.cpu is not None:
            self.cpu.release(self.name)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
