"""Queues: creation and tokens, long-poll and ack, dead-lettering (bounds, depth and seeking:
bluedove/store/queue_state.py).

A queue is a stream with one consumer group, beside a hash holding its token's digest and its
bounds (bluedove/store/keys.py). Poll and ack are one Lua script each with the token check
inside; deleting a queue removes its subscriptions from the catalogue first, in short steps
each atomic on the catalogue's slot, then its own keys (docs/design.md, "The store on a Redis
Cluster"). A poll that finds its queue empty parks without a connection of its own, woken by
the delivery writes that name its queue (bluedove/store/wakeups.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from bluedove.core.queue_bounds import QueueBounds
from bluedove.runtime.batcher import Batcher
from bluedove.store import keys as K
from bluedove.store import scripts
from bluedove.store.batch import Call
from bluedove.store.client import node_client
from bluedove.store.connection import StoreLimits
from bluedove.store.finite import finite
from bluedove.store.ids import bound_entries, hash_token, new_id, new_token, receipt_tag, valid_queue_id
from bluedove.store.queue_state import GROUP as GROUP  # (the store's other modules import both from here)
from bluedove.store.queue_state import BadToken as BadToken
from bluedove.store.queue_state import QueueState
from bluedove.store.space_entry import LEAVE_ALL
from bluedove.store.waiting import Done, Looked, PollWait, Taken, waited
from bluedove.store.wakeups import Wakeups
from bluedove.store.wire import deliveries_json

log = logging.getLogger("bluedove.store")

# Poll and ack calls in flight at once (each holds a pooled connection for a round trip, so polls
# use this few however many are parked), and the looks and acks one call carries at most.
POLL_CALLS, CALL_MOST = 8, 64
CONSUMER = "c"
# A constant digest to compare against when a queue does not exist, so that a missing queue
# and a wrong token take the same path.
_DUMMY_DIGEST = hashlib.sha256(b"bluedove-no-such-queue").hexdigest()
# What a poll handed out, for its slow path: entry ids joined by "," (the POLL script's).
Handed = str
# Whether a poll's client has gone (the HTTP server's view of its connection).
Gone = Callable[[], bool]


def _strict(body: str) -> bool:
    """Whether `body` encodes as strict UTF-8: the store decodes with surrogateescape
    (bluedove/store/client.py), so bytes that are not UTF-8 arrive as lone surrogates. The
    usual ASCII body is known so without a scan."""
    if body.isascii():
        return True
    try:
        body.encode()
    except UnicodeEncodeError:
        return False
    return True


def _raw(text: str) -> bytes:
    """A stored text as the bytes it was stored as (what was not UTF-8 included)."""
    return text.encode("utf-8", "surrogateescape")


def _messages(body: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = json.loads(body)["messages"]
    return messages


def _unrenderable(entry: tuple[str, str, str], tag: str, readable: bool) -> str | None:
    """Why a stored delivery cannot be rendered, or None: its body alone is checked as a
    poll's whole body is."""
    body = deliveries_json([entry], tag)
    if not _strict(body):
        return "not UTF-8"
    if not finite(body):
        return "NaN or Infinity, not JSON"
    if readable:
        try:
            json.loads(body)
        except (ValueError, RecursionError) as exc:
            return f"not JSON Python reads: {str(exc)[:100]}"
    return None


