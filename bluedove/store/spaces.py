"""The registry of named spaces (bluedove/core/spaces.py says what a space is; the keys are
bluedove/store/keys.py's, each space in its own tag family `{s:<name>}`).

A space is its record, the hash `bd:{s:S}` (spec, created, state), and its name in the
registry set `bd:spaces`. The two are in different slots, so on a Redis Cluster no one script
may write both; every change is steps, each atomic on its slot, ordered so that a crash
between two leaves a state the same call, repeated, repairs:

- create: (1) one script on the record's slot writes the record unless one exists, and
  answers the existing one if it does; (2) the name goes into the registry whenever the record
  is active, new or not. A crash after (1) leaves a record that `get` finds and `list` does not
  yet; the client's retry (the same body: 200) finds the record and adds the name. Two creates
  of one name race on step (1), which Redis runs one at a time: one writes, the other gets the
  record back and is answered (existing, False) or SpaceConflict.
- delete: one script marks the record `deleting` (so publishing to it can be refused at once).
  The name stays registered and the record stays until `purge_step` has removed every other
  key of the space, in steps of at most `budget` keys: first the keys its `keys` set lists
  (SRANDMEMBER, UNLINK, then SREM: a crash between leaves names of keys already gone, whose
  UNLINK again is nothing), then the keys its name gives (`space_fixed_keys`), then the
  record, then the name. A crash at any point leaves the record `deleting` or, after the
  record, a registered name without one, which `list` skips and the next `purge_step` removes.
  UNLINK frees a large value (a catalogue shard's hash) off Redis's main thread, so a step
  costs the main thread O(budget), never the size of the space.

Writers of a space's keys check the record. Its first table is laid out by a script on the
record's slot (`lay_out`). A key whose name is not in `space_fixed_keys` (a queue's set of
subscription ids in the space's catalogue) goes into the `keys` set first, by a script on the
record's slot that refuses unless the record is active with the `created` the writer knows
(bluedove/store/space_entry.py); and a write that crosses slots (a subscribe into the
catalogue) reads the record again after it and undoes itself unless the record is still
active with the same `created` (a space deleted and made again under one name is another
space).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from bluedove.core.partition.bootstrap import TableStore
from bluedove.core.space import Space
from bluedove.core.spaces import DEFAULT_SPACE, SpaceSpec, default_spec, first_difference
from bluedove.store.client import RedisClient
from bluedove.store.keys import (
    CATALOG_SHARDS,
    SPACES,
    SPACES_GENERATION,
    catalog_hash,
    space_catalog_hash,
    space_fixed_keys,
    space_keys,
    space_record,
    space_table,
)

log = logging.getLogger("bluedove.store")
T = TypeVar("T")

ACTIVE, DELETING = "active", "deleting"
PURGE_BUDGET = 500  # keys a purge step removes at most: a few ms of Redis

# KEYS: the record. ARGV: spec, created. {1, spec, created, state} written now, or {0, …} of
# the record that was there.
_CREATE = """
local had = redis.call('HMGET', KEYS[1], 'spec', 'created', 'state')
if had[1] then return {0, had[1], had[2], had[3]} end
redis.call('HSET', KEYS[1], 'spec', ARGV[1], 'created', ARGV[2], 'state', 'active')
return {1, ARGV[1], ARGV[2], 'active'}
"""
# KEYS: the record. ARGV: now (ms). 1 marked now, 2 already deleting, 0 no such space.
_DELETE = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 0 end
if state == 'deleting' then return 2 end
redis.call('HSET', KEYS[1], 'state', 'deleting', 'deleting_since', ARGV[1])
return 1
"""
# KEYS: the record, the space's table. ARGV: created, the table JSON, its matchers. 1 written
# now, 0 one was there, -1 the space is not the active one made at `created`.
_LAY_OUT = """
local had = redis.call('HMGET', KEYS[1], 'state', 'created')
if had[1] ~= 'active' or had[2] ~= ARGV[1] then return -1 end
if redis.call('SET', KEYS[2], ARGV[2], 'NX') then
  redis.call('HSET', KEYS[1], 'spans', ARGV[3])
  return 1
end
return 0
"""
# KEYS: the record. ARGV: its spans. 1 set now, 0 it had them, -1 the space is not active.
# The spans it had before the first change are kept as its `base` (what it shrinks back to).
_SPANS = """
if redis.call('HGET', KEYS[1], 'state') ~= 'active' then return -1 end
local had = redis.call('HGET', KEYS[1], 'spans')
if had == ARGV[1] then return 0 end
if had then redis.call('HSETNX', KEYS[1], 'base', had) end
redis.call('HSET', KEYS[1], 'spans', ARGV[1])
return 1
"""
# KEYS: the record. 1 removed, 0 none there, -1 it is active (a create came first).
_DROP = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 0 end
if state ~= 'deleting' then return -1 end
redis.call('DEL', KEYS[1])
return 1
"""


class SpaceConflict(Exception):
    """A create under an existing name with another spec (or a space still being deleted):
    `field` names the first field that differs (`state` while the old one is being deleted)."""

    def __init__(self, existing: SpaceRecord, field: str) -> None:
        super().__init__(f"space {existing.spec.name!r} exists with another {field}")
        self.existing = existing
        self.field = field


class SpaceActive(Exception):
    """A purge of a space that is not being deleted: `delete` it first."""


@dataclass(frozen=True)
class SpaceRecord:
    """A space as the store holds it: its spec, when it was made (Unix ms), and its state."""

    spec: SpaceSpec
    created: int
    state: str
    # The matchers its first table was laid out over (0: not laid out yet, or a record from
    # before): the space keeps that many through takeovers unless its spec says `matchers`.
    # The autoscaler grows it by raising them; `base` keeps what they were before (0: never changed).
    spans: int = 0
    base: int = 0

    def to_json(self) -> dict[str, Any]:
        return {**self.spec.to_json(), "created": self.created, "state": self.state}


@dataclass(frozen=True)
class PurgeStep:
    """What one purge step did: keys removed (the record counted), and whether the space is gone."""

    removed: int
    done: bool


def _text(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _record(raw: Mapping[str, Any]) -> SpaceRecord:
    """A record from its hash's fields (a record from before a field has its default)."""
    return SpaceRecord(SpaceSpec.from_json(json.loads(_text(raw["spec"]))), int(_text(raw.get("created", "0"))),
                       _text(raw.get("state", ACTIVE)), int(_text(raw.get("spans", "0"))),
                       int(_text(raw.get("base", "0"))))


