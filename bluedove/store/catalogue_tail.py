"""The catalogue's change log as a matcher reads it: every shard's stream after a position,
blocking (`catalogue_tail_many`, the default space's tail) or not (`catalogue_tails`, every
named space's in one round trip; `catalogue_changes`, a reload's replay).

Every matcher reads every entry of the log, while the dispatchers' direct calls have brought
it most of them already (bluedove/matcher/sets.py skips those unparsed). So the log is read on
a client of its own that leaves Redis's reply as it comes: redis-py's XREAD reply turned each
entry into a dict of decoded text, ~0.7 µs an entry. Here an entry's op and id are decoded and
a subscription's JSON is left as bytes, read only by a matcher that files it from the log.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import Any

from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.store import keys as K
from bluedove.store.client import ENCODING_ERRORS, RedisClient, async_client
from bluedove.store.connection import Connection

# Most streams one XREAD of `catalogue_tails` names on one server (a read of more is split:
# one command's time in Redis grows with its streams).
TAIL_STREAMS = 1024
# A log entry as read: its id, and its fields {op, id, sub?} (sub: the subscription's JSON, bytes).
Entry = tuple[str, dict[str, Any]]


@functools.lru_cache(maxsize=4096)
def _log_keys(space: str) -> tuple[str, ...]:
    """Space `space`'s catalogue log stream of every shard (`catalogue_tails` names them every round)."""
    return tuple(K.CatalogueKeys(space).log(shard) for shard in range(K.CATALOG_SHARDS))


