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
