"""The matcher's index thread: every read and change of its subscription sets, one at a time.

The sets (packed trees, their buffers, the directory) are not thread-safe, and a walk or a
bulk insert can take long enough to matter to gRPC and Redis; so every index operation runs on
one thread of its own, off the event loop, and holds `lock` while it runs.

A small match does better on the event loop itself: handing one message to the thread and its
matches back costs two thread wake-ups (and, while sets kept recent boxes in a libspatialindex
R*-tree, its ctypes calls handed the GIL back and forth with the loop). At 20 single publishes
a second that was ~0.3 ms of a matcher's ~1 ms per Forward (docs/benchmarks.md, "Latency").
`run_small` runs the job inline when no job holds the lock, and on the thread otherwise:
either way one job at a time. An inline match can pass a job queued on the thread and not yet
begun (a subscription being filed): that job is not done, so no caller has been answered for
it, and a message forwarded after its answer is matched after it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar, TypeVarTuple

R = TypeVar("R")
Ts = TypeVarTuple("Ts")


class IndexThread:
    """One thread for the index's jobs, and the lock every job holds while it runs."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="index")
        self.lock = threading.Lock()
        self.inline = 0  # jobs `run_small` ran on the event loop (the tests read it)

    def _locked(self, fn: Callable[[*Ts], R], *args: *Ts) -> R:
        with self.lock:
            return fn(*args)

    async def run(self, fn: Callable[[*Ts], R], *args: *Ts) -> R:
        """`fn(*args)` on the index thread."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._locked, fn, *args)

    async def run_small(self, fn: Callable[[*Ts], R], *args: *Ts) -> R:
        """`fn(*args)`, a job short enough for the event loop: inline when no job is running,
        else on the index thread after what is queued there."""
        if self.lock.acquire(blocking=False):
            try:
                self.inline += 1
                return fn(*args)
            finally:
                self.lock.release()
        return await self.run(fn, *args)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
