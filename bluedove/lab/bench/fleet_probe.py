"""What `bench fleet` places and samples: each queue's point (a publish there reaches that queue
alone) and, per dispatcher and for Redis, connections, open files and RSS at a moment.

Queue i's point has cell (i mod 1000, i div 1000 mod 1000, …) of a 1000-cell grid on each
dimension (the first two set it apart from every other queue's up to 1,000,000 queues; the
others spread the queues over every dimension); its subscription is the middle half of that
cell on every dimension, so no other queue's box holds its point.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import psutil
import redis

from bluedove.core.space import Space

CELLS = 1000
MAX_QUEUES = CELLS * CELLS  # queues whose points the first two dimensions tell apart
_SPREAD = (379, 613, 211, 827, 457, 139)  # the third dimension's cell multiplier, the fourth's, …


def _cells(i: int, dims: int) -> list[int]:
    out = [i % CELLS, (i // CELLS) % CELLS]
    out += [(i * _SPREAD[(j - 2) % len(_SPREAD)] + 500 * j) % CELLS for j in range(2, dims)]
    return out[:dims]


def queue_point(space: Space, i: int) -> dict[str, float]:
    """The middle of queue i's cell: a message here matches queue i's subscription and no other."""
    return {d.name: d.min + (c + 0.5) * (d.max - d.min) / CELLS
            for d, c in zip(space.dimensions, _cells(i, len(space.dimensions)))}


def queue_box(space: Space, i: int) -> dict[str, tuple[float, float]]:
    """Queue i's subscription: the middle half of its cell on every dimension."""
    out = {}
    for d, c in zip(space.dimensions, _cells(i, len(space.dimensions))):
        w = (d.max - d.min) / CELLS
        out[d.name] = (d.min + (c + 0.25) * w, d.min + (c + 0.75) * w)
    return out


def process_sample(pid: int, redis_port: int, http_port: int) -> dict[str, Any]:
    """A process's open files, RSS (MB) and established TCP connections to Redis and from HTTP
    clients (its sockets, from /proc: psutil)."""
    try:
        p = psutil.Process(pid)
        conns = p.net_connections(kind="tcp")
        rss, fds = p.memory_info().rss, p.num_fds()
    except psutil.Error as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    up = [c for c in conns if c.status == psutil.CONN_ESTABLISHED]
    return {"redis_connections": sum(1 for c in up if c.raddr and c.raddr.port == redis_port),
            "http_connections": sum(1 for c in up if c.laddr.port == http_port),
            "fds": fds, "rss_mb": round(rss / 2**20, 1)}


def runqueue_wait_s(pid: int) -> float:
    """Seconds a process's threads have so far spent runnable but waiting for a CPU (the second
    field of /proc/PID/task/TID/schedstat): high while other processes hold the cores."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def redis_sample(url: str, pid: int | None) -> dict[str, Any]:
    """Redis's connected_clients (INFO clients; this sample's own connection among them), and
    its process's open files and RSS (MB) when it runs here."""
    out: dict[str, Any] = {}
    try:
        with contextlib.closing(redis.Redis.from_url(url, socket_timeout=10)) as r:
            out["connected_clients"] = int(r.info("clients")["connected_clients"])
    except redis.RedisError as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    if pid is not None:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            out |= {"fds": p.num_fds(), "rss_mb": round(p.memory_info().rss / 2**20, 1)}
    return out


def sample(dispatchers: dict[str, int], http_port: int, store_url: str, redis_pid: int | None) -> dict[str, Any]:
    """{dispatcher name: process_sample, "redis": redis_sample} now."""
    port = int(store_url.rsplit(":", 1)[1].split("/", 1)[0])
    out = {name: process_sample(pid, port, http_port) for name, pid in dispatchers.items()}
    out["redis"] = redis_sample(store_url, redis_pid)
    return out
