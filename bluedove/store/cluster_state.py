"""The cluster's shared state: the segment table (changed only by compare-and-set), the seed,
the event log, the autoscaler's settings and the dispatchers' heartbeats.
"""

from __future__ import annotations

import json
import time
from typing import Any

from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.store import keys as K
from bluedove.store import scripts
from bluedove.store.connection import Connection, StoreLimits


class ClusterState(Connection):
    """The table, seed, events, autoscaler state and dispatcher heartbeats every process shares."""

    def __init__(self, url: str, limits: StoreLimits | None = None) -> None:
        super().__init__(url, limits)
        self._put_table_if = self.r.register_script(scripts.PUT_TABLE_IF)

    async def get_table(self, space: str = DEFAULT_SPACE) -> dict[str, Any] | None:
        """The segment table of `space` (the default space's is the cluster's own `bd:table`)."""
        raw = await self.r.get(_table_key(space))
        return json.loads(raw) if raw else None

    async def get_tables_raw(self, spaces: list[str]) -> list[str | None]:
        """The segment tables of `spaces` as stored (JSON text), in order, in one pipelined round
        trip: a reader that compares the text with the last it saw parses only a changed one."""
        async with self.r.pipeline(transaction=False) as p:
            for space in spaces:
                p.get(_table_key(space))
            return list(await p.execute())

    async def put_table_if(self, expected_epoch: int, table: dict[str, Any], space: str = DEFAULT_SPACE) -> bool:
        """Store `table` only if the stored one is still at `expected_epoch` (0: none stored).
        A named space's first table is laid out by bluedove/store/spaces.py, which checks the
        space first; later ones replace it by epoch here."""
        if space != DEFAULT_SPACE and expected_epoch == 0:
            raise ValueError("a named space's first table is laid out with the space (SpaceStore.lay_out)")
        return bool(await self._put_table_if(keys=[_table_key(space)], args=[expected_epoch, json.dumps(table)]))

    async def put_seed(self, seed: dict[str, Any], space: str = DEFAULT_SPACE) -> None:
        """The partition seed `space`'s table was last laid out by (bluedove/core/partition/seeds.py);
        the split planner reads it for where a range's load halves (a named space's goes with it)."""
        await self.r.set(_seed_key(space), json.dumps(seed))

    async def get_seed(self, space: str = DEFAULT_SPACE) -> dict[str, Any] | None:
        raw = await self.r.get(_seed_key(space))
        return json.loads(raw) if raw else None

    async def add_event(self, event: dict[str, Any], keep: int = 200) -> None:
        """Append to the bounded log of cluster events (takeovers, scaling decisions). Every
        event carries "t", when it happened in Unix seconds (set here unless the writer did)."""
        event = {"t": round(time.time(), 3), **event}
        async with self.r.pipeline(transaction=True) as p:  # both keys share the tag {ev}
            p.lpush(K.EVENTS, json.dumps(event))
            p.ltrim(K.EVENTS, 0, keep - 1)
            p.hincrby(K.EVENT_COUNTS, event.get("action", "other"), 1)
            await p.execute()

    async def event_counts(self) -> dict[str, int]:
        """Events per action since the store was created (the log above is bounded; this is not)."""
        return {k: int(v) for k, v in (await self.r.hgetall(K.EVENT_COUNTS)).items()}

    async def put_autoscaler(self, state: dict[str, Any], ttl_s: int) -> None:
        """The running autoscaler's settings; they expire if it stops refreshing them."""
        await self.r.set(K.AUTOSCALER, json.dumps(state), ex=ttl_s)

    async def get_autoscaler(self) -> dict[str, Any] | None:
        raw = await self.r.get(K.AUTOSCALER)
        return json.loads(raw) if raw else None

    async def events(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest `limit` events, oldest first."""
        return [json.loads(e) for e in reversed(await self.r.lrange(K.EVENTS, 0, limit - 1))]

    async def register_dispatcher(self, disp_id: str, address: str, ttl_s: int = 10, epoch: int = 0,
                                  adopted_at: float | None = None, cpu: float | None = None) -> None:
        """A dispatcher's heartbeat: its address, the table epoch it uses and when (Unix time) it
        adopted that table, and its CPU since the last heartbeat (fraction of one core; the
        autoscaler reads it); it is dropped unless refreshed within `ttl_s`."""
        entry = {"id": disp_id, "address": address, "epoch": epoch, "adopted_at": adopted_at, "cpu": cpu,
                 "expires": time.time() + ttl_s}
        await self.r.hset(K.DISPATCHERS, disp_id, json.dumps(entry))

    async def dispatchers(self) -> list[dict[str, Any]]:
        """The dispatchers whose heartbeat is current (expired ones are deleted here)."""
        now = time.time()
        live, stale = [], []
        for disp_id, raw in (await self.r.hgetall(K.DISPATCHERS)).items():
            entry = json.loads(raw)
            if entry.pop("expires", 0) > now:
                live.append(entry)
            else:
                stale.append(disp_id)
        if stale:
            await self.r.hdel(K.DISPATCHERS, *stale)
        return sorted(live, key=lambda d: d["id"])


def _table_key(space: str) -> str:
    return K.TABLE if space == DEFAULT_SPACE else K.space_table(space)


def _seed_key(space: str) -> str:
    return K.SEED if space == DEFAULT_SPACE else K.space_seed(space)
