"""The subscription catalogue: the system of record, in shards, each with a change log; one
catalogue per space (the default space's is the cluster's own, bluedove/store/keys.py).

A dispatcher writes it (`CatalogueWrites`: every add, replace and removal is one Lua script
on its queue's shard, logged in the same step); a matcher reads it (`CatalogueReads`: a snapshot with
the log position it was taken at, then the log's changes after that position, tailed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec
from redis.exceptions import ResponseError

from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.store import keys as K
from bluedove.store import scripts
from bluedove.store.batch import Arg, Call
from bluedove.store.catalogue_tail import CatalogueTails
from bluedove.store.connection import Connection, StoreLimits
from bluedove.store.space_entry import SpaceAt, SpaceEntry, SpaceGone

_ENCODE = msgspec.json.Encoder().encode


def entry_json(sub: Mapping[str, Any]) -> str:
    """A subscription as the catalogue stores it: msgspec's JSON, ~5x json.dumps (whose ~3 µs a
    subscription were ~8 % of a :batch's dispatcher CPU). msgspec writes a non-finite float as
    null, so a text with a null in it is json.dumps's instead (Infinity, as it always was); so
    is one msgspec cannot write (a lone surrogate, escaped by json.dumps)."""
    try:
        text = _ENCODE(sub)
    except UnicodeEncodeError:
        return json.dumps(sub)
    return json.dumps(sub) if b"null" in text else text.decode()


class QueueMissing(Exception):
    """The queue a subscription names does not exist (or was deleted)."""
    pass


class LimitExceeded(Exception):
    """The queue already holds the most subscriptions the store allows."""
    pass


class CatalogueWrites(Connection):
    """Adds and removals of subscriptions, each atomic against its queue's limit and logged."""

    def __init__(self, url: str, limits: StoreLimits | None = None) -> None:
        super().__init__(url, limits)
        self._add_sub = self.r.register_script(scripts.ADD_SUBSCRIPTION)
        self._add_queue_subs = self.r.register_script(scripts.ADD_QUEUE_SUBSCRIPTIONS)
        self._remove_sub = self.r.register_script(scripts.REMOVE_SUBSCRIPTION)
        self._replace_sub = self.r.register_script(scripts.REPLACE_SUBSCRIPTION)
        self.entry = SpaceEntry(self.runner, self.r.register_script)

    def _add_call(self, sub: dict[str, Any], limit: int, cat: K.CatalogueKeys = K.DEFAULT_CATALOGUE) -> Call:
        queue = sub["queue"]
        shard = K.shard_of(queue)
        return Call(self._add_sub, [cat.subs(shard), cat.log(shard), cat.queue_subs(queue), cat.queue_gone(queue)],
                    [sub["id"], entry_json(sub), limit, self.limits.catalog_log_maxlen])

    async def add_subscription(self, sub_json: dict[str, Any]) -> str:
        """Store a subscription (system of record) and log it; returns the catalogue log id."""
        if not await self.r.exists(K.queue_hash(sub_json["queue"])):
            raise QueueMissing(sub_json["queue"])
        try:
            out = await self.runner.run([self._add_call(sub_json, self.limits.max_subscriptions_per_queue)])
            log_id: str = out[0]
            return log_id
        except ResponseError as exc:
            if "GONE" in str(exc):
                raise QueueMissing(sub_json["queue"]) from None
            if "LIMIT" in str(exc):
                raise LimitExceeded(self.limits.max_subscriptions_per_queue) from None
            raise

    async def add_subscriptions(self, subs: list[dict[str, Any]], chunk: int = 1000) -> int:
        """Store many subscriptions, each one atomic as in `add_subscription`, pipelined in
        chunks. QueueMissing, and nothing stored, if a queue does not exist; ResponseError if
        one was refused (the rest of its chunk is stored, later chunks are not). Returns how
        many were given."""
        queues = list({s["queue"]: None for s in subs})
        async with self.r.pipeline(transaction=False) as p:
            for q in queues:
                p.exists(K.queue_hash(q))
            missing = [q for q, n in zip(queues, await p.execute()) if not n]
        if missing:
            raise QueueMissing(missing[0])
        for start in range(0, len(subs), chunk):
            await self.runner.run([self._add_call(s, self.limits.max_subscriptions_per_queue)
                                   for s in subs[start:start + chunk]])
        return len(subs)

    def _refusal(self, exc: Exception, queue: str) -> Exception:
        """The exception a refused catalogue add stands for (QueueMissing, LimitExceeded)."""
        if isinstance(exc, ResponseError) and "GONE" in str(exc):
            return QueueMissing(queue)
        if isinstance(exc, ResponseError) and "LIMIT" in str(exc):
            return LimitExceeded(self.limits.max_subscriptions_per_queue)
        return exc

    async def add_subscriptions_each(self, subs: list[dict[str, Any]],
                                     space: SpaceAt | None = None) -> list[str | Exception]:
        """Store subscriptions of queues known to exist (their token was checked, or they were
        just created), each one atomic as in `add_subscription`, all in one round trip (in a
        named `space`, the queues not yet in it enter it first, bluedove/store/space_entry.py):
        each one's log id, or the exception it met (QueueMissing if its queue was deleted
        since, LimitExceeded, SpaceGone, or a store error), in order. The dispatcher gathers
        the subscribes under way into one such call (bluedove/dispatcher/subscriber.py)."""
        if space is None:
            calls = [self._add_call(s, self.limits.max_subscriptions_per_queue) for s in subs]
            results = await self.runner.run_each(calls)
            return [self._refusal(x, s["queue"]) if isinstance(x, Exception) else x for s, x in zip(subs, results)]
        try:
            refused = await self.entry.enter([s["queue"] for s in subs], space.name, space.created)
        except SpaceGone as exc:
            return [exc] * len(subs)
        cat = K.CatalogueKeys(space.name)
        out: list[str | Exception] = [QueueMissing(s["queue"]) for s in subs]
        todo = [i for i, s in enumerate(subs) if s["queue"] not in refused]
        results = await self.runner.run_each([self._add_call(subs[i], self.limits.max_subscriptions_per_queue, cat)
                                              for i in todo])
        for i, x in zip(todo, results):
            out[i] = self._refusal(x, subs[i]["queue"]) if isinstance(x, Exception) else x
        written = [i for i in todo if isinstance(out[i], str)]
        if written and not await self.entry.still(space.name, space.created):
            await self.remove_subscriptions([(subs[i]["id"], subs[i]["queue"]) for i in written], space)
            for i in written:
                out[i] = SpaceGone(space.name)
        return out

    async def add_queue_subscriptions(self, queue: str, subs: list[dict[str, Any]],
                                      space: SpaceAt | None = None) -> list[str]:
        """Store subscriptions of one queue, all in one atomic step or none (QueueMissing,
        LimitExceeded when they would take the queue over its limit; SpaceGone); their log
        ids, in order."""
        cat = _keys(space)
        if space is not None and await self.entry.enter([queue], space.name, space.created):
            raise QueueMissing(queue)
        args: list[Arg] = [self.limits.max_subscriptions_per_queue, self.limits.catalog_log_maxlen]
        for s in subs:
            args += (s["id"], entry_json(s))
        shard = K.shard_of(queue)
        call = Call(self._add_queue_subs, [cat.subs(shard), cat.log(shard), cat.queue_subs(queue),
                                           cat.queue_gone(queue)], args)
        out = (await self.runner.run_each([call]))[0]
        if isinstance(out, Exception):
            raise self._refusal(out, queue)
        if space is not None and not await self.entry.still(space.name, space.created):
            await self.remove_subscriptions([(s["id"], queue) for s in subs], space)
            raise SpaceGone(space.name)
        return list(out)

    async def remove_subscriptions(self, subs: list[tuple[str, str]], space: SpaceAt | None = None) -> None:
        """Remove subscriptions [(id, queue)] in one round trip (undoing a batch that failed
        part way: each removal is logged, so matchers tailing the log drop them too)."""
        if subs:
            await self.runner.run([self._remove_call(sub_id, queue, _keys(space)) for sub_id, queue in subs])

    async def remove_subscriptions_each(self, subs: list[tuple[str, str]],
                                        space: SpaceAt | None = None) -> list[str | None | Exception]:
        """Remove subscriptions [(id, queue)], each as `remove_subscription`, in one round trip:
        each one's log id (None: there was none), or the error it met, in order. The
        dispatcher gathers the unsubscribes under way into one such call."""
        cat = _keys(space)
        return await self.runner.run_each([self._remove_call(sub_id, queue, cat) for sub_id, queue in subs])

    def _remove_call(self, sub_id: str, queue: str, cat: K.CatalogueKeys = K.DEFAULT_CATALOGUE) -> Call:
        shard = K.shard_of(queue)
        return Call(self._remove_sub, [cat.queue_subs(queue), cat.subs(shard), cat.log(shard)],
                    [sub_id, self.limits.catalog_log_maxlen])

    async def replace_subscription(self, sub_json: dict[str, Any],
                                   space: SpaceAt | None = None) -> tuple[str, dict[str, Any] | None] | None:
        """Make `sub_json` the stored version of its subscription (the same id, of the same
        queue), logged as one change `replace` (scripts.REPLACE_SUBSCRIPTION): (its log id, the
        version it replaced), or None when the queue has no such subscription; QueueMissing if
        the queue was deleted. (In a named space it needs no check of the space: it writes
        only while the queue's set there holds the id, and a space's purge removes those sets
        before its catalogue's hashes and logs.)"""
        queue = sub_json["queue"]
        shard = K.shard_of(queue)
        cat = _keys(space)
        call = Call(self._replace_sub, [cat.queue_subs(queue), cat.subs(shard), cat.log(shard), cat.queue_gone(queue)],
                    [sub_json["id"], entry_json(sub_json), self.limits.catalog_log_maxlen])
        try:
            out = (await self.runner.run([call]))[0]
        except ResponseError as exc:
            raise self._refusal(exc, queue) from None
        if not out:
            return None
        log_id, old = out
        return log_id, json.loads(old) if old else None

    async def get_subscription(self, sub_id: str, queue: str, space: SpaceAt | None = None) -> dict[str, Any] | None:
        """Subscription `sub_id` of `queue`, or None."""
        raw = await self.r.hget(_keys(space).subs(K.shard_of(queue)), sub_id)
        sub = json.loads(raw) if raw else None
        return sub if sub is not None and sub.get("queue") == queue else None

    async def remove_subscription(self, sub_id: str, queue: str, space: SpaceAt | None = None) -> str | None:
        """Remove a subscription of `queue`; returns the log id, or None if there was none."""
        out = await self.runner.run([self._remove_call(sub_id, queue, _keys(space))])
        log_id: str | None = out[0]
        return log_id


