"""The autoscaler loop: sample the matchers' loads and the rest of the cluster, check the last
scale-out, ask the policy, let a backend act, log why (events in the store)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from datetime import datetime, timezone

import grpc

from bluedove.autoscaler import relief
from bluedove.autoscaler.backends import Backend
from bluedove.autoscaler.policy import Decision, LoadSample, ScalingConfig, matcher_demand
from bluedove.autoscaler.signals import SignalReader
from bluedove.autoscaler.space_policy import SpaceLoad, SpacesSample, spaces_to_grow, spaces_to_shrink
from bluedove.core.load import LoadReport
from bluedove.runtime import tls
from bluedove.store.series import put_gauges
from bluedove.store.spaces import SpaceStore
from bluedove.store.store import AutoscalerStore
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

log = logging.getLogger("bluedove.autoscaler")


class Autoscaler:
    """The autoscaler loop, with what its last step saw and chose (read by its metrics)."""

    def __init__(self, backend: Backend, store: AutoscalerStore, config: ScalingConfig = ScalingConfig(),
                 interval_s: float = 1.0, tls_files: tls.TlsFiles | None = None) -> None:
        self.backend = backend
        self.tls = tls_files  # for the matchers' Report (mutual TLS with a CA)
        self.store = store
        self.config = config
        self.interval_s = interval_s
        self.history: list[LoadSample] = []
        # The named spaces' loads at each sample, and when each last grew or shrank (space_policy.py).
        self.space_history: list[SpacesSample] = []
        self.resized_at: dict[str, float] = {}
        self.spaces = SpaceStore(store.r)
        self.last_change_at: float | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}
        # What the last step saw and chose, and decisions by action (bluedove/autoscaler/metrics.py).
        self.last_sample: LoadSample | None = None
        self.members: int | None = None
        self.desired: int | None = None
        self.decisions: dict[str, int] = {}
        # The check of the last scale-out, or the stop it ended in (bluedove/autoscaler/relief.py); the
        # checks' outcomes so far; what limits the rate now (one of relief.LIMITS).
        self.check: relief.Trial | relief.Stop | None = None
        self.checks: dict[str, int] = {}
        self.limit: str | None = None
        # The host's CPU only where the matchers run on it (the local backend).
        self.signals = SignalReader(store, host=getattr(backend, "same_host", False))

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
                await ch.close(grace=None)

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
        c = self.config
        horizon = now - max(c.window_s, c.in_window_s, c.check_settle_s + c.window_s) - 5
        self.history = [s for s in self.history if s.at >= horizon]
        self.space_history = [s for s in self.space_history if s.at >= horizon]
        members = await asyncio.to_thread(self.backend.current)
        await self._resize_spaces(now, members)
        d, self.check, verdict = relief.step(self.check, self.history, members, now, self.last_change_at, c)
        if verdict is not None:
            await self._verdict(verdict, members)
        self.last_sample, self.members, self.desired = sample, members, d.target
        self.decisions[d.action] = self.decisions.get(d.action, 0) + 1
        self.limit = self._limit(now)
        await self._record(sample, d)
        if d.action == "hold":
            return d
        self.last_change_at = now
        log.warning("%s to %d: %s", d.action, d.target, d.reason)
        done = await asyncio.to_thread(self.backend.scale_to, d.target)
        await self._event(d.action, f"{d.reason}; {self.backend.name}: {done}", d.target)
        return d

    async def _resize_spaces(self, now: float, members: int) -> None:
        """Give each hot named space more matchers, and a grown one gone idle one fewer
        (bluedove/autoscaler/space_policy.py): its record's `spans`, which the matcher coordinating
        its changes joins matchers up to, or merges owners out down to."""
        grow = spaces_to_grow(self.space_history, members, now, self.resized_at, self.config)
        shrink = spaces_to_shrink(self.space_history, now, self.resized_at, self.config)
        for action, r in [*(("space_scale_out", g) for g in grow), *(("space_scale_in", x) for x in shrink)]:
            self.resized_at[r.space] = now
            try:
                made = await self.spaces.set_spans(r.space, r.to)
            except Exception as exc:  # noqa: BLE001 - the next step tries again after the cooldown
                log.warning("could not resize space %r: %r", r.space, exc)
                continue
            if made:
                log.warning("space %r to %d matchers: %s", r.space, r.to, r.reason)
                await self._event(action, r.reason, r.to, space=r.space)

    async def _verdict(self, v: relief.Verdict, members: int) -> None:
        self.checks[v.outcome] = self.checks.get(v.outcome, 0) + 1
        action = {"not_relieved": "scale_out_stopped"}.get(v.outcome, f"scale_out_{v.outcome}")
        (log.warning if v.outcome == "not_relieved" else log.info)("%s: %s", action, v.reason)
        await self._event(action, v.reason, members, **({"limit": v.limit} if v.limit else {}))

    def _limit(self, now: float) -> str | None:
        """What limits the rate now: the stop's limit while scale-outs are stopped, else what
        the last window shows."""
        if isinstance(self.check, relief.Stop):
            return self.check.limit
        win = [s for s in self.history if s.at >= now - self.config.window_s]
        return relief.bottleneck(win, self.config) if len(win) >= 3 else None

    async def _event(self, action: str, reason: str, matchers: int, **extra: str) -> None:
        await self.store.add_event({"at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                                    "action": action, "reason": reason, "matchers": matchers, **extra})

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
        """Demand Σ λ/μ and queued messages over the table's owners (from their Report RPC; a
        matcher at its CPU limit counts at least 1, policy.matcher_demand), with the rest of the
        cluster's signals (bluedove/autoscaler/signals.py)."""
        raw = await self.store.get_table()
        if not raw:
            return None
        owners: dict[str, str] = raw["members"]
        replies = await asyncio.gather(*(self._report(a) for a in owners.values()), return_exceptions=True)
        demand, queued, seen, capped = 0.0, 0, 0, 0
        spaces: dict[str, SpaceLoad] = {}
        for r in replies:
            if isinstance(r, BaseException):
                continue
            seen += 1
            busy = 0.0
            for d in r.dims:
                # its whole work (decoding, matching, storing), not the matching alone
                load = LoadReport(lam=d.lam, mu=d.service_mu or d.mu, q=d.q, subs=d.subs)
                busy += load.busy if not math.isnan(load.busy) else 0.0
                queued += d.q
            for x in r.spaces:  # and its named spaces' work
                busy += x.busy
                queued += x.queued
                was = spaces.get(x.name, SpaceLoad(0.0, 0, 0, x.fixed))
                spaces[x.name] = SpaceLoad(was.busy + x.busy, was.queued + x.queued, max(was.matchers, x.matchers),
                                           x.fixed, max(was.spans, x.spans), max(was.base, x.base))
            busy, at_limit = matcher_demand(busy, r.cpu_limit_cores, r.cpu_limit_used, r.cpu_throttled, self.config)
            demand += busy
            capped += at_limit
        if not seen:
            return None
        self.space_history.append(SpacesSample(now, spaces))
        sig = await self.signals.read()
        return LoadSample(now, seen, demand, queued, accepted=sig.accepted, p50_s=sig.p50_s,
                          dispatcher_cpu=sig.dispatcher_cpu, store_cpu=sig.store_cpu,
                          store_errors=sig.store_errors, host_cpu=sig.host_cpu, at_limit=capped)

    async def _report(self, addr: str) -> pb.ReportReply:
        ch = self._channels.get(addr)
        if ch is None:
            ch = self._channels[addr] = tls.aio_channel(addr, self.tls)
        reply: pb.ReportReply = await pb_grpc.MatcherStub(ch).Report(pb.ReportRequest(with_spaces=True), timeout=2.0)
        return reply


async def _stopped(stop: asyncio.Event, within_s: float) -> bool:
    """Wait up to `within_s` for `stop`; True if it was set."""
    try:
        await asyncio.wait_for(stop.wait(), within_s)
        return True
    except asyncio.TimeoutError:
        return False
