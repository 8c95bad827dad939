"""The autoscaler loop: sample the matchers' loads, ask the policy, let a backend act, log why."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from datetime import datetime, timezone

import grpc

from autoscaler.backends import Backend
from autoscaler.policy import Decision, LoadSample, ScalingConfig, plan
from bluedove.forwarding import LoadReport
from bluedove.store import Store
from bluedove.store.series import put_gauges
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

log = logging.getLogger("bluedove.autoscaler")


class Autoscaler:
    def __init__(self, backend: Backend, store: Store, config: ScalingConfig = ScalingConfig(),
                 interval_s: float = 1.0) -> None:
        self.backend = backend
        self.store = store
        self.config = config
        self.interval_s = interval_s
        self.history: list[LoadSample] = []
        self.last_change_at: float | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}
        # What the last step saw and chose, and decisions by action (autoscaler/metrics.py).
        self.last_sample: LoadSample | None = None
        self.members: int | None = None
        self.desired: int | None = None
        self.decisions: dict[str, int] = {}

    async def run(self, stop: asyncio.Event) -> None:
        # The heartbeat has its own task: a step may take long (a scale-in drains a matcher
        # first, up to its drain timeout), and the cluster must not see the autoscaler as off.
        beat = asyncio.get_running_loop().create_task(self._heartbeat(stop))
        try:
            while not stop.is_set():
                try:
                    await self.step(time.monotonic())
                except Exception:
                    log.exception("autoscaler step failed")
                if await _stopped(stop, self.interval_s):
                    break
        finally:
            beat.cancel()
            for ch in self._channels.values():
                await ch.close()

    async def _heartbeat(self, stop: asyncio.Event) -> None:
        """Say in the store that we run, with our limits, every interval (/v1/cluster shows it)."""
        while not stop.is_set():
            try:
                await self.store.put_autoscaler({"enabled": True, "min": self.config.min_matchers,
                                                 "max": self.config.max_matchers, "backend": self.backend.name},
                                                ttl_s=max(5, int(self.interval_s * 5)))
            except Exception:
                log.exception("autoscaler heartbeat failed")
            if await _stopped(stop, self.interval_s):
                return

    async def step(self, now: float) -> Decision | None:
        sample = await self.sample(now)
        if sample is None:
            return None
        self.history.append(sample)
        horizon = now - max(self.config.window_s, self.config.in_window_s) - 5
        self.history = [s for s in self.history if s.at >= horizon]
        members = await asyncio.to_thread(self.backend.current)
        d = plan(self.history, members, now, self.last_change_at, self.config)
        self.last_sample, self.members, self.desired = sample, members, d.target
        self.decisions[d.action] = self.decisions.get(d.action, 0) + 1
        await self._record(sample, d)
        if d.action == "hold":
            return d
        self.last_change_at = now
        log.warning("%s to %d: %s", d.action, d.target, d.reason)
        done = await asyncio.to_thread(self.backend.scale_to, d.target)
        await self.store.add_event({
            "at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "action": d.action,
            "reason": f"{d.reason}; {self.backend.name}: {done}",
            "matchers": d.target,
        })
        return d

    async def _record(self, sample: LoadSample, d: Decision) -> None:
        """This step in the cluster's time series (/v1/stats): the value acted on, the
        thresholds, the target."""
        try:
            await put_gauges(self.store, {"autoscaler_input": round(sample.busy, 4),
                                          "autoscaler_out": self.config.out_busy,
                                          "autoscaler_in": self.config.in_busy, "matchers_desired": d.target})
        except Exception as exc:  # noqa: BLE001 - the series is not worth a step
            log.warning("could not record the autoscaler's step: %r", exc)

    async def sample(self, now: float) -> LoadSample | None:
        """Demand Σ λ/μ and queued messages over the table's owners (from their Report RPC)."""
        raw = await self.store.get_table()
        if not raw:
            return None
        owners: dict[str, str] = raw["members"]
        replies = await asyncio.gather(*(self._report(a) for a in owners.values()), return_exceptions=True)
        demand, queued, seen = 0.0, 0, 0
        for r in replies:
            if isinstance(r, BaseException):
                continue
            seen += 1
            for d in r.dims:
                load = LoadReport(lam=d.lam, mu=d.mu, q=d.q, subs=d.subs)
                demand += load.busy if not math.isnan(load.busy) else 0.0
                queued += d.q
        if not seen:
            return None
        return LoadSample(now, seen, demand, queued)

    async def _report(self, addr: str) -> pb.ReportReply:
        ch = self._channels.get(addr)
        if ch is None:
            ch = self._channels[addr] = grpc.aio.insecure_channel(addr)
        return await pb_grpc.MatcherStub(ch).Report(pb.ReportRequest(), timeout=2.0)



async def _stopped(stop: asyncio.Event, within_s: float) -> bool:
    """Wait up to `within_s` for `stop`; True if it was set."""
    try:
        await asyncio.wait_for(stop.wait(), within_s)
        return True
    except asyncio.TimeoutError:
        return False
