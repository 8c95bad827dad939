"""Async access to the Redis store: queues and tokens, the catalogue, deliveries, the table.

Every operation that changes several keys is one Lua script (bluedove/store/scripts.py),
so a failed request leaves nothing half-done.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import secrets
import time
import uuid
from dataclasses import dataclass

import hiredis
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from bluedove.store import scripts

GROUP = "g"
CONSUMER = "c"
_RECEIPT_RE = re.compile(r"\d{1,20}-\d{1,20}")  # used with fullmatch: `$` would pass "1-0\n"
_RECEIPTS_RE = re.compile(r"\d{1,20}-\d{1,20}(?:,\d{1,20}-\d{1,20})*")  # an ack's receipts, joined by ","
# What a queue id can be (new_id makes 32 hex digits). No ':' above all: "<queue>:s" would
# name the queue's stream, whose HGET fails (WRONGTYPE), telling an existing queue apart.
_QUEUE_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
# A constant digest to compare against when a queue does not exist, so that a missing queue
# and a wrong token take the same path.
_DUMMY_DIGEST = hashlib.sha256(b"bluedove-no-such-queue").hexdigest()


@dataclass(frozen=True)
class StoreLimits:
    max_subscriptions_per_queue: int = 10_000
    dedup_window_s: int = 600
    visibility_timeout_s: float = 30.0
    catalog_log_maxlen: int = 1_000_000


class PackedConnection(aioredis.Connection):
    """redis-py's asyncio connection with commands packed by hiredis in C, as its sync client
    does: the same bytes, ~9x cheaper for a matcher's DELIVER call of ~1,700 arguments
    (5.6 -> 0.6 µs per message). Anything but str, bytes, int and float takes redis-py's path."""

    _PLAIN = frozenset((str, bytes, int, float))

    def pack_command(self, *args):
        types = set(map(type, args))
        if not types <= self._PLAIN or type(args[0]) is float:
            return super().pack_command(*args)
        if isinstance(args[0], str):  # "SCRIPT LOAD" and the like go as separate words
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        if float in types:  # formatted as redis-py does
            args = tuple(repr(a) if type(a) is float else a for a in args)
        return [hiredis.pack_command(args)]


class QueueMissing(Exception):
    pass


class LimitExceeded(Exception):
    pass