def change(entry_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A log entry as a reader applies it: its fields {op, id, sub?}, and for a `replace` its
    entry id as `at`: the version a matcher compares, so that an older replace never undoes a
    newer one it applied first (bluedove/matcher/sets.py)."""
    return {**fields, "at": entry_id} if fields.get("op") == "replace" else fields


def _text(b: bytes) -> str:
    return b.decode("utf-8", ENCODING_ERRORS)


def _fields(flat: list[bytes]) -> dict[str, Any]:
    """An entry's fields from Redis's flat [name, value, ...]: op and id as text, sub as bytes
    (the scripts write them in that order; any other entry is decoded whole)."""
    if len(flat) == 6 and flat[0] == b"op" and flat[2] == b"id" and flat[4] == b"sub":
        return {"op": _text(flat[1]), "id": _text(flat[3]), "sub": flat[5]}
    if len(flat) == 4 and flat[0] == b"op" and flat[2] == b"id":
        return {"op": _text(flat[1]), "id": _text(flat[3])}
    it = iter(flat)
    return {_text(k): (v if k == b"sub" else _text(v)) for k, v in zip(it, it)}


def _streams(reply: Any) -> list[tuple[str, list[Entry]]]:
    """An XREAD reply as it came (RESP3: a map; RESP2: pairs) as [(stream, entries)]."""
    pairs = reply.items() if isinstance(reply, dict) else (reply or ())
    return [(_text(key), [(_text(eid), _fields(flat)) for eid, flat in entries]) for key, entries in pairs]


def _as_is(reply: Any, **options: Any) -> Any:
    return reply


class CatalogueTails(Connection):
    """Reads of the catalogue's log, on a client of their own (see the module docstring)."""

    _tail_client: RedisClient | None = None
    _tail_lock: asyncio.Lock | None = None

    async def _tail(self) -> RedisClient:
        """The log's client, made once at its first use (on a cluster, with the slots learnt:
        `_on` reads them before its first command)."""
        if self._tail_client is None:
            self._tail_lock = self._tail_lock or asyncio.Lock()
            async with self._tail_lock:
                if self._tail_client is None:
                    client = async_client(self.url, decode_responses=False, health_check_interval=30)
                    client.set_response_callback("XREAD", _as_is)
                    if self.runner.cluster:
                        await client.initialize()
                    self._tail_client = client
        return self._tail_client

    async def close(self) -> None:
        if self._tail_client is not None:
            await self._tail_client.aclose()
        await super().close()

    def _on(self, tail: RedisClient, key: str) -> dict[str, Any]:
        """Where the tail client sends an XREAD about `key` (see `Connection._at`)."""
        return {"target_nodes": tail.get_node_from_key(key)} if self.runner.cluster else {}

    async def catalogue_changes(self, after: str, count: int = 1000,
                                space: str = DEFAULT_SPACE) -> tuple[str, list[dict[str, Any]]]:
        """(the position after them, the changes after `after` [{op, id, sub?, at?}], each a
        `change`), up to `count` of each shard, without waiting. Changes of one subscription
        are in its queue's shard, in order; changes of different shards are independent."""
        ids = K.parse_pos(after)
        tail = await self._tail()
        async with tail.pipeline(transaction=False) as p:
            for shard, after_id in enumerate(ids):
                key = K.CatalogueKeys(space).log(shard)
                p.execute_command("XREAD", "COUNT", count, "STREAMS", key, after_id, **self._on(tail, key))
            res = await p.execute()
        changes: list[dict[str, Any]] = []
        for shard, got in enumerate(res):
            for _, entries in _streams(got):
                if entries:
                    ids[shard] = entries[-1][0]
                    changes += [change(entry_id, fields) for entry_id, fields in entries]
        return K.join_pos(ids), changes

    async def catalogue_tail(self, shard: int, after_id: str, block_ms: int | None = None,
                             count: int = 1000, space: str = DEFAULT_SPACE) -> list[Entry]:
        """One shard's log entries after `after_id` [(entry id, {op, id, sub?})], waiting up
        to `block_ms` for the first (None: not at all)."""
        return (await self.catalogue_tail_many({shard: after_id}, block_ms, count, space)).get(shard, [])

    async def catalogue_tails(self, after: Mapping[str, str], count: int = 1000) -> dict[str, dict[int, list[Entry]]]:
        """Several spaces' log entries after each one's position in `after` ({space: position}),
        without waiting: {space: {shard: [(entry id, fields)]}} for the shards with some, up to
        `count` each, in one pipelined round trip: XREADs of up to TAIL_STREAMS streams each on
        one server, one per stream on a cluster (every shard of a space is a slot of its own)."""
        streams = [(space, shard, key, pos) for space, at in after.items()
                   for shard, (key, pos) in enumerate(zip(_log_keys(space), K.parse_pos(at)))]
        per = 1 if self.runner.cluster else TAIL_STREAMS
        tail = await self._tail()
        async with tail.pipeline(transaction=False) as p:
            for i in range(0, len(streams), per):
                part = streams[i:i + per]
                p.execute_command("XREAD", "COUNT", count, "STREAMS", *(x[2] for x in part),
                                  *(x[3] for x in part), **self._on(tail, part[0][2]))
            res = await p.execute()
        where = {x[2]: (x[0], x[1]) for x in streams}
        out: dict[str, dict[int, list[Entry]]] = {}
        for got in res:
            for key, entries in _streams(got):
                if entries:
                    space, shard = where[key]
                    out.setdefault(space, {})[shard] = entries
        return out

    def catalogue_read_groups(self) -> list[list[int]]:
        """The catalogue shards one `catalogue_tail_many` may read together: all of them on one
        server; one each on a cluster, where the shards sit in different slots (a command's
        keys must share a slot there, even on one node)."""
        shards = list(range(K.CATALOG_SHARDS))
        return [[s] for s in shards] if self.runner.cluster else [shards]

    async def catalogue_tail_many(self, after: dict[int, str], block_ms: int | None = None, count: int = 1000,
                                  space: str = DEFAULT_SPACE) -> dict[int, list[Entry]]:
        """The log entries of several shards (one group of `catalogue_read_groups`) after each
        one's id in `after`: {shard: [(entry id, {op, id, sub?})]} for the shards that have
        some, up to `count` each, in one XREAD waiting up to `block_ms` for the first (None:
        not at all)."""
        shards = list(after)
        keys = [K.CatalogueKeys(space).log(s) for s in shards]
        wait = () if block_ms is None else ("BLOCK", block_ms)
        tail = await self._tail()
        res = await tail.execute_command("XREAD", "COUNT", count, *wait, "STREAMS", *keys,
                                         *(after[s] for s in shards), **self._on(tail, keys[0]))
        shard_of_key = dict(zip(keys, shards))
        return {shard_of_key[key]: entries for key, entries in _streams(res) if entries}
