"""A named space's message log: the chunks its matchers append, read back by replays.

A space with a retention logs every batch its matchers match, one chunk an entry
(bluedove/core/log_chunk.py), in LOG_SHARDS streams that spread over a Redis Cluster's slots
(bluedove/store/keys.py). A matcher appends to one shard, in the same pipeline as the batch's
deliveries, so a publish answered 202 is in the log. A position in the log is one stream id per
shard, as a catalogue position is (`parse_pos`, `join_pos`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from bluedove.store import keys as K
from bluedove.store import replay_scripts
from bluedove.store.batch import Call
from bluedove.store.client import RedisClient, async_client
from bluedove.store.connection import Connection, StoreLimits


def entry_ms(entry_id: str) -> int:
    """The time (ms since the epoch) of a stream entry id."""
    return int(entry_id.partition("-")[0])


class MessageLog(Connection):
    """Append to a space's log, and read it by shard."""

    def __init__(self, url: str, limits: StoreLimits | None = None) -> None:
        super().__init__(url, limits)
        self._log_append = self.r.register_script(replay_scripts.LOG_APPEND)
        self._raw: RedisClient | None = None  # for reading chunks: their arrays are bytes, never text

    async def close(self) -> None:
        if self._raw is not None:
            await self._raw.aclose()
        await super().close()

    def log_call(self, space: str, shard: int, retention_s: int, fields: Mapping[str, bytes | int]) -> Call:
        """The script call that appends one chunk (to send with a batch's deliveries)."""
        oldest = f"{int((time.time() - retention_s) * 1000)}-0"
        args: list[str | bytes | int | float] = [oldest]
        for name, value in fields.items():
            args += (name, value)
        return Call(self._log_append, [K.message_log(space, shard)], args)

    async def log_ends(self, space: str) -> list[str]:
        """The newest entry id of each shard ("0-0" for an empty one)."""
        async with self.r.pipeline(transaction=False) as p:
            for n in range(K.LOG_SHARDS):
                p.xrevrange(K.message_log(space, n), count=1)
            got = await p.execute()
        return [_id(e[0][0]) if e else "0-0" for e in got]

    async def log_entries(self, space: str) -> int:
        """How many chunks the log holds (XLEN of every shard)."""
        async with self.r.pipeline(transaction=False) as p:
            for n in range(K.LOG_SHARDS):
                p.xlen(K.message_log(space, n))
            return sum(int(x) for x in await p.execute())

    async def read_log(self, space: str, shard: int, after: str, end: str,
                       count: int) -> list[tuple[str, dict[bytes, bytes]]]:
        """Up to `count` chunks of one shard after entry `after`, up to `end` (inclusive)."""
        if self._raw is None:
            self._raw = async_client(self.url, decode_responses=False)
        got = await self._raw.xrange(K.message_log(space, shard), f"({after}", end, count=count)
        return [(_id(i), f) for i, f in got]


def _id(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
