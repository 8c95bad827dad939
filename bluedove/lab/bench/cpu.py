"""CPU time of the processes a bench starts, and of the whole machine (psutil: the `lab` extra)."""

from __future__ import annotations

import psutil


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def machine_ticks() -> tuple[float, float]:
    """(busy, total) CPU seconds of all CPUs so far (idle and iowait are not busy)."""
    t = psutil.cpu_times()
    total = sum(t)
    return total - t.idle - getattr(t, "iowait", 0.0), total


def role(name: str) -> str:
    """The role of a bench process by its name: m1… matchers, d1… dispatchers, P1… publishers,
    F1… feeders, Q1… pollers, "redis" (one server), redis-p1… primaries, redis-r1… replicas."""
    if name.startswith("redis"):
        return "redis_replicas" if name.startswith("redis-r") else "redis"
    return {"m": "matchers", "d": "dispatchers", "P": "publishers", "F": "feeders", "Q": "pollers"}.get(name[0], name)
