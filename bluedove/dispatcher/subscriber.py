"""The subscribe path, batched across the subscribes under way.

A subscribe costs a catalogue write and an AddSubscriptions call to every matcher mPartition
names; both cost far more per call than per subscription. So, as the forwarder's lanes do for
publishes (bluedove/dispatcher/publish/forwarder.py), both go through lanes that batch
(`Batcher`, bluedove/runtime/batcher.py):

- the catalogue writes of concurrent single subscribes go to the store together (each an
  item of weight 1): the writer takes whatever has queued up (up to WRITE_BATCH_MAX) into one
  round trip, each subscription still its own atomic step against its queue's limit, with at
  most WRITE_INFLIGHT round trips under way;
- the matcher calls go through one lane per matcher, whose items are each request's
  subscriptions for that matcher (a run weighing its length): a lane takes whatever has
  queued up for its matcher (up to SEND_BATCH_MAX subscriptions) into one batch, with at most
  SEND_INFLIGHT batches under way, written on one long-lived AddSubscriptionsStream call per
  matcher and acked in order (bluedove/dispatcher/add_stream.py; unary AddSubscriptions to a
  matcher that does not serve it).

While a call to a matcher is under way, a second leaves alongside only once SEND_ALONGSIDE
subscriptions wait (the publish lanes wait for half a call's worth): concurrent single
subscribes sent on any free slot made calls of one or two subscriptions each, and a call
costs a matcher far more than the subscriptions in it (~0.4 ms of gRPC alone): 549 -> 659-713
subscribes/s with 16 clients, matcher CPU per subscription 1.50 -> 1.08-1.17 ms
(docs/benchmarks.md, "Subscribe: single calls and batches"). For the same reason, when a call
ends with fewer than that waiting, the next leaves SEND_HOLD_S later, carrying what came
meanwhile (an idle lane's call still leaves at once): with 16 clients, the matchers' CPU per
subscription -25 % and 10-15 % more subscribes a second. The catalogue writer sends on any
free slot (the `Batcher`'s default; holding its calls too gained nothing).

Each subscribe still answers only once every matcher it went to acked it (read-your-writes),
and failures are handled as for a single call: a matcher that fails or does not answer within
subscribe_timeout_s of the subscription being queued for it is marked down (passed over for
forwarding) and sent it again, with backoff, until it acks, gossip holds it dead or left, the
table no longer names it, or MISSED_RETRY_S passed; only then is it left to the catalogue log.
A mark down does not outlast the next success of the matcher (a Forward's answer clears it),
so answering while a live owner has not filed the subscription would let a message published
afterwards miss it. A matcher whose answer shows a newer table makes us pull it and send to
its owners too.

Unsubscribes go the same way: their catalogue removals through a remover that takes what has
queued up into one round trip, and the removal calls through one lane per matcher, held as the
add lanes are, so that a storm of unsubscribes costs each matcher a few RemoveSubscriptions
calls, not one each.

A replace (PUT /v1/subscriptions/{id}) writes the catalogue in one step (the version it
replaced comes back with its log id), then goes to every matcher mPartition names for either
version, through a ReplaceSubscriptions lane per matcher, and answers, as a subscribe does,
once each has swapped the versions (or is left to the log). A matcher that held the old
version alone drops it; one that holds the new alone files it.

A lane writes the plain subscriptions (one exact box, no replay) of a batch in columns
(`SubscriptionBatch.boxes`: ids, queues and two arrays of bounds) once its matcher's ack said
it reads them: a message per subscription cost ~1 µs to build here and ~1.4 µs to read there.
A matcher's new call starts without them, so an older matcher is sent what it reads.

A batch's `log_id` is left empty: a catalogue position has one stream id per shard
(bluedove/store/keys.py), so one id cannot stand for subscriptions of several queues, and the
matchers do not read it (they follow every shard's log themselves).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from bluedove.core.model import Subscription
from bluedove.dispatcher.add_stream import AddStream
from bluedove.dispatcher.routing import Routing
from bluedove.runtime.batcher import Batcher
from bluedove.runtime.settings import DispatcherSettings
from bluedove.store.space_entry import SpaceAt
from bluedove.store.store import DispatcherStore
from bluedove.v1 import matcher_pb2 as pb

SEND_BATCH_MAX = 1000  # subscriptions per AddSubscriptions call
SEND_INFLIGHT = 4  # AddSubscriptions calls under way per matcher
SEND_HOLD_S = 0.002  # a lane's next call, while a few subscriptions wait, leaves this much later
SEND_ALONGSIDE = 16  # subscriptions waiting before a second call to a matcher leaves alongside
WRITE_BATCH_MAX = 1000  # subscriptions per catalogue round trip
WRITE_INFLIGHT = 4  # catalogue round trips under way
COLUMNS_MIN = 8  # plain subscriptions in a call before they go in columns (a few cost less as messages)
MISSED_RETRY_S = 10.0  # a matcher whose subscribe call failed is sent it again for this long (see `_send_to_owners`)
MISSED_PAUSE_S = 0.05  # first pause before sending again; doubling
MISSED_PAUSE_MAX_S = 0.5
PLACE_MANY_MIN = 16  # subscriptions of one box placed at once: ~40 µs, one by one ~3.3 µs each

# What a lane sends: a subscription of one exact box (columns, or a message of its own for a
# matcher that does not read them), or a message (a filter, a replay, a replace).
Outgoing = Subscription | pb.Subscription


class Subscriber:
    """The catalogue writer and the matcher lanes of one dispatcher."""

    def __init__(self, settings: DispatcherSettings, cluster: Routing, store: DispatcherStore,
                 space: SpaceAt | None = None) -> None:
        self.s, self.cluster, self.store = settings, cluster, store
        self.space = space  # a named space's (its catalogue, and named in every call); None: the default
        self._name = space.name if space is not None else ""
        # a subscription's log id, or the exception the store returned for it
        self._writer: Batcher[dict[str, Any], str | Exception] = Batcher(
            store.add_subscriptions_each if space is None else partial(store.add_subscriptions_each, space=space),
            WRITE_BATCH_MAX, WRITE_INFLIGHT)
        # (replaces?, matcher) -> the lane of its AddSubscriptions (or ReplaceSubscriptions) calls
        self._lanes: dict[tuple[bool, str], Batcher[list[Outgoing], pb.SubscriptionAck]] = {}
        # a removal's log id (None: there was no such subscription), or the store's exception
        self._remover: Batcher[tuple[str, str], str | None | Exception] = Batcher(
            store.remove_subscriptions_each if space is None else partial(store.remove_subscriptions_each, space=space),
            WRITE_BATCH_MAX, WRITE_INFLIGHT)
        self._removal_lanes: dict[str, Batcher[str, None]] = {}
        self._streams: dict[str, AddStream] = {}  # matcher -> its adds' open call

    async def close(self) -> None:
        """End the open calls to the matchers."""
        await asyncio.gather(*(s.close() for s in self._streams.values()))

    async def write(self, sub: Subscription) -> str:
        """Store one subscription (its queue known to exist) with those of the subscribes under
        way; its log id, or the store's exception (QueueMissing, LimitExceeded, ...) raised."""
        out = await self._writer.submit(sub.to_json())
        if isinstance(out, Exception):
            raise out
        return out

    async def remove(self, sub_id: str, queue: str) -> bool:
        """Remove one subscription of `queue` from the catalogue with the unsubscribes under
        way; whether there was one. The store's exception is raised."""
        out = await self._remover.submit((sub_id, queue))
        if isinstance(out, Exception):
            raise out
        return out is not None

    async def send_removal(self, sub_id: str) -> None:
        """Tell every matcher, with the unsubscribes under way, to drop `sub_id`; wait for their
        answers, at most subscribe_timeout_s. Best effort: a matcher that does not answer drops
        it from the catalogue log it follows."""
        table = self.cluster.table
        if table is None:
            return
        futs = [self._removal_lane(m).submit(sub_id) for m in table.members]
        if futs:
            await asyncio.wait(futs, timeout=self.s.subscribe_timeout_s)

    def _placement(self, sub: Subscription) -> set[str]:
        """The matchers mPartition names for any of the subscription's boxes."""
        return set().union(*(self.cluster.placement(lows, highs) for lows, highs in sub.boxes))

    def _removal_lane(self, member: str) -> Batcher[str, None]:
        lane = self._removal_lanes.get(member)
        if lane is None:
            async def call(ids: list[str]) -> list[None]:
                await self.cluster.stub(member).RemoveSubscriptions(pb.RemoveRequest(ids=ids, space=self._name),
                                                                    timeout=self.s.subscribe_timeout_s)
                return [None] * len(ids)

            lane = self._removal_lanes[member] = Batcher(call, SEND_BATCH_MAX, SEND_INFLIGHT, SEND_ALONGSIDE,
                                                         SEND_HOLD_S)
        return lane

    def _lane(self, member: str, replaces: bool = False) -> Batcher[list[Outgoing], pb.SubscriptionAck]:
        """`member`'s lane of adds (or of `replaces`): its items are runs of subscriptions, each
        weighing its length; a call carries the runs that queued up."""
        lane = self._lanes.get((replaces, member))
        if lane is None:
            adds = None if replaces else self._streams.setdefault(
                member, AddStream(lambda: self.cluster.stub(member), self.s.subscribe_timeout_s))

            async def call(runs: list[list[Outgoing]]) -> list[pb.SubscriptionAck]:
                items = [sub for run in runs for sub in run]
                if adds is not None:
                    return [await adds.add(partial(_batch, items, self._name))] * len(runs)
                reply: pb.SubscriptionAck = await self.cluster.stub(member).ReplaceSubscriptions(
                    _batch(items, self._name, False), timeout=self.s.subscribe_timeout_s)
                return [reply] * len(runs)

            lane = self._lanes[(replaces, member)] = Batcher(call, SEND_BATCH_MAX, SEND_INFLIGHT, SEND_ALONGSIDE,
                                                             SEND_HOLD_S)
        return lane

    async def send_replace(self, sub: Subscription, old: Subscription | None, log_id: str) -> None:
        """Send a stored replace (`log_id`: its catalogue log entry) to every matcher mPartition
        names for the old version or the new one (every table member when the old one is
        unknown), as `send` does: each swaps the two in one step; answers once each has (or is
        left to the catalogue log)."""
        if self.cluster.table is None:
            return
        msg = _message(sub)
        msg.log_id = log_id

        def owners() -> dict[str, list[int]]:
            table = self.cluster.table
            was = self._placement(old) if old is not None else set(table.members if table else ())
            return {m: [0] for m in was | self._placement(sub)}

        await self._send_to_owners([msg], owners, replaces=True)

    async def send(self, subs: list[Subscription], replay_from_ms: int = 0) -> set[str]:
        """Send stored subscriptions to every matcher mPartition names for each (read-your-writes).

        During a table change (docs/design.md, "Elasticity") each goes to the owners under both the new and
        the previous table; and a matcher whose answer shows a newer epoch than ours makes us
        pull that table and send to its owners too, before the API answers. A matcher that does
        not answer in time is sent them again (`_send_to_owners`), and is passed over for
        forwarding meanwhile. `replay_from_ms`: the subscriptions replay the space's log from
        then (each matcher writes their first live deliveries with replay marks). Returns the
        matchers that did not take them (left to the catalogue log)."""
        live = [s for s in subs if not s.void]
        if self.cluster.table is None or not live:
            return set()
        msgs: list[Outgoing] = [s if s.filter is None and not replay_from_ms else _message(s) for s in live]
        for m in msgs:
            if isinstance(m, pb.Subscription):
                m.replay_from_ms = replay_from_ms
        return await self._send_to_owners(msgs, self._owners(live))

    def _owners(self, subs: list[Subscription]) -> Callable[[], dict[str, list[int]]]:
        """The placement of `subs` under the table of the moment: matcher -> their indices. Those
        of one box each are placed all at once (`placement_many`) when they are at least
        PLACE_MANY_MIN; the others, and a filter's boxes, one by one."""
        single = [j for j, s in enumerate(subs) if s.filter is None]
        if len(single) < PLACE_MANY_MIN:  # (numpy's calls cost more than placing a few one by one)
            single = []
        else:
            at = np.array(single, dtype=np.intp)
            lows = np.array([subs[j].lows for j in single], dtype=np.float64)
            highs = np.array([subs[j].highs for j in single], dtype=np.float64)
        singly = [j for j, s in enumerate(subs) if s.filter is not None or not single]

        def owners() -> dict[str, list[int]]:
            out: dict[str, list[int]] = {}
            if single:
                out = {m: at[mask].tolist() for m, mask in self.cluster.placement_many(lows, highs).items()}
            for j in singly:
                for m in self._placement(subs[j]):
                    out.setdefault(m, []).append(j)
            return out
        return owners

    async def _send_to_owners(self, msgs: list[Outgoing], owners: Callable[[], dict[str, list[int]]],
                              replaces: bool = False) -> set[str]:
        """`send`'s rounds: each message to the matchers `owners()` names for it (matcher -> the
        messages' indices; asked again in each round, as the table may change), through their
        lanes of adds (or of `replaces`); the matchers that failed or did not answer in time.

        A matcher whose call failed is marked down and sent its part again, with backoff, until
        it acks, gossip holds it dead or left, the table no longer names it, or MISSED_RETRY_S
        passed: a success elsewhere (another subscribe's ack, a Forward's answer) marks it up,
        and a message forwarded to it then must not find the subscription missing."""
        assert self.cluster.table is not None, "the callers return first while there is no table"
        sent: dict[str, set[int]] = {}
        missed: set[str] = set()  # given up: left to the catalogue log
        failing: set[str] = set()  # failed, to be sent again, and not acked since
        deadline = time.monotonic() + MISSED_RETRY_S
        pause, pulls = MISSED_PAUSE_S, 0
        while True:
            # an item per matcher, not per subscription: a :batch of 1,000 made ~2,000 futures
            chunks = [(m, idx[j:j + SEND_BATCH_MAX]) for m, idx in _unsent(owners(), sent).items()
                      for j in range(0, len(idx), SEND_BATCH_MAX)]
            calls = [(m, idx, self._lane(m, replaces).submit([msgs[j] for j in idx], len(idx)))
                     for m, idx in chunks]
            if not calls:  # (a failing matcher the table no longer names is not sent again)
                return missed | failing
            # A subscription waits for a matcher no longer than a call of its own would, however
            # many calls are ahead of it in the lane: after that the call counts as failed.
            futs = [f for _, _, f in calls]
            done, _ = await asyncio.wait(futs, timeout=self.s.subscribe_timeout_s)
            newer, failed = self._sort_acks(calls, done, sent)
            retry = {m for m in failed if not self.cluster.gone(m)} if time.monotonic() < deadline else set()
            missed |= failed - retry
            failing = (failing - {m for m, _, _ in calls}) | retry
            for m in failed - retry:  # left to the catalogue log
                sent[m] = set(range(len(msgs)))
            if newer is not None and pulls < 3:  # a table change while we send: a couple of rounds at most
                pulls += 1
                await self.cluster.pull_table(newer)
            elif retry:
                await asyncio.sleep(pause)
                pause = min(2 * pause, MISSED_PAUSE_MAX_S)
            else:
                return missed | failing

    def _sort_acks(self, calls: list[tuple[str, list[int], asyncio.Future[pb.SubscriptionAck | Exception]]],
                   done: set[asyncio.Future[pb.SubscriptionAck | Exception]], sent: dict[str, set[int]]
                   ) -> tuple[str | None, set[str]]:
        """A round's answers: the matchers are marked up or down, a failed call's messages are
        taken out of `sent` (to go again); the matcher that showed a newer table, and those that failed."""
        assert self.cluster.table is not None
        newer: str | None = None
        failed: set[str] = set()
        for m, idx, f in calls:
            ack = f.result() if f in done and not f.cancelled() and f.exception() is None else None
            if not isinstance(ack, pb.SubscriptionAck):  # no answer in time, or the call's error
                failed.add(m)
                sent[m].difference_update(idx)
            elif ack.epoch > self.cluster.table.epoch:
                newer = m
        for m in {m for m, _, _ in calls} - failed:
            self.cluster.mark_up(m)
        for m in failed:
            self.cluster.mark_down(m)
        return newer, failed


