"""What the autoscaler observes besides the matchers' load reports, to tell whether matchers
are the limit (bluedove/autoscaler/policy.py): the accepted rate and publish latency the dispatchers
record in the store's series, the dispatchers' CPU from their heartbeats, Redis's CPU from
INFO, and, when the matchers run on this host (the local backend), the host's CPU.

Each reading is None when it cannot be had (no dispatcher heartbeat with a CPU yet, a store
that refuses INFO, no /proc); the policy then leaves it out. CPU figures are fractions: of one
core for a process (dispatcher, Redis: each serves on one event loop), of all cores for the host.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from bluedove.core import timeseries as ts
from bluedove.store.series import read_records
from bluedove.store.store import AutoscalerStore

log = logging.getLogger("bluedove.autoscaler")


@dataclass(frozen=True)
class Signals:
    """One reading of the cluster besides the matchers' load; None where it could not be had."""

    accepted: float | None = None        # messages accepted per second (the last settled second)
    p50_s: float | None = None           # their publish latency's median
    dispatcher_cpu: float | None = None  # the busiest dispatcher's CPU, fraction of one core
    store_cpu: float | None = None       # Redis's CPU, fraction of one core (the busiest node)
    store_errors: int = 0                # store reads that failed in this sample
    host_cpu: float | None = None        # this host's CPU, fraction of all its cores


class HostCpu:
    """Busy fraction of all the host's cores between two readings of /proc/stat (Linux)."""

    def __init__(self, path: str = "/proc/stat") -> None:
        self.path = path
        self._last: tuple[float, float] | None = None

    def read(self) -> float | None:
        try:
            with open(self.path, encoding="ascii") as f:
                values = [float(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        if len(values) < 4:
            return None
        idle = values[3] + (values[4] if len(values) > 4 else 0.0)  # idle + iowait
        total = sum(values[:8])  # guest time is already counted in user
        last, self._last = self._last, (idle, total)
        if last is None or total <= last[1]:
            return None
        return round(1.0 - (idle - last[0]) / (total - last[1]), 4)


class StoreCpu:
    """Redis's CPU (INFO cpu: used_cpu_user + used_cpu_sys) between two readings, as a
    fraction of one core; for a Redis Cluster the busiest node's."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}

    def update(self, info: dict[str, Any], now: float) -> float | None:
        nodes = info if info and all(isinstance(v, dict) for v in info.values()) else {"": info}
        fractions = []
        for node, section in nodes.items():
            try:
                used = float(section["used_cpu_user"]) + float(section["used_cpu_sys"])
            except (KeyError, TypeError, ValueError):
                continue
            last = self._last.get(node)
            self._last[node] = (now, used)
            if last is not None and now > last[0]:
                fractions.append(max(0.0, (used - last[1]) / (now - last[0])))
        return round(max(fractions), 4) if fractions else None


class SignalReader:
    """Reads the Signals once per autoscaler step."""

    def __init__(self, store: AutoscalerStore, host: bool) -> None:
        self.store = store
        self.host = HostCpu() if host else None
        self.store_cpu = StoreCpu()

    async def read(self) -> Signals:
        errors = 0
        accepted = p50 = disp = scpu = None
        try:
            accepted, p50 = await self._series()
        except Exception as exc:  # noqa: BLE001 - a failed store read is itself a signal
            errors += 1
            log.debug("series read failed: %r", exc)
        try:
            disp = await self._dispatchers()
        except Exception as exc:  # noqa: BLE001
            errors += 1
            log.debug("dispatchers read failed: %r", exc)
        try:
            scpu = self.store_cpu.update(await self.store.r.info("cpu"), time.monotonic())
        except Exception as exc:  # noqa: BLE001 - INFO may be refused (a managed Redis); not an error of the store
            log.debug("INFO cpu failed: %r", exc)
        return Signals(accepted, p50, disp, scpu, errors, self.host.read() if self.host else None)

    async def _series(self) -> tuple[float | None, float | None]:
        """The last settled second of the cluster's series: messages published, their p50."""
        t = math.floor(time.time() - 1 - ts.SETTLE_S)
        rec = (await read_records(self.store, [t]))[0]
        if not rec:
            return None, None
        hist = [float(rec.get(f, 0) or 0) for f in ts.LATENCY_FIELDS]
        published = rec.get(ts.PUBLISHED)
        return (float(published) if published is not None else None), ts.quantile(hist, 0.5)

    async def _dispatchers(self) -> float | None:
        cpus = [float(d["cpu"]) for d in await self.store.dispatchers()
                if isinstance(d.get("cpu"), (int, float)) and math.isfinite(d["cpu"])]
        return max(cpus) if cpus else None
