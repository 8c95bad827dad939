"""`bench fleet`'s side of its client processes (fleet_client.py): start them with their shares
of the queues, let them park their polls, watch their progress, stop them and collect what
they saw."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
import time
from typing import Any

from bluedove.lab.bench.fleet_client import MESSAGES, PARKED, READY, SLOTS, Share, client_main

START_S = 60.0  # for every client process to be ready
STOP_S = 60.0  # for every client process to close its connections and answer


def source_address(host: str, c: int) -> str | None:
    """Client process c's own loopback address (127.0.1.c+1) when the cluster is on loopback: its
    ephemeral ports are its own, so the fleet is not held to one address's ~28,000 towards the port."""
    return f"127.0.1.{c + 1}" if host.startswith("127.") and c < 254 else None


class Clients:
    """C client processes holding one poll per queue, queue i in process i mod C."""

    def __init__(self, host: str, port: int, queues: list[tuple[str, str]], n: int, wait_s: int, max_n: int) -> None:
        ctx = mp.get_context("spawn")
        self.shares = [Share(host, port, [(i, q, t) for i, (q, t) in enumerate(queues) if i % n == c], wait_s, max_n,
                             source_address(host, c)) for c in range(n)]
        self.progress = [ctx.RawArray("q", SLOTS) for _ in range(n)]
        self.go, self.halt = ctx.Event(), ctx.Event()
        self.out: Any = ctx.Queue()
        self.procs = [ctx.Process(target=client_main, args=(s, p, self.go, self.halt, self.out), daemon=True)
                      for s, p in zip(self.shares, self.progress)]

    def total(self, slot: int) -> int:
        return sum(int(p[slot]) for p in self.progress)

    def _dead(self) -> list[int]:
        return [p.exitcode for p in self.procs if p.exitcode is not None]

    async def start(self) -> None:
        """Every process started and ready (its imports done)."""
        for p in self.procs:
            await asyncio.to_thread(p.start)
        end = time.monotonic() + START_S
        while self.total(READY) < len(self.procs):
            if self._dead() or time.monotonic() > end:
                raise RuntimeError(f"fleet clients did not start (exit codes {self._dead()})")
            await asyncio.sleep(0.05)

    async def park(self, timeout_s: float) -> int:
        """Go; until every poll is sent (or `timeout_s`, or a process died): how many are."""
        self.go.set()
        end = time.monotonic() + timeout_s
        want = sum(len(s.queues) for s in self.shares)
        while self.total(PARKED) < want and time.monotonic() < end and not self._dead():
            await asyncio.sleep(0.05)
        return self.total(PARKED)

    async def drain(self, expected: int, limit_s: float) -> None:
        """Until the polls brought `expected` deliveries, at most `limit_s`."""
        end = time.monotonic() + limit_s
        while self.total(MESSAGES) < expected and time.monotonic() < end:
            await asyncio.sleep(0.05)

    async def stop(self) -> list[dict[str, Any]]:
        """Every process closes its connections; what each saw."""
        self.halt.set()
        results: list[dict[str, Any]] = []
        end = time.monotonic() + STOP_S
        while len(results) < len(self.procs) and time.monotonic() < end:
            try:
                results.append(await asyncio.to_thread(self.out.get, True, 1.0))
            except queue.Empty:
                if len(self._dead()) == len(self.procs) and self.out.empty():
                    break
        if len(results) < len(self.procs):
            raise RuntimeError(f"{len(self.procs) - len(results)} fleet client(s) did not answer")
        for p in self.procs:
            await asyncio.to_thread(p.join, 10.0)
        return results

    def kill(self) -> None:
        """Any process still running (after a failure) is killed."""
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(5.0)