class Queues(QueueState):
    """Queues as the dispatcher serves them: create, check a token, poll, ack, inspect, delete."""

    def __init__(self, url: str, limits: StoreLimits | None = None) -> None:
        super().__init__(url, limits)
        self._delete_subs = self.r.register_script(scripts.DELETE_QUEUE_SUBSCRIPTIONS)
        self._leave_all = self.r.register_script(LEAVE_ALL)
        self._dead_letter = self.r.register_script(scripts.DEAD_LETTER)
        self._poll = self.r.register_script(scripts.POLL)
        self._ack = self.r.register_script(scripts.ACK)
        self._set_aside = self.r.register_script(scripts.SET_ASIDE)
        # Deliveries this process handed out again after their visibility timeout (the series).
        self.redelivered = 0
        # Told of each answer that hands out new deliveries: (the entry ids handed, joined by ",",
        # how many of them, first, are handed out again): the series' stored -> answered.
        self.on_answered: Callable[[str, int], None] | None = None
        # Deliveries this process set aside because they cannot be rendered (the metrics).
        self.undeliverable = 0
        # Parked polls wait for a wake-up, holding no connection (bluedove/store/wakeups.py); their
        # looks and acks go through one lane: POLL_CALLS calls at most, each up to CALL_MOST.
        self.wakeups = Wakeups(lambda attempt: node_client(url, attempt))
        self._calls: Batcher[Call, Any] = Batcher(self.runner.run_each, CALL_MOST, POLL_CALLS)

    async def close(self) -> None:
        await self.wakeups.close()
        await super().close()

    async def create_queue(self, bounds: QueueBounds | None = None) -> tuple[str, str]:
        """A new queue and its token (shown once; only its hash is kept)."""
        return (await self.create_queues(1, bounds=bounds))[0]

    def default_bounds(self) -> QueueBounds:
        return QueueBounds(self.limits.max_undelivered, self.limits.retention_s)

    async def create_queues(self, n: int, chunk: int = 1000,
                            bounds: QueueBounds | None = None) -> list[tuple[str, str]]:
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
        queue: str | None = await self.r.get(K.token_key(hash_token(token)))
        return queue

    async def delete_queue(self, queue: str, step: int = 500) -> list[str]:
        """Delete a queue, its deliveries and subscriptions; returns the removed subscription ids.

        In steps, each atomic and each short, so that Redis serves every other call (a
        publish's delivery writes) between two: the catalogue's first (`_delete_subscriptions`:
        the queue is marked gone, so no subscription can be added to it any more, then its
        subscriptions are removed and logged, `step` a script call: a few ms of Redis for 500),
        then the queue's own keys (its stream unlinked: freed off Redis's main thread). The
        catalogues of the named spaces it entered go first, each as the default space's: the
        queue is flagged `deleting` as their list is read, so it can enter no other meanwhile
        (bluedove/store/space_entry.py). If a step fails, the queue is left marked gone with
        some of its subscriptions or none, and cannot gain any; deleting it again finishes the
        job. Its dedup marks expire on their own."""
        removed: list[str] = []
        for cat in await self._catalogues_of(queue):
            removed += await self._delete_subscriptions(queue, step, cat)
        digest = await self.r.hget(K.queue_hash(queue), "token")
        async with self.r.pipeline(transaction=False) as p:
            p.delete(K.queue_hash(queue))
            p.delete(K.queue_spaces(queue))
            p.execute_command("UNLINK", K.queue_stream(queue))  # (a cluster pipeline's unlink() is a coroutine)
            p.delete(K.dead_outbox(queue))
            if digest:
                p.delete(K.token_key(digest))
            p.srem(K.QUEUES, queue)
            await p.execute()
        await self.r.publish(K.WAKE, K.queue_stream(queue))  # its parked polls answer now (401)
        return removed

    async def entered_spaces(self, queue: str) -> list[str]:
        """The named spaces queue `queue` has entered (bluedove/store/space_entry.py), by name."""
        return sorted(await self.r.smembers(K.queue_spaces(queue)))

    async def _catalogues_of(self, queue: str) -> list[K.CatalogueKeys]:
        """The catalogues a queue being deleted has subscriptions in: the named spaces it
        entered that still have a record (a purged space's keys are gone already), then the
        default space's. Flags the queue `deleting` in the same step as reading them."""
        names = sorted(await self._leave_all(keys=[K.queue_hash(queue), K.queue_spaces(queue)]))
        async with self.r.pipeline(transaction=False) as p:
            for name in names:
                p.exists(K.space_record(name))
            there = await p.execute() if names else []
        return [*(K.CatalogueKeys(n) for n, e in zip(names, there) if e), K.DEFAULT_CATALOGUE]

    async def _delete_subscriptions(self, queue: str, step: int, cat: K.CatalogueKeys) -> list[str]:
        """The part of `delete_queue` in one catalogue: one DELETE_QUEUE_SUBSCRIPTIONS call marks
        the queue gone there; only then are its subscriptions read (none can join them now),
        and removed `step` a call. Returns the ids these calls removed (one removed meanwhile
        by an unsubscribe is that call's to report)."""
        shard = K.shard_of(queue)
        keys = [cat.queue_subs(queue), cat.queue_gone(queue), cat.subs(shard), cat.log(shard)]
        await self.runner.run([Call(self._delete_subs, keys, [K.GONE_TTL_S, self.limits.catalog_log_maxlen])])
        ids: list[str] = list(dict.fromkeys([x async for x in self.r.sscan_iter(keys[0], count=step)]))
        removed: list[str] = []
        for start in range(0, len(ids), step):
            out = await self.runner.run([Call(self._delete_subs, keys, [K.GONE_TTL_S, self.limits.catalog_log_maxlen,
                                                                         *ids[start:start + step]])])
            removed += out[0]
        return removed

    async def poll(self, queue: str, max_n: int, wait_s: float, stop: asyncio.Event | None = None,
                   token: str | None = None) -> list[dict[str, Any]]:
        """Up to max_n deliveries as the API shows them (`poll_json`'s, decoded), for gRPC's
        Poll and Listen. A delivery that Python's json cannot read (an integer of more digits
        than it takes, say) is set aside as `poll_json` sets aside what is not UTF-8."""
        n, body, handed = await self._take(queue, max_n, wait_s, stop, token)
        if n:
            try:
                if _strict(body) and finite(body):
                    return _messages(body)
            except (ValueError, RecursionError):
                pass
            n, body = await self._deliverable(queue, handed, readable=True)
        return _messages(body)

    async def poll_json(self, queue: str, max_n: int, wait_s: float, stop: asyncio.Event | None = None,
                        token: str | None = None, gone: Gone | None = None) -> tuple[int, str]:
        """(n, the REST body `{"messages": [...]}`) of up to max_n deliveries: expired unacked
        ones first, then new ones, long-polling wait_s when there are none.

        One round trip when something is there (the POLL script, which also checks `token`
        when one is given: BadToken if it does not open the queue); an empty queue is then
        long-polled. A long-poll returns early (possibly empty) once `stop` is set: a
        shutting-down dispatcher answers its waiting pollers instead of holding them. Once
        `gone()` is true (the client left), it ends empty without looking at the queue again,
        so nothing is handed out to nobody.

        A delivery stored before publishing refused what cannot be rendered (its text is not
        UTF-8, or its payload holds NaN or Infinity: not JSON) never breaks a poll: the body is
        checked whole (in C; all but free when it is ASCII without a capital N or I:
        bluedove/store/finite.py), and only when it fails are its deliveries looked at one by
        one, the bad ones set aside (`_deliverable`) and the rest answered."""
        return await self.rendered(queue, await self._take(queue, max_n, wait_s, stop, token, gone))

    async def rendered(self, queue: str, taken: Taken) -> tuple[int, str]:
        """(n, REST body) of a poll's answer, its deliveries that cannot be rendered set aside."""
        n, body, handed = taken
        if n and not (_strict(body) and finite(body)):
            return await self._deliverable(queue, handed, readable=False)
        return n, body

    def start_poll(self, queue: str, max_n: int, wait_s: float, done: Done, stop: asyncio.Event | None = None,
                   token: str | None = None, gone: Gone | None = None) -> PollWait:
        """A poll of up to max_n deliveries, answered to `done` with (n, body, handed) or the
        error that ended it; `poll_json` says what the arguments do. It waits as callbacks, not
        as a coroutine (bluedove/store/waiting.py): call the result's `start`, and its `cancel`
        if no answer is wanted any more."""
        if token is not None and not valid_queue_id(queue):
            raise BadToken(queue)
        args = (GROUP, CONSUMER, int(self.limits.visibility_timeout_s * 1000), max_n,
                "" if token is None else hash_token(token), self.limits.retention_s, receipt_tag(queue))
        return PollWait(partial(self._look, queue, args), self.wakeups, K.queue_stream(queue), wait_s, done,
                        stop, gone)

    async def _take(self, queue: str, max_n: int, wait_s: float, stop: asyncio.Event | None,
                    token: str | None, gone: Gone | None = None) -> Taken:
        """(n, body, the entry ids handed out joined by ",") of a poll, as a coroutine."""
        return await waited(lambda done: self.start_poll(queue, max_n, wait_s, done, stop, token, gone))

    async def _call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """One script call through the polls' lane (pipelined with those queued beside it)."""
        if isinstance(res := await self._calls.submit(Call(script, keys, args)), Exception):
            raise res
        return res

    async def _look(self, queue: str, args: tuple[object, ...]) -> Looked:
        """One look at `queue`: one POLL call, through the polls' lane."""
        res = await self._call(self._poll, [K.queue_stream(queue), K.queue_hash(queue), K.dead_outbox(queue)],
                               list(args))
        if res is None:
            raise BadToken(queue)
        n, body, again, handed, pending, *dead = res
        if dead and int(dead[0]):
            await self._move_or_warn(queue, dead[1])
        self.redelivered += int(again)
        if int(n) > int(again) and self.on_answered is not None:
            self.on_answered(handed, int(again))
        return Looked(int(n), body, handed, bool(int(pending)))

    async def _move_or_warn(self, queue: str, dead_queue: str) -> None:
        try:
            await self.move_dead_letters(queue, dead_queue)
        except Exception as exc:  # noqa: BLE001 - the outbox keeps them for the next poll
            log.warning("dead-letter move from %s to %s failed, retried at its next poll: %r", queue, dead_queue, exc)

    async def _deliverable(self, queue: str, handed: Handed, readable: bool) -> tuple[int, str]:
        """The slow path of a poll whose body cannot be rendered: (n, body) of the deliveries
        it handed out that can be, once the others are set aside (SET_ASIDE: moved to the
        queue's dead-letter queue if it has one, else removed), each counted in
        `undeliverable` and logged. `readable`: Python's json must read them too."""
        entries = await self._entries(queue, handed)
        tag = receipt_tag(queue)
        good, bad = [], []
        for entry in entries:
            why = _unrenderable(entry, tag, readable)
            if why is None:
                good.append(entry)
            else:
                bad.append(entry[0])
                log.warning("queue %s: delivery %s cannot be rendered (%s), set aside: %a",
                            queue, entry[0], why, entry[1][:200])
        if bad:
            key = K.queue_stream(queue)
            removed, moved, dead_queue, outbox = await self._set_aside(
                keys=[key, K.queue_hash(queue), K.dead_outbox(queue)], args=[GROUP, *bad])
            self.undeliverable += int(removed)
            if dead_queue and int(outbox):
                await self._move_or_warn(queue, dead_queue)
        return len(good), deliveries_json(good, tag)

    async def _entries(self, queue: str, handed: str) -> list[tuple[str, str, str]]:
        """The entries of ids `handed` (joined by ","), read again; those gone meanwhile left out."""
        key = K.queue_stream(queue)
        async with self.r.pipeline(transaction=False) as p:
            for eid in handed.split(","):
                p.xrange(key, eid, eid)
            found = await p.execute()
        return [(eid, f["m"], f["s"]) for got in found for eid, f in got if "m" in f and "s" in f]

    async def ack(self, queue: str, receipts: list[str], token: str | None = None) -> int:
        """Remove acked deliveries; returns how many were handed out and not yet acked. With
        `token`, the same call checks it first: BadToken if it does not open the queue. Only
        the receipts bound to this queue ack anything (bluedove/store/ids.py): another queue's,
        or one issued before receipts were bound, acks nothing."""
        if token is None and not receipts:
            return 0
        if token is not None and not valid_queue_id(queue):
            raise BadToken(queue)
        acked = await self._call(self._ack, [K.queue_stream(queue), K.queue_hash(queue)],
                                 [GROUP, "" if token is None else hash_token(token), *bound_entries(queue, receipts)])
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
                          [_raw(f["m"]), _raw(f["s"]), self.limits.dedup_window_s, self.limits.max_undelivered])
                     for _, f in entries]
            moved += sum(1 for x in await self.runner.run(calls, wait=True) if int(x) == 1)
            await self.r.xdel(outbox, *(eid for eid, _ in entries))
            if len(entries) < count:
                break
        return moved