class BadToken(Exception):
    """The token given with a poll or ack does not open the queue (or the queue is gone)."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_id() -> str:
    return uuid.uuid4().hex


TOKEN_PREFIX = "bdq_"


def new_token() -> str:
    """A queue token: 256 random bits, url-safe. The prefix makes tokens easy to spot (secret
    scanners, logs) and keeps them from starting with '-', which a command line reads as a flag."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class Store:
    def __init__(self, url: str, limits: StoreLimits | None = None) -> None:
        self.url = url
        self.limits = limits or StoreLimits()
        # redis-py's pool refuses connection 101 by default ("Too many connections"), and each
        # long-poll holds one while it blocks: the cap must cover every poll a dispatcher serves.
        plain = {"connection_class": PackedConnection} if url.startswith("redis://") else {}  # TLS, unix: as given
        self.r = aioredis.from_url(url, decode_responses=True, health_check_interval=30, max_connections=10_000,
                                   **plain)
        self._add_sub = self.r.register_script(scripts.ADD_SUBSCRIPTION)
        self._remove_sub = self.r.register_script(scripts.REMOVE_SUBSCRIPTION)
        self._delete_queue = self.r.register_script(scripts.DELETE_QUEUE)
        self._deliver = self.r.register_script(scripts.DELIVER)
        self._put_table_if = self.r.register_script(scripts.PUT_TABLE_IF)
        self._poll = self.r.register_script(scripts.POLL)
        self._ack = self.r.register_script(scripts.ACK)
        # Deliveries this process handed out again after their visibility timeout (the series).
        self.redelivered = 0

    async def close(self) -> None:
        await self.r.aclose()

    async def ping(self) -> bool:
        return bool(await self.r.ping())

    # -- queues ----------------------------------------------------------------------------
    async def create_queue(self) -> tuple[str, str]:
        """A new queue and its token (shown once; only its hash is kept)."""
        queue, token = new_id(), new_token()
        digest = hash_token(token)
        async with self.r.pipeline(transaction=True) as p:
            p.hset(f"bd:q:{queue}", mapping={"token": digest, "created": time.time()})
            p.set(f"bd:tok:{digest}", queue)
            p.xgroup_create(f"bd:q:{queue}:s", GROUP, id="0", mkstream=True)
            await p.execute()
        return queue, token

    async def create_queues(self, n: int, chunk: int = 1000) -> list[tuple[str, str]]:
        """`n` new queues with their tokens, pipelined (bulk loads: benchmarks, imports)."""
        out: list[tuple[str, str]] = []
        for start in range(0, n, chunk):
            made = [(new_id(), new_token()) for _ in range(min(chunk, n - start))]
            async with self.r.pipeline(transaction=False) as p:
                for queue, token in made:
                    digest = hash_token(token)
                    p.hset(f"bd:q:{queue}", mapping={"token": digest, "created": time.time()})
                    p.set(f"bd:tok:{digest}", queue)
                    p.xgroup_create(f"bd:q:{queue}:s", GROUP, id="0", mkstream=True)
                await p.execute()
            out += made
        return out

    async def check_token(self, queue: str, token: str | None) -> bool:
        """Constant-time check of a queue token; False alike for a missing queue or token."""
        stored = await self.r.hget(f"bd:q:{queue}", "token") if valid_queue_id(queue) else None
        given = hash_token(token or "")
        ok = hmac.compare_digest(stored or _DUMMY_DIGEST, given)
        return ok and stored is not None and token is not None

    async def queue_for_token(self, token: str | None) -> str | None:
        """The queue a token opens, or None (looked up by the token's hash)."""
        if not token:
            return None
        return await self.r.get(f"bd:tok:{hash_token(token)}")

    async def delete_queue(self, queue: str) -> list[str]:
        """Delete a queue, its deliveries and subscriptions; returns the removed subscription ids."""
        out = await self._delete_queue(args=[queue, self.limits.catalog_log_maxlen])
        return list(out[1:])

    # -- catalogue -------------------------------------------------------------------------
    async def add_subscription(self, sub_json: dict) -> str:
        """Store a subscription (system of record) and log it; returns the catalogue log id."""
        try:
            return await self._add_sub(args=[
                sub_json["id"], sub_json["queue"], json.dumps(sub_json),
                self.limits.max_subscriptions_per_queue, self.limits.catalog_log_maxlen,
            ])
        except ResponseError as exc:
            if "NOQUEUE" in str(exc):
                raise QueueMissing(sub_json["queue"]) from None
            if "LIMIT" in str(exc):
                raise LimitExceeded(self.limits.max_subscriptions_per_queue) from None
            raise

    async def add_subscriptions(self, subs: list[dict], chunk: int = 1000) -> int:
        """Store many subscriptions, each one atomic as in `add_subscription` (no limit
        checks beyond its own), pipelined in chunks. Raises ResponseError if one was refused
        (the rest of its chunk is stored, later chunks are not). Returns how many were given."""
        for start in range(0, len(subs), chunk):
            async with self.r.pipeline(transaction=False) as p:
                for sub in subs[start:start + chunk]:
                    await self._add_sub(args=[sub["id"], sub["queue"], json.dumps(sub),
                                              self.limits.max_subscriptions_per_queue,
                                              self.limits.catalog_log_maxlen], client=p)
                await p.execute()
        return len(subs)

    async def get_subscription(self, sub_id: str) -> dict | None:
        raw = await self.r.hget("bd:subs", sub_id)
        return json.loads(raw) if raw else None

    async def remove_subscription(self, sub_id: str, queue: str) -> str | None:
        """Remove a subscription of `queue`; returns the log id, or None if there was none."""
        return await self._remove_sub(args=[sub_id, queue, self.limits.catalog_log_maxlen])

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
        raws = [raw async for _, raw in self.r.hscan_iter("bd:subs", count=10_000)]
        return pos, raws

    async def catalogue_position(self) -> str:
        """The newest catalogue log id ("0-0" when empty): where a reader that needs nothing
        older starts."""
        last = await self.r.xrevrange("bd:catlog", count=1)
        return last[0][0] if last else "0-0"

    async def catalogue_changes(self, after: str, block_ms: int | None = None, count: int = 1000) -> list[tuple[str, dict]]:
        """Log entries after `after`: [(log id, {op, id, sub?})]; blocks up to block_ms if none."""
        res = await self.r.xread({"bd:catlog": after}, count=count, block=block_ms)
        if not res:
            return []
        return [(eid, fields) for eid, fields in res[0][1]]

    # -- deliveries ------------------------------------------------------------------------
    async def deliver(self, messages: list[tuple], deliveries: list[tuple[str, int, str]]) -> tuple[int, int]:
        """Write one batch atomically: messages [(id, json[, dedup ttl s])], deliveries
        [(queue, index, subs json)]. A message's dedup mark lasts its ttl, by default the
        dedup window. Returns (messages new to the dedup window, deliveries written).
        """
        args: list = [len(messages)]
        for mid, body, *ttl in messages:
            args += [mid, body, int(ttl[0]) if ttl else self.limits.dedup_window_s]
        for queue, idx, subs in deliveries:
            args += [queue, idx + 1, subs]
        fresh, written = await self._deliver(args=args)
        return int(fresh), int(written)

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
        key = f"bd:q:{queue}:s"
        keys = [key, f"bd:q:{queue}"]
        args = [GROUP, CONSUMER, int(self.limits.visibility_timeout_s * 1000), max_n,
                "" if token is None else hash_token(token)]
        deadline = time.monotonic() + wait_s
        while True:
            res = await self._poll(keys=keys, args=args)
            if res is None:
                raise BadToken(queue)
            n, body, again = res
            self.redelivered += int(again)
            left = deadline - time.monotonic()
            if n or left <= 0 or (stop is not None and stop.is_set()):
                return int(n), body
            # Wake at least every second to pick up deliveries whose visibility expired.
            block = max(int(min(left, 1.0) * 1000), 1)
            got = await self.r.xreadgroup(GROUP, CONSUMER, {key: ">"}, count=max_n, block=block)
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
        acked = await self._ack(keys=[f"bd:q:{queue}:s", f"bd:q:{queue}"],
                                args=[GROUP, "" if token is None else hash_token(token), *receipts])
        if acked is None:
            raise BadToken(queue)
        return int(acked)

    async def queue_depth(self, queue: str) -> int:
        return int(await self.r.xlen(f"bd:q:{queue}:s"))

    async def backlog(self, queues: list[str], chunk: int = 2000) -> int:
        """`queue_depth` summed over many queues, pipelined in chunks."""
        total = 0
        for start in range(0, len(queues), chunk):
            async with self.r.pipeline(transaction=False) as p:
                for q in queues[start:start + chunk]:
                    p.xlen(f"bd:q:{q}:s")
                total += sum(int(n) for n in await p.execute())
        return total

    # -- cluster state ---------------------------------------------------------------------
    async def get_table(self) -> dict | None:
        raw = await self.r.get("bd:table")
        return json.loads(raw) if raw else None

    async def put_table_if(self, expected_epoch: int, table: dict) -> bool:
        """Store `table` only if the stored one is still at `expected_epoch` (0: none stored)."""
        return bool(await self._put_table_if(keys=["bd:table"], args=[expected_epoch, json.dumps(table)]))

    async def put_seed(self, seed: dict) -> None:
        """The partition seed the table was last laid out by (bluedove/seeding.py); the split
        planner reads it for where a range's load halves."""
        await self.r.set("bd:seed", json.dumps(seed))

    async def get_seed(self) -> dict | None:
        raw = await self.r.get("bd:seed")
        return json.loads(raw) if raw else None

    async def add_event(self, event: dict, keep: int = 200) -> None:
        """Append to the bounded log of cluster events (takeovers, scaling decisions). Every
        event carries "t", when it happened in Unix seconds (set here unless the writer did)."""
        event = {"t": round(time.time(), 3), **event}
        async with self.r.pipeline(transaction=True) as p:
            p.lpush("bd:events", json.dumps(event))
            p.ltrim("bd:events", 0, keep - 1)
            p.hincrby("bd:events:count", event.get("action", "other"), 1)
            await p.execute()

    async def event_counts(self) -> dict[str, int]:
        """Events per action since the store was created (the log above is bounded; this is not)."""
        return {k: int(v) for k, v in (await self.r.hgetall("bd:events:count")).items()}

    async def put_autoscaler(self, state: dict, ttl_s: int) -> None:
        """The running autoscaler's settings; they expire if it stops refreshing them."""
        await self.r.set("bd:autoscaler", json.dumps(state), ex=ttl_s)

    async def get_autoscaler(self) -> dict | None:
        raw = await self.r.get("bd:autoscaler")
        return json.loads(raw) if raw else None

    async def events(self, limit: int = 50) -> list[dict]:
        """The newest `limit` events, oldest first."""
        return [json.loads(e) for e in reversed(await self.r.lrange("bd:events", 0, limit - 1))]

    async def register_dispatcher(self, disp_id: str, address: str, ttl_s: int = 10, epoch: int = 0,
                                  adopted_at: float | None = None) -> None:
        """A dispatcher's heartbeat: its address, the table epoch it uses and when (Unix time) it
        adopted that table; it expires unless refreshed within `ttl_s`."""
        entry = {"id": disp_id, "address": address, "epoch": epoch, "adopted_at": adopted_at}
        await self.r.set(f"bd:disp:{disp_id}", json.dumps(entry), ex=ttl_s)

    async def dispatchers(self) -> list[dict]:
        keys = [k async for k in self.r.scan_iter("bd:disp:*", count=100)]
        if not keys:
            return []
        vals = await self.r.mget(keys)
        return sorted((json.loads(v) for v in vals if v), key=lambda d: d["id"])


