"""A dispatcher's part of the cluster time series (bluedove/store/series.py): messages
published and their latency, redeliveries, the table's matcher count, the message density per
dimension, and (one dispatcher at a time) the queue depth.

The publish path only appends to in-memory counters (`on_publish`); binning the messages'
values and writing to the store happen once a second on the recorder's task."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

import numpy as np
import numpy.typing as npt

from bluedove.core import timeseries as ts
from bluedove.core.space import Space
from bluedove.dispatcher.view import ClusterView
from bluedove.store.series import Recorder, depth_pause_s, hold_depth_turn, put_density, queue_depth, take_depth_turn
from bluedove.store.store import DispatcherStore

log = logging.getLogger("bluedove.dispatcher")

DENSITY_EVERY_S = 2.0
DEPTH_EVERY_S = 5.0


class DispatcherSeries:
    """This dispatcher's counters for the cluster time series, written to the store once a second."""

    def __init__(self, store: DispatcherStore, space: Space, dispatcher_id: str, cluster: ClusterView) -> None:
        self.store, self.space, self.id, self.cluster = store, space, dispatcher_id, cluster
        self.rec = Recorder(store, zero=(ts.PUBLISHED, ts.REDELIVERED))
        self.rec.before_flush.append(self._sample)
        self._lo = np.array([dim.min for dim in space.dimensions])
        self._hi = np.array([dim.max for dim in space.dimensions])
        self._points: list[npt.NDArray[np.float64]] = []  # values of the messages published since the last flush
        self._rates = [ts.DecayedRate() for _ in space.dimensions]
        self._redelivered_seen = 0
        self._density_at = 0.0
        self._depth_at = 0.0
        self._side: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self.rec.start()

    async def stop(self) -> None:
        for t in list(self._side):
            t.cancel()
        await self.rec.stop()

    def on_publish(self, points: npt.NDArray[np.float64], seconds: float) -> None:
        """Messages of values `points` (one row each) accepted and stored in `seconds`."""
        n = len(points)
        rec = self.rec
        now = time.time()
        rec.add(ts.PUBLISHED, n, now)
        rec.add(ts.latency_field(seconds), n, now)
        self._points.append(points)

    def on_answered(self, handed: str, again: int) -> None:
        """A poll or Listen answer handed out entries `handed` (ids joined by ","), the first
        `again` of them again: its oldest new one's time in the queue (stored -> answered; a
        stream id's milliseconds are the store's clock when it was written)."""
        first = handed.split(",", again + 1)[again] if again else handed.partition(",")[0]
        now = time.time()
        self.rec.add(ts.answered_field(max(0.0, now - int(first.partition("-")[0]) / 1000)), 1, now)

    # -- once a second, before the record is written -----------------------------------------
    def _sample(self, now: float) -> None:
        store = self.store
        if store.redelivered != self._redelivered_seen:
            self.rec.add(ts.REDELIVERED, store.redelivered - self._redelivered_seen, now - 1)
            self._redelivered_seen = store.redelivered
        table = self.cluster.table
        if table is not None:
            self.rec.set("matchers_actual", len(table.members), now - 1)
        self._bin_points(now)
        if now - self._density_at >= DENSITY_EVERY_S:
            self._density_at = now
            self._spawn(self._write_density(now))
        if now - self._depth_at >= DEPTH_EVERY_S:
            self._depth_at = now
            self._spawn(self._sample_depth())

    def _bin_points(self, now: float) -> None:
        points, self._points = self._points, []
        if not points:
            return
        arr = np.concatenate(points)
        for rate, counts in zip(self._rates, ts.bin_counts(arr, self._lo, self._hi)):
            rate.add({j: c for j, c in enumerate(counts) if c}, now)

    def density(self, now: float) -> dict[str, list[float]]:
        return {name: [round(r, 4) for r in rate.rates(now)] for name, rate in zip(self.space.names, self._rates)}

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    async def _write_density(self, now: float) -> None:
        try:
            await put_density(self.store, self.id, self.density(now))
        except Exception as exc:  # noqa: BLE001 - the store may be briefly away
            log.warning("could not write the message density: %r", exc)

    async def _sample_depth(self) -> None:
        """Every DEPTH_EVERY_S, if no other dispatcher has this turn: the queue depth gauges. A
        sample reads every queue; after a long one, no dispatcher samples for 20 times as long."""
        try:
            if not await take_depth_turn(self.store, self.id):
                return
            t0 = time.monotonic()
            undelivered, unacked = await queue_depth(self.store)
            pause = depth_pause_s(time.monotonic() - t0)
            if pause > DEPTH_EVERY_S:  # many queues: sample less often, so it stays cheap
                await hold_depth_turn(self.store, self.id, pause)
            self.rec.set("undelivered", undelivered)
            self.rec.set("unacked", unacked)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the store may be briefly away
            log.warning("could not sample the queue depth: %r", exc)
