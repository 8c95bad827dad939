"""A queue's state as its token's holder sees it: its bounds and counters, its depth (the
deliveries not yet acked), and seeking it.

A queue created with `retain_acked_s` keeps its acked deliveries that long: its acks only ack,
and its hash's `kept` counts the acked entries of its stream, so that XLEN - kept is what is not
yet acked, for its cap and its depth alike (bluedove/store/kept_scripts.py). A seek makes the
deliveries from a point on deliverable again, and those before it acked, in one script
(SEEK)."""

from __future__ import annotations

from typing import Any

from bluedove.store import keys as K
from bluedove.store.batch import Arg, Call
from bluedove.store.connection import Connection, StoreLimits
from bluedove.store.ids import hash_token, valid_queue_id
from bluedove.store.kept_scripts import SEEK

GROUP = "g"
# Entries a seek reads at a time: a slice's messages are what it holds in memory at once.
SEEK_SLICE = 100
_MAX_SEQ = 2**64 - 1
# What SEEK answers when it changes nothing (and the reason, for SeekRefused).
_REFUSALS = {-1: "keeps_none", -2: "future"}


class BadToken(Exception):
    """The token given with a poll or ack does not open the queue (or the queue is gone)."""


class SeekRefused(Exception):
    """A seek the queue does not take, nothing changed: `reason` is "keeps_none" (the queue keeps
    no acked deliveries) or "future" (the point is after the store's clock)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def entry_before(ms: int, seq: int) -> str:
    """The stream id just before `ms-seq` ("0-0" before the first there can be)."""
    if seq > 0:
        return f"{ms}-{seq - 1}"
    return f"{ms - 1}-{_MAX_SEQ}" if ms > 0 else "0-0"


class QueueState(Connection):
    """A queue's bounds, counters and depth, and its seek."""

    def __init__(self, url: str, limits: StoreLimits | None = None) -> None:
        super().__init__(url, limits)
        self._seek = self.r.register_script(SEEK)

    async def queue_info(self, queue: str) -> dict[str, Any]:
        """A queue's bounds and counters (GET /v1/queues/{queue}); the caller checked its token."""
        async with self.r.pipeline(transaction=False) as p:
            p.hgetall(K.queue_hash(queue))
            p.xlen(K.queue_stream(queue))
            h, length = await p.execute()
        dl = h.get("dl_queue")
        return {
            "queue": queue,
            "depth": int(length) - int(h.get("kept", 0)),
            "max_undelivered": int(h.get("max_undelivered", self.limits.max_undelivered)),
            "retention_s": int(h.get("retention_s", self.limits.retention_s)),
            "retain_acked_s": int(h.get("retain_acked_s", 0)),
            "dead_letter": {"queue": dl, "max_deliveries": int(h["dl_max"])} if dl else None,
            "dropped": int(h.get("dropped", 0)),
            "expired": int(h.get("expired", 0)),
            "dead_lettered": int(h.get("dead_lettered", 0)),
        }

    async def queue_depth(self, queue: str) -> int:
        """The deliveries of `queue` not yet acked (waiting, or handed out and not acked)."""
        return await self.backlog([queue])

    async def backlog(self, queues: list[str], chunk: int = 2000) -> int:
        """`queue_depth` summed over many queues, pipelined in chunks."""
        total = 0
        for start in range(0, len(queues), chunk):
            async with self.r.pipeline(transaction=False) as p:
                for q in queues[start:start + chunk]:
                    p.xlen(K.queue_stream(q))
                    p.hget(K.queue_hash(q), "kept")
                got = await p.execute()
            total += sum(int(n) - int(kept or 0) for n, kept in zip(got[::2], got[1::2]))
        return total

    async def seek(self, queue: str, ms: int, seq: int = 0, token: str | None = None) -> int:
        """Seek `queue` to the entry id `ms-seq` (a time T is `T-0`): every delivery it keeps
        from there on is handed out again, once, acked or not, and every one before it counts
        as acked. Returns how many are deliverable now. With `token`, the same call checks it
        first: BadToken if it does not open the queue. SeekRefused, nothing changed, when the
        queue keeps no acked deliveries or the point is after the store's clock. Safe to
        repeat: a seek leaves the same state however often it runs."""
        if token is not None and not valid_queue_id(queue):
            raise BadToken(queue)
        args: list[Arg] = [GROUP, "" if token is None else hash_token(token), f"{ms}-{seq}", entry_before(ms, seq),
                self.limits.retention_s, SEEK_SLICE]
        (n,) = await self.runner.run([Call(self._seek, [K.queue_stream(queue), K.queue_hash(queue)], args)],
                                     wait=True)
        if n is None:
            raise BadToken(queue)
        if int(n) in _REFUSALS:
            raise SeekRefused(_REFUSALS[int(n)])
        return int(n)