def _keys(space: SpaceAt | None) -> K.CatalogueKeys:
    return K.DEFAULT_CATALOGUE if space is None else K.CatalogueKeys(space.name)


class CatalogueReads(CatalogueTails):
    """The catalogue as a matcher reads it: a snapshot and its position, then the log after it."""

    async def catalogue_snapshot(self, space: str = DEFAULT_SPACE) -> tuple[str, list[dict[str, Any]]]:
        """(log position, every subscription): replay the log after the position to stay current.

        The position is read before the scan, so any change racing the scan is in the log
        after it; replaying adds and removes in order is then exact.
        """
        pos, raws = await self.catalogue_snapshot_raw(space)
        return pos, [json.loads(raw) for raw in raws]

    async def catalogue_snapshot_raw(self, space: str = DEFAULT_SPACE) -> tuple[str, list[str]]:
        """`catalogue_snapshot` with each subscription left as its JSON text (a matcher
        parses tens of thousands at once, far faster than one by one)."""
        pos = await self.catalogue_position(space)
        cat = K.CatalogueKeys(space)
        raws: list[str] = []
        for shard in range(K.CATALOG_SHARDS):
            raws += [raw async for _, raw in self.r.hscan_iter(cat.subs(shard), count=10_000)]
        return pos, raws

    async def catalogue_position(self, space: str = DEFAULT_SPACE) -> str:
        """The newest entry of every shard's log (bluedove/store/keys.py): where a reader that
        needs nothing older starts."""
        async with self.r.pipeline(transaction=False) as p:
            for shard in range(K.CATALOG_SHARDS):
                p.xrevrange(K.CatalogueKeys(space).log(shard), count=1)
            lasts = await p.execute()
        return K.join_pos([last[0][0] if last else "0-0" for last in lasts])