class SpaceStore:
    """The registry on a redis-py asyncio client (one server or a cluster)."""

    def __init__(self, r: RedisClient) -> None:
        self.r = r
        self._create = r.register_script(_CREATE)
        self._delete = r.register_script(_DELETE)
        self._drop = r.register_script(_DROP)
        self._lay_out = r.register_script(_LAY_OUT)
        self._spans = r.register_script(_SPANS)

    async def create(self, spec: SpaceSpec) -> tuple[SpaceRecord, bool]:
        """(the record, True) when made now; (the existing one, False) when it has the same
        canonical spec; SpaceConflict otherwise."""
        now = int(time.time() * 1000)
        made, *fields = await self._create(keys=[space_record(spec.name)], args=[spec.canonical(), now])
        rec = _record(dict(zip(("spec", "created", "state"), fields)))
        if rec.state == ACTIVE:
            await self.r.sadd(SPACES, spec.name)  # step 2; repeated by every create, it repairs a crash
        if int(made):
            await self.r.incr(SPACES_GENERATION)  # step 3: the dispatchers' copies reload
            return rec, True
        if rec.state != ACTIVE:
            raise SpaceConflict(rec, "state")
        differs = first_difference(rec.spec, spec)
        if differs is not None:
            raise SpaceConflict(rec, differs)
        return rec, False

    async def ensure_default(self, space: Space, retention_s: int | None = None) -> SpaceRecord:
        """Register `default` with `default_spec(space, retention_s)` (the stored table's space,
        and the log its space file declares) unless it is registered: idempotent, so a store from
        before the registry gets it at its next boot. A stored default with another definition
        is left as it is and logged (`retention_s` None: whatever log it has, silently): the
        table, not the registry, is what the default space is served by, and its log is fixed
        when it is registered, so that every matcher has logged since (docs/design.md, "Replay")."""
        try:
            rec, made = await self.create(default_spec(space, retention_s or 0))
        except SpaceConflict as exc:
            if not (retention_s is None and exc.field == "retention_s"):
                log.warning("the registry's space %r differs from the one declared at %s: left as it is",
                            DEFAULT_SPACE, exc.field)
            return exc.existing
        if made:
            log.info("registered the space %r", DEFAULT_SPACE)
        return rec

    async def declare_default(self, tables: TableStore, space: Space, retention_s: int | None,
                              boot: Callable[[], Awaitable[T]]) -> tuple[T, SpaceRecord]:
        """`boot()` (the first segment table's compare-and-set, or its read) with `default`
        registered: before the table when the store has none yet, so that a matcher waiting for
        the table finds the declared log, and again after (a store from before the registry)."""
        if await tables.get_table() is None:
            await self.ensure_default(space, retention_s)
        out = await boot()
        return out, await self.ensure_default(space, retention_s)

    async def lay_out(self, rec: SpaceRecord, table: dict[str, Any]) -> bool | None:
        """Store named space `rec`'s first segment table (epoch 1), in one step on its record's
        slot with the check that the space is still `rec` (not deleted, not made again): True
        when written now, False when it had one (a repeated create), None when it is gone."""
        out = int(await self._lay_out(keys=[space_record(rec.spec.name), space_table(rec.spec.name)],
                                      args=[rec.created, json.dumps(table), len(table["members"])]))
        return None if out < 0 else bool(out)

    async def subscriptions(self, name: str) -> int:
        """How many subscriptions space `name`'s catalogue holds (the default space's catalogue
        is the cluster's own, bluedove/store/keys.py's `catalog_hash`): one pipelined call."""
        shard = catalog_hash if name == DEFAULT_SPACE else (lambda n: space_catalog_hash(name, n))
        async with self.r.pipeline(transaction=False) as p:
            for n in range(CATALOG_SHARDS):
                p.hlen(shard(n))
            return sum(int(c) for c in await p.execute())

    async def get(self, name: str) -> SpaceRecord | None:
        raw: Mapping[str, str] = await self.r.hgetall(space_record(name))
        if not raw or "spec" not in raw:
            return None
        return _record(raw)

    async def list(self) -> list[SpaceRecord]:
        """Every registered space with a record, by name (a name whose record is gone, a purge
        cut short, is left out)."""
        names = sorted(_text(n) for n in await self.r.smembers(SPACES))
        async with self.r.pipeline(transaction=False) as p:  # one round trip, not one per space
            for n in names:
                p.hgetall(space_record(n))
            raws: list[Mapping[str, str]] = await p.execute()
        return [_record(raw)
                for raw in raws if raw and "spec" in raw]

    async def set_spans(self, name: str, spans: int) -> bool | None:
        """Give active space `name` `spans` matchers (the autoscaler growing it; the owner that
        coordinates its changes joins matchers up to it): True when set now, False when it had
        them, None when it is not active. The registry's generation moves, so matchers re-read it."""
        out = int(await self._spans(keys=[space_record(name)], args=[spans]))
        if out == 1:
            await self.r.incr(SPACES_GENERATION)
        return None if out < 0 else bool(out)

    async def delete(self, name: str) -> int:
        """Mark space `name` deleting: 1 now, 2 it already was, 0 no such space. Its keys stay
        until `purge_step` removes them."""
        marked = int(await self._delete(keys=[space_record(name)], args=[int(time.time() * 1000)]))
        if marked == 1:
            await self.r.incr(SPACES_GENERATION)
        return marked

    async def generation(self) -> int:
        """The registry's generation: it moves after every create and delete (a crash between the
        change and the bump leaves it unmoved until the next change; the dispatchers' copies also
        reload every `spaces_reload_s`)."""
        return int(await self.r.get(SPACES_GENERATION) or 0)

    async def purge_step(self, name: str, budget: int = PURGE_BUDGET) -> PurgeStep:
        """Remove at most `budget` keys of space `name`, which must be deleting (SpaceActive if
        it is active); `done` once its record and name are gone too. Call until done."""
        if budget < 1:
            raise ValueError("a purge step removes at least one key")
        state = await self.r.hget(space_record(name), "state")
        if state is not None and _text(state) != DELETING:
            raise SpaceActive(f"space {name!r} is {_text(state)}: delete it before purging it")
        if state is None:
            await self._unregister(name)
            return PurgeStep(0, True)
        removed = await self._listed(name, budget)
        if removed < budget:
            removed += await self._fixed(name, budget - removed)
        if removed >= budget:
            return PurgeStep(removed, False)
        dropped = int(await self._drop(keys=[space_record(name)]))
        if dropped < 0:  # made again since the check above: this space is not ours to purge
            raise SpaceActive(f"space {name!r} is active again")
        await self._unregister(name)
        await self.r.incr(SPACES_GENERATION)
        return PurgeStep(removed + dropped, True)

    async def _listed(self, name: str, budget: int) -> int:
        """UNLINK up to `budget` keys the space's `keys` set lists, then take them off it."""
        listed = [_text(k) for k in await self.r.srandmember(space_keys(name), budget)]
        if not listed:  # (an empty set is no key: nothing to remove)
            return 0
        await self.r.unlink(*listed)
        await self.r.srem(space_keys(name), *listed)
        return len(listed)

    async def _fixed(self, name: str, budget: int) -> int:
        """UNLINK up to `budget` of the keys the space's name gives that are still there."""
        names = space_fixed_keys(name)
        async with self.r.pipeline(transaction=False) as p:
            for k in names:
                p.exists(k)
            there = [k for k, n in zip(names, await p.execute()) if n][:budget]
        if there:
            await self.r.unlink(*there)
        return len(there)

    async def _unregister(self, name: str) -> None:
        """Take `name` off the registry, and put it back if a create made it again meanwhile."""
        await self.r.srem(SPACES, name)
        state = await self.r.hget(space_record(name), "state")
        if state is not None and _text(state) == ACTIVE:
            await self.r.sadd(SPACES, name)
