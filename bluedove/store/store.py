"""Async access to the Redis store: queues and tokens, the catalogue, deliveries, the table.

One server or a Redis Cluster (bluedove/store/client.py), by the same code. Every change of
several keys of one slot is one Lua script (bluedove/store/scripts.py); the key layout, and
which keys share a slot, is bluedove/store/keys.py's. Where a change spans slots (a delivery
batch on a cluster, deleting a queue), each slot's step is atomic and safe to repeat.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass

from redis.exceptions import ResponseError

from bluedove.core.queue_bounds import QueueBounds
from bluedove.store import keys as K
from bluedove.store import scripts
from bluedove.store.batch import Call, Runner, group_deliveries
from bluedove.store.client import async_client, wait_settings
from bluedove.store.ids import hash_token, new_id, new_token, valid_queue_id
from bluedove.store.wire import PackedConnection, deliveries_json

log = logging.getLogger("bluedove.store")

GROUP = "g"
CONSUMER = "c"
# A constant digest to compare against when a queue does not exist, so that a missing queue
# and a wrong token take the same path.
_DUMMY_DIGEST = hashlib.sha256(b"bluedove-no-such-queue").hexdigest()


@dataclass(frozen=True)
class StoreLimits:
    max_subscriptions_per_queue: int = 10_000
    dedup_window_s: int = 600
    visibility_timeout_s: float = 30.0
    catalog_log_maxlen: int = 1_000_000
    # A queue's bounds when it was created without its own (and for queues created before
    # queues had bounds): most undelivered deliveries (0 = no cap), retention s (0 = none).
    max_undelivered: int = 100_000
    retention_s: int = 0


class QueueMissing(Exception):
    pass


class LimitExceeded(Exception):
    pass


class BadToken(Exception):
    """The token given with a poll or ack does not open the queue (or the queue is gone)."""


class Store:
    def __init__(self, url: str, limits: StoreLimits | None = None) -> None:
        self.url = url
        self.limits = limits or StoreLimits()
        # redis-py's pool refuses connection 101 by default ("Too many connections"), and each
        # long-poll holds one while it blocks: the cap must cover every poll a dispatcher serves.
        self.r = async_client(url, connection_class=PackedConnection, health_check_interval=30,
                              max_connections=10_000)
        self.runner = Runner(self.r, *wait_settings(url))
        self._add_sub = self.r.register_script(scripts.ADD_SUBSCRIPTION)
        self._add_queue_subs = self.r.register_script(scripts.ADD_QUEUE_SUBSCRIPTIONS)
        self._remove_sub = self.r.register_script(scripts.REMOVE_SUBSCRIPTION)
        self._delete_subs = self.r.register_script(scripts.DELETE_QUEUE_SUBSCRIPTIONS)
        self._deliver = self.r.register_script(scripts.DELIVER)
        self._dead_letter = self.r.register_script(scripts.DEAD_LETTER)
        self._put_table_if = self.r.register_script(scripts.PUT_TABLE_IF)
        self._poll = self.r.register_script(scripts.POLL)
        self._ack = self.r.register_script(scripts.ACK)
        # Deliveries this process handed out again after their visibility timeout (the series).
        self.redelivered = 0
        # Deliveries refused by a full queue in the writes of this process (the metrics).
        self.dropped = 0

    async def close(self) -> None:
        await self.r.aclose()

    def _at(self, key: str) -> dict:
        """Where to send XREAD and XREADGROUP about `key` on a cluster. Their keys can sit
        anywhere in the command ("movable keys"), so redis-py's cluster client would first ask
        a node which they are (COMMAND GETKEYS): a round trip of its own per long-poll and per
        catalogue read, and a failure while that node is down. The key's node is known here."""
        return {"target_nodes": self.r.get_node_from_key(key)} if self.runner.cluster else {}

    async def ping(self) -> bool:
        return bool(await self.r.ping())

    # -- queues ----------------------------------------------------------------------------
    async def create_queue(self, bounds: QueueBounds | None = None) -> tuple[str, str]:
        """A new queue and its token (shown once; only its hash is kept)."""
        return (await self.create_queues(1, bounds=bounds))[0]

    def default_bounds(self) -> QueueBounds:
        return QueueBounds(self.limits.max_undelivered, self.limits.retention_s)

    async def create_queues(self, n: int, chunk: int = 1000, bounds: QueueBounds | None = None) -> list[tuple[str, str]]:
        """`n` new queues with their tokens, pipelined, each with `bounds` (default: the
        store's limits), kept in its hash. Not one transaction (the keys live in different
        slots): a failure part way leaves at most a queue nobody has the token of."""
        extra = (bounds or self.default_bounds()).fields()
        out: list[tuple[str, str]] = []
        for start in range(0, n, chunk):
            made = [(new_id(), new_token()) for _ in range(min(chunk, n - start))]
            async with self.r.pipeline(transaction=False) as p:
                for queue, token in made:
                    digest = hash_token(token)
                    p.hset(K.queue_hash(queue), mapping={"token": digest, "created": time.time(), **extra})
                    p.xgroup_create(K.queue_stream(queue), GROUP, id="0", mkstream=True)
                    p.set(K.token_key(digest), queue)
                p.sadd(K.QUEUES, *(q for q, _ in made))
                await p.execute()
            out += made
        return out

    async def check_token(self, queue: str, token: str | None) -> bool:
        """Constant-time check of a queue token; False alike for a missing queue or token."""
        stored = await self.r.hget(K.queue_hash(queue), "token") if valid_queue_id(queue) else None
        given = hash_token(token or "")
        ok = hmac.compare_digest(stored or _DUMMY_DIGEST, given)
        return ok and stored is not None and token is not None

    async def queue_for_token(self, token: str | None) -> str | None:
        """The queue a token opens, or None (looked up by the token's hash)."""
        if not token:
            return None
        return await self.r.get(K.token_key(hash_token(token)))

    async def delete_queue(self, queue: str) -> list[str]:
        """Delete a queue, its deliveries and subscriptions; returns the removed subscription ids.

        Two steps, each atomic: the catalogue's (the queue is marked gone, so no subscription
        can be added to it any more, and its subscriptions are removed), then the queue's own
        keys. If the second fails, the queue is left with no subscriptions and cannot gain any;
        deleting it again finishes the job. Its dedup marks expire on their own."""
        out = await self.runner.run([Call(self._delete_subs, [K.queue_subs(queue), K.queue_gone(queue),
                                                              K.catalog_hash(K.shard_of(queue)),
                                                              K.catalog_log(K.shard_of(queue))],
                                          [K.GONE_TTL_S, self.limits.catalog_log_maxlen])])
        digest = await self.r.hget(K.queue_hash(queue), "token")
        async with self.r.pipeline(transaction=False) as p:
            p.delete(K.queue_hash(queue))
            p.delete(K.queue_stream(queue))
            p.delete(K.dead_outbox(queue))
            if digest:
                p.delete(K.token_key(digest))
            p.srem(K.QUEUES, queue)
            await p.execute()
        return list(out[0][1:])

    # -- catalogue -------------------------------------------------------------------------
    def _add_call(self, sub: dict, limit: int) -> Call:
        queue = sub["queue"]
        shard = K.shard_of(queue)
        return Call(self._add_sub, [K.catalog_hash(shard), K.catalog_log(shard), K.queue_subs(queue),
                                    K.queue_gone(queue)],
                    [sub["id"], json.dumps(sub), limit, self.limits.catalog_log_maxlen])

    async def add_subscription(self, sub_json: dict) -> str:
        """Store a subscription (system of record) and log it; returns the catalogue log id."""
        if not await self.r.exists(K.queue_hash(sub_json["queue"])):
            raise QueueMissing(sub_json["queue"])
        try:
            return (await self.runner.run([self._add_call(sub_json, self.limits.max_subscriptions_per_queue)]))[0]
        except ResponseError as exc:
            if "GONE" in str(exc):
                raise QueueMissing(sub_json["queue"]) from None
            if "LIMIT" in str(exc):
                raise LimitExceeded(self.limits.max_subscriptions_per_queue) from None
            raise

    async def add_subscriptions(self, subs: list[dict], chunk: int = 1000) -> int:
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

    async def add_subscriptions_each(self, subs: list[dict]) -> list:
        """Store subscriptions of queues known to exist (their token was checked, or they were
        just created), each one atomic as in `add_subscription`, all in one round trip:
        each one's log id, or the exception it met (QueueMissing if its queue was deleted
        since, LimitExceeded, or a store error), in order. The dispatcher gathers the
        subscribes under way into one such call (bluedove/dispatcher/subscriber.py)."""
        calls = [self._add_call(s, self.limits.max_subscriptions_per_queue) for s in subs]
        results = await self.runner.run_each(calls)
        return [self._refusal(x, s["queue"]) if isinstance(x, Exception) else x for s, x in zip(subs, results)]

    async def add_queue_subscriptions(self, queue: str, subs: list[dict]) -> list[str]:
        """Store subscriptions of one queue, all in one atomic step or none (QueueMissing,
        LimitExceeded when they would take the queue over its limit); their log ids, in order."""
        args: list = [self.limits.max_subscriptions_per_queue, self.limits.catalog_log_maxlen]
        for s in subs:
            args += (s["id"], json.dumps(s))
        shard = K.shard_of(queue)
        call = Call(self._add_queue_subs, [K.catalog_hash(shard), K.catalog_log(shard), K.queue_subs(queue),
                                           K.queue_gone(queue)], args)
        out = (await self.runner.run_each([call]))[0]
        if isinstance(out, Exception):
            raise self._refusal(out, queue)
        return list(out)

    async def remove_subscriptions(self, subs: list[tuple[str, str]]) -> None:
        """Remove subscriptions [(id, queue)] in one round trip (undoing a batch that failed
        part way: each removal is logged, so matchers tailing the log drop them too)."""
        calls = []
        for sub_id, queue in subs:
            shard = K.shard_of(queue)
            calls.append(Call(self._remove_sub, [K.queue_subs(queue), K.catalog_hash(shard), K.catalog_log(shard)],
                              [sub_id, self.limits.catalog_log_maxlen]))
        if calls:
            await self.runner.run(calls)

    async def get_subscription(self, sub_id: str, queue: str) -> dict | None:
        """Subscription `sub_id` of `queue`, or None."""
        raw = await self.r.hget(K.catalog_hash(K.shard_of(queue)), sub_id)
        sub = json.loads(raw) if raw else None
        return sub if sub is not None and sub.get("queue") == queue else None

    async def remove_subscription(self, sub_id: str, queue: str) -> str | None:
        """Remove a subscription of `queue`; returns the log id, or None if there was none."""
        shard = K.shard_of(queue)
        out = await self.runner.run([Call(self._remove_sub, [K.queue_subs(queue), K.catalog_hash(shard),
                                                             K.catalog_log(shard)],
                                          [sub_id, self.limits.catalog_log_maxlen])])
        return out[0]

    async def catalogue_snapshot(self) -> tuple[str, list[dict]]:
        """(log position, every subscription): replay the log after the position to stay current.

        The position is read before the scan, so any change racing the scan is in the log
        after it; replaying adds and removes in order is then exact.
        """
        pos, raws = await self.catalogue_snapshot_raw()
        return pos, [json.loads(raw) for raw in raws]

    async def catalogue_snapshot_raw(self) -> tuple[str, list[str]]:
        """`catalogue_snapshot` with each subscription left as its JSON text (a matcher
        parses tens of thousands at once, far faster than one by one)."""
        pos = await self.catalogue_position()
        raws = []
        for shard in range(K.CATALOG_SHARDS):
            raws += [raw async for _, raw in self.r.hscan_iter(K.catalog_hash(shard), count=10_000)]
        return pos, raws

    async def catalogue_position(self) -> str:
        """The newest entry of every shard's log (bluedove/store/keys.py): where a reader that
        needs nothing older starts."""
        async with self.r.pipeline(transaction=False) as p:
            for shard in range(K.CATALOG_SHARDS):
                p.xrevrange(K.catalog_log(shard), count=1)
            lasts = await p.execute()
        return K.join_pos([last[0][0] if last else "0-0" for last in lasts])

    async def catalogue_changes(self, after: str, count: int = 1000) -> tuple[str, list[dict]]:
        """(the position after them, the changes after `after` [{op, id, sub?}]), up to `count`
        of each shard, without waiting. Changes of one subscription are in its queue's shard,
        in order; changes of different shards are independent."""
        ids = K.parse_pos(after)
        async with self.r.pipeline(transaction=False) as p:
            for shard, after_id in enumerate(ids):
                key = K.catalog_log(shard)
                p.execute_command("XREAD", "COUNT", count, "STREAMS", key, after_id, **self._at(key))
            res = await p.execute()
        changes: list[dict] = []
        for shard, got in enumerate(res):
            if got:
                entries = got[0][1]
                ids[shard] = entries[-1][0]
                changes += [fields for _, fields in entries]
        return K.join_pos(ids), changes

    async def catalogue_tail(self, shard: int, after_id: str, block_ms: int | None = None,
                             count: int = 1000) -> list[tuple[str, dict]]:
        """One shard's log entries after `after_id` [(entry id, {op, id, sub?})], waiting up
        to `block_ms` for the first (None: not at all)."""
        return (await self.catalogue_tail_many({shard: after_id}, block_ms, count)).get(shard, [])

    def catalogue_read_groups(self) -> list[list[int]]:
        """The catalogue shards one `catalogue_tail_many` may read together: all of them on one
        server; one each on a cluster, where the shards sit in different slots (a command's
        keys must share a slot there, even on one node)."""
        shards = list(range(K.CATALOG_SHARDS))
        return [[s] for s in shards] if self.runner.cluster else [shards]

    async def catalogue_tail_many(self, after: dict[int, str], block_ms: int | None = None,
                                  count: int = 1000) -> dict[int, list[tuple[str, dict]]]:
        """The log entries of several shards (one group of `catalogue_read_groups`) after each
        one's id in `after`: {shard: [(entry id, {op, id, sub?})]} for the shards that have
        some, up to `count` each, in one XREAD waiting up to `block_ms` for the first (None:
        not at all)."""
        shards = list(after)
        keys = [K.catalog_log(s) for s in shards]
        wait = () if block_ms is None else ("BLOCK", block_ms)
        res = await self.r.execute_command("XREAD", "COUNT", count, *wait, "STREAMS", *keys,
                                           *(after[s] for s in shards), **self._at(keys[0]))
        if not res:
            return {}
        shard_of_key = dict(zip(keys, shards))
        return {shard_of_key[key]: list(entries) for key, entries in res if entries}

    # -- deliveries ------------------------------------------------------------------------
    async def deliver(self, messages: list[tuple], deliveries: list[tuple[str, int, str]],
                      marks: list[bool] | None = None) -> tuple[int, int]:
        """Write one batch: messages [(id, json[, dedup ttl s])], deliveries [(queue, index, subs
        json)]. Returns (messages new to the dedup window, deliveries written).

        Each delivery carries a dedup mark for (queue, message) that lasts the message's ttl
        (by default the dedup window), so writing the same batch again, whole or after a
        failure part way, writes none twice. The messages of `marks` (default: all) are
        publisher-chosen ids: once a batch is written, each gets a mark of its own, and
        publishing it again within the window writes nothing, even to a queue that has
        subscribed since. The batch is one atomic call on one server; on a cluster, one per
        slot (docs/design.md, "The store on a Redis Cluster")."""
        ttls = [int(m[2]) if len(m) > 2 else self.limits.dedup_window_s for m in messages]
        mids = [m[0] for m in messages]
        marked = [i for i in range(len(messages)) if marks is None or marks[i]]
        seen: set[int] = set()
        if marked:
            async with self.r.pipeline(transaction=False) as p:
                for i in marked:
                    p.exists(K.message_mark(mids[i]))
                seen = {i for i, n in zip(marked, await p.execute()) if n}
        groups = group_deliveries(deliveries, mids, seen, self.runner.slot_of_queue)
        calls = []
        for g in groups.values():
            args: list = [len(g.messages), self.limits.max_undelivered, self.limits.retention_s, GROUP]
            for i in g.messages:
                args += (messages[i][1], ttls[i])
            calls.append(Call(self._deliver, g.keys, args + g.pairs))
        written = 0
        new = {i for i in marked if i not in seen}
        if calls:
            for g, (n, dropped, *local) in zip(groups.values(), await self.runner.run(calls, wait=True)):
                written += int(n)
                self.dropped += int(dropped)
                new.update(g.messages[int(li) - 1] for li in local)
        fresh = [i for i in marked if i not in seen]
        if fresh:
            async with self.r.pipeline(transaction=False) as p:
                for i in fresh:
                    p.set(K.message_mark(mids[i]), "1", ex=ttls[i])
                await p.execute()
        return len({mids[i] for i in new}), written

    async def poll(self, queue: str, max_n: int, wait_s: float, stop: asyncio.Event | None = None,
                   token: str | None = None) -> list[dict]:
        """Up to max_n deliveries as the API shows them (`poll_json`'s, decoded)."""
        _, body = await self.poll_json(queue, max_n, wait_s, stop, token)
        return json.loads(body)["messages"]

    async def poll_json(self, queue: str, max_n: int, wait_s: float, stop: asyncio.Event | None = None,
                        token: str | None = None) -> tuple[int, str]:
        """(n, the REST body `{"messages": [...]}`) of up to max_n deliveries: expired unacked
        ones first, then new ones, long-polling wait_s when there are none.

        One round trip when something is there (the POLL script, which also checks `token`
        when one is given: BadToken if it does not open the queue); an empty queue is then
        long-polled. A long-poll returns early (possibly empty) once `stop` is set: a
        shutting-down dispatcher answers its waiting pollers instead of holding them."""
        if token is not None and not valid_queue_id(queue):
            raise BadToken(queue)
        key = K.queue_stream(queue)
        keys = [key, K.queue_hash(queue), K.dead_outbox(queue)]
        args = [GROUP, CONSUMER, int(self.limits.visibility_timeout_s * 1000), max_n,
                "" if token is None else hash_token(token), self.limits.retention_s]
        deadline = time.monotonic() + wait_s
        while True:
            res = await self._poll(keys=keys, args=args)
            if res is None:
                raise BadToken(queue)
            n, body, again, *dead = res
            if dead and int(dead[0]):
                try:
                    await self.move_dead_letters(queue, dead[1])
                except Exception as exc:  # noqa: BLE001 - the outbox keeps them for the next poll
                    log.warning("dead-letter move from %s to %s failed, retried at its next poll: %r",
                                queue, dead[1], exc)
            self.redelivered += int(again)
            left = deadline - time.monotonic()
            if n or left <= 0 or (stop is not None and stop.is_set()):
                return int(n), body
            # Wake at least every second to pick up deliveries whose visibility expired.
            block = max(int(min(left, 1.0) * 1000), 1)
            got = await self.r.execute_command("XREADGROUP", "GROUP", GROUP, CONSUMER, "COUNT", max_n, "BLOCK", block,
                                               "STREAMS", key, ">", **self._at(key))
            raw = [(eid, f["m"], f["s"]) for eid, f in got[0][1] if f] if got else []
            if raw or time.monotonic() >= deadline or (stop is not None and stop.is_set()):
                return len(raw), deliveries_json(raw).decode()

    async def ack(self, queue: str, receipts: list[str], token: str | None = None) -> int:
        """Remove acked deliveries; returns how many were handed out and not yet acked. With
        `token`, the same call checks it first: BadToken if it does not open the queue."""
        if token is None and not receipts:
            return 0
        if token is not None and not valid_queue_id(queue):
            raise BadToken(queue)
        acked = await self._ack(keys=[K.queue_stream(queue), K.queue_hash(queue)],
                                args=[GROUP, "" if token is None else hash_token(token), *receipts])
        if acked is None:
            raise BadToken(queue)
        return int(acked)

    async def move_dead_letters(self, queue: str, dead_queue: str, count: int = 100) -> int:
        """Step two of dead-lettering: what POLL put in `queue`'s outbox goes into `dead_queue`
        (one DEAD_LETTER call per delivery, on that queue's slot, marked so that a repeat after
        a crash writes nothing), then leaves the outbox. Returns how many were written."""
        outbox = K.dead_outbox(queue)
        moved = 0
        while entries := await self.r.xrange(outbox, count=count):
            calls = [Call(self._dead_letter, [K.queue_stream(dead_queue), K.queue_hash(dead_queue),
                                              K.dead_mark(dead_queue, queue, f["src"])],
                          [f["m"], f["s"], self.limits.dedup_window_s, self.limits.max_undelivered])
                     for _, f in entries]
            moved += sum(1 for x in await self.runner.run(calls, wait=True) if int(x) == 1)
            await self.r.xdel(outbox, *(eid for eid, _ in entries))
            if len(entries) < count:
                break
        return moved

    async def queue_info(self, queue: str) -> dict:
        """A queue's bounds and counters (GET /v1/queues/{queue}); the caller checked its token."""
        async with self.r.pipeline(transaction=False) as p:
            p.hgetall(K.queue_hash(queue))
            p.xlen(K.queue_stream(queue))
            h, depth = await p.execute()
        dl = h.get("dl_queue")
        return {
            "queue": queue,
            "depth": int(depth),
            "max_undelivered": int(h.get("max_undelivered", self.limits.max_undelivered)),
            "retention_s": int(h.get("retention_s", self.limits.retention_s)),
            "dead_letter": {"queue": dl, "max_deliveries": int(h["dl_max"])} if dl else None,
            "dropped": int(h.get("dropped", 0)),
            "expired": int(h.get("expired", 0)),
            "dead_lettered": int(h.get("dead_lettered", 0)),
        }

    async def queue_depth(self, queue: str) -> int:
        return int(await self.r.xlen(K.queue_stream(queue)))

    async def backlog(self, queues: list[str], chunk: int = 2000) -> int:
        """`queue_depth` summed over many queues, pipelined in chunks."""
        total = 0
        for start in range(0, len(queues), chunk):
            async with self.r.pipeline(transaction=False) as p:
                for q in queues[start:start + chunk]:
                    p.xlen(K.queue_stream(q))
                total += sum(int(n) for n in await p.execute())
        return total

    # -- cluster state ---------------------------------------------------------------------
    async def get_table(self) -> dict | None:
        raw = await self.r.get(K.TABLE)
        return json.loads(raw) if raw else None

    async def put_table_if(self, expected_epoch: int, table: dict) -> bool:
        """Store `table` only if the stored one is still at `expected_epoch` (0: none stored)."""
        return bool(await self._put_table_if(keys=[K.TABLE], args=[expected_epoch, json.dumps(table)]))

    async def put_seed(self, seed: dict) -> None:
        """The partition seed the table was last laid out by (bluedove/core/partition/seeds.py); the split
        planner reads it for where a range's load halves."""
        await self.r.set(K.SEED, json.dumps(seed))

    async def get_seed(self) -> dict | None:
        raw = await self.r.get(K.SEED)
        return json.loads(raw) if raw else None

    async def add_event(self, event: dict, keep: int = 200) -> None:
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

    async def put_autoscaler(self, state: dict, ttl_s: int) -> None:
        """The running autoscaler's settings; they expire if it stops refreshing them."""
        await self.r.set(K.AUTOSCALER, json.dumps(state), ex=ttl_s)

    async def get_autoscaler(self) -> dict | None:
        raw = await self.r.get(K.AUTOSCALER)
        return json.loads(raw) if raw else None

    async def events(self, limit: int = 50) -> list[dict]:
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

    async def dispatchers(self) -> list[dict]:
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


async def wait_ready(store: Store, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await store.ping()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