def _unsent(owners: dict[str, list[int]], sent: dict[str, set[int]]) -> dict[str, list[int]]:
    """Each matcher's message indices among those `owners` names for it that it was not sent
    yet (`sent`: matcher -> indices, updated)."""
    runs: dict[str, list[int]] = {}
    for m, idx in owners.items():
        had = sent.setdefault(m, set())
        new = [j for j in idx if j not in had]
        if new:
            had.update(new)
            runs[m] = new
    return runs


def _batch(items: list[Outgoing], space: str, columns: bool) -> pb.SubscriptionBatch:
    """A lane's call: its plain subscriptions in columns when the matcher reads them and they
    are at least COLUMNS_MIN, else each a message, as the others are."""
    plain = [i for i in items if isinstance(i, Subscription)]
    if not columns or len(plain) < COLUMNS_MIN:
        return pb.SubscriptionBatch(subscriptions=[i if isinstance(i, pb.Subscription) else _message(i) for i in items],
                                    space=space)
    boxes = pb.Boxes(ids=[s.id for s in plain], queues=[s.queue for s in plain],
                     lows=np.array([s.lows for s in plain], dtype="<f8").tobytes(),
                     highs=np.array([s.highs for s in plain], dtype="<f8").tobytes()) if plain else None
    return pb.SubscriptionBatch(subscriptions=[i for i in items if isinstance(i, pb.Subscription)], space=space,
                                boxes=boxes)


def _message(sub: Subscription) -> pb.Subscription:
    """A subscription as a matcher takes it: its box, or a filter's predicates (the matcher
    builds the boxes and the check; lows and highs are then their bounds)."""
    predicates = "" if sub.filter is None else json.dumps(sub.to_json()["predicates"], separators=(",", ":"))
    return pb.Subscription(id=sub.id, queue=sub.queue, lows=sub.lows, highs=sub.highs, predicates=predicates)
