"""`bench latency`'s subscribers in processes of their own, as phones are: each process runs
`Subscribers` (bluedove/lab/bench/latency_clients.py) over its share of the queues, and hands
what it received to the bench when asked (`sync`), so that the bench's own process only
publishes, checks and reports.

A process answers each "flush" on its pipe with what it received since the last one and its
running totals (errors, stream ends, CPU seconds); "stop" ends it the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing as mp
import time
from typing import Any

from bluedove.lab.bench.latency_clients import Received, Subscribers


def subscriber_main(url: str, queues: list[tuple[str, str]], first: int, grpc_url: str | None, raw: bool,
                    conn: Any) -> None:
    """One subscriber process: queues numbered from `first`, until "stop" on `conn`."""

    async def main() -> None:
        subs = Subscribers(url, queues, grpc_url, recording=True, raw=raw)
        running = asyncio.create_task(subs.run())
        conn.send("ready")
        while True:
            cmd = await asyncio.to_thread(conn.recv)
            got, gaps = subs.got, subs.gaps_ns
            subs.got, subs.gaps_ns = [], []
            last = subs.last_delivery
            conn.send({"got": [(g.queue + first, *dataclasses.astuple(g)[1:]) for g in got], "gaps": gaps,
                       "errors": dict(subs.errors), "samples": dict(subs.error_samples),
                       "ends": dict(subs.stream_ends), "cpu_s": time.process_time(),
                       "quiet_s": time.monotonic() - last if last else None})
            if cmd == "stop":
                break
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)

    asyncio.run(main())


class SubscriberProcs:
    """`procs` subscriber processes sharing `queues` (as evenly as they go), seen by the bench as
    one `Subscribers`: `got`, `gaps_ns`, `errors`, `error_samples`, `stream_ends` and
    `last_delivery` are as of the last `sync`."""

    def __init__(self, url: str, queues: list[tuple[str, str]], grpc_url: str | None, procs: int) -> None:
        self.url, self.queues, self.grpc_url, self.n = url, queues, grpc_url, procs
        self.got: list[Received] = []
        self.gaps_ns: list[int] = []
        self.errors: dict[str, int] = {}
        self.error_samples: dict[str, str] = {}
        self.stream_ends: dict[str, int] = {}
        self.last_delivery = 0.0
        self.recording = True  # (the processes record every timed message; the saturation search's have no time)
        self.pids: list[int] = []
        self._procs: list[Any] = []
        self._pipes: list[Any] = []
        self.started = asyncio.Event()  # every process subscribing

    async def run(self) -> None:
        """Start the processes and hold them until cancelled; then stop them."""
        ctx = mp.get_context("spawn")
        per = -(-len(self.queues) // self.n)
        try:
            for j in range(0, len(self.queues), per):
                mine, theirs = ctx.Pipe()
                p = ctx.Process(target=subscriber_main, daemon=True,
                                args=(self.url, self.queues[j:j + per], j, self.grpc_url, True, theirs))
                await asyncio.to_thread(p.start)
                self._procs.append(p)
                self._pipes.append(mine)
                self.pids.append(p.pid)
            for pipe in self._pipes:
                await asyncio.to_thread(pipe.recv)  # "ready"
            self.started.set()
            await asyncio.Event().wait()
        finally:
            await asyncio.shield(self._stop())

    async def _stop(self) -> None:
        for pipe in self._pipes:
            try:
                await asyncio.to_thread(self._ask, pipe, "stop")
            except (EOFError, OSError):
                pass
        for p in self._procs:
            await asyncio.to_thread(p.join, 10)
            if p.is_alive():
                p.kill()

    @staticmethod
    def _ask(pipe: Any, cmd: str) -> dict:
        pipe.send(cmd)
        return pipe.recv()

    async def sync(self) -> None:
        """What every process received since the last sync, added to `got` and `gaps_ns`."""
        now = time.monotonic()
        errors: dict[str, int] = {}
        ends: dict[str, int] = {}
        for pipe in self._pipes:
            r = await asyncio.to_thread(self._ask, pipe, "flush")
            self.got += [Received(*g) for g in r["got"]]
            self.gaps_ns += r["gaps"]
            for k, v in r["errors"].items():
                errors[k] = errors.get(k, 0) + v
            for k, v in r["ends"].items():
                ends[k] = ends.get(k, 0) + v
            self.error_samples.update({k: v for k, v in r["samples"].items() if k not in self.error_samples})
            if r["quiet_s"] is not None:
                self.last_delivery = max(self.last_delivery, now - r["quiet_s"])
        self.errors, self.stream_ends = errors, ends