def valid_queue_id(queue: object) -> bool:
    return isinstance(queue, str) and bool(_QUEUE_RE.fullmatch(queue))


def valid_receipt(receipt: object) -> bool:
    return isinstance(receipt, str) and bool(_RECEIPT_RE.fullmatch(receipt))


def first_invalid_receipt(receipts: list) -> int | None:
    """The index of the first item that is not a receipt, or None: one regex over the joined
    list in the usual case (an ack carries up to 1,000), item by item only to find the culprit."""
    if not receipts:
        return None
    if all(type(r) is str for r in receipts):
        joined = ",".join(receipts)
        # as many commas as joins: no item hides one ("1-0,2-0" is not a receipt)
        if joined.count(",") == len(receipts) - 1 and _RECEIPTS_RE.fullmatch(joined):
            return None
    return next((i for i, r in enumerate(receipts) if not valid_receipt(r)), None)


def deliveries_json(raw: list[tuple[str, str, str]]) -> bytes:
    """`{"messages": [...]}` for deliveries [(receipt, message JSON, subscriptions JSON)],
    spliced from the stored JSON texts (each message object gains its subscriptions and
    receipt) without decoding them: what the POLL script does in Redis, for the entries a
    blocking read hands out."""
    parts = []
    for eid, message, subs in raw:
        head = message.rstrip()[:-1].rstrip()  # the object without its closing brace
        sep = "" if head.endswith("{") else ","
        parts.append(f'{head}{sep}"subscriptions":{subs},"receipt":{json.dumps(eid)}}}')
    return ('{"messages":[' + ",".join(parts) + "]}").encode()


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
