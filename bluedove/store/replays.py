"""Replays: a subscription's history delivered from its space's log, exactly once beside live.

A replay's state is one hash in its space's slot (bluedove/store/keys.py `space_replay`): the
queue, the time it replays from, its end and its position in the log (a stream id per shard),
whether it is done, the deliveries it wrote, and the lease of the dispatcher working on it. The
space's set of replays under way lets any dispatcher find one whose worker stopped and go on
from its position once the lease runs out.

The seam between replay and live is kept by replay marks (bluedove/store/replay_scripts.py): a
matcher writes a new replaying subscription's live deliveries through `deliver_seam`, which
sets a mark per (queue, subscription, message); the replay sets the same marks, so whichever
comes second leaves the subscription out.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from bluedove.store import keys as K
from bluedove.store import replay_scripts
from bluedove.store.batch import Arg, Call
from bluedove.store.connection import Connection, StoreLimits

# A live delivery at a replay's seam: (queue, message index, subscriptions json, the replaying
# subscriptions among them).
SeamRow = tuple[str, int, str, list[str]]

# A new replaying subscription's live deliveries carry replay marks for this long after a
# matcher files it; the dispatcher reads the replay's end well within it, or gives up the
# subscribe (bluedove/dispatcher/operations/subscriptions.py).
SEAM_S = 120.0

# A replay mark lasts this long: past the end of any replay a log of its retention needs.
MARK_TTL_S = 86_400


class Replays(Connection):
    """Replay records, their leases and progress, and the deliveries at a replay's seam."""

    def __init__(self, url: str, limits: StoreLimits | None = None) -> None:
        super().__init__(url, limits)
        self._seam = self.r.register_script(replay_scripts.SEAM_DELIVER)
        self._replay = self.r.register_script(replay_scripts.REPLAY_DELIVER)
        self._lease = self.r.register_script(replay_scripts.REPLAY_LEASE)
        self._advance = self.r.register_script(replay_scripts.REPLAY_ADVANCE)

    # -- records ---------------------------------------------------------------------------
    async def start_replay(self, space: str, sub_id: str, queue: str, from_ms: int, end: str, start_ms: int) -> None:
        """Record a replay of what was published from `from_ms` (the log holding what was from
        `start_ms`) up to the log position `end`, under way."""
        key = K.space_replay(space, sub_id)
        await self.r.sadd(K.space_keys(space), key)  # first: a deletion of the space finds it
        async with self.r.pipeline(transaction=True) as p:
            p.hset(key, mapping={"queue": queue, "from": from_ms, "start": start_ms, "end": end, "pos": "", "done": 0,
                                 "delivered": 0, "created": int(time.time() * 1000)})
            p.sadd(K.space_replays(space), sub_id)
            await p.execute()

    async def replay_state(self, space: str, sub_id: str) -> dict[str, str] | None:
        raw = await self.r.hgetall(K.space_replay(space, sub_id))
        return {str(k): str(v) for k, v in raw.items()} if raw else None

    async def replays_under_way(self, space: str) -> list[str]:
        return sorted(str(x) for x in await self.r.smembers(K.space_replays(space)))

    async def take_lease(self, space: str, sub_id: str, owner: str, lease_ms: int) -> int:
        """1: `owner` holds the replay's lease now; 0: another does; -1: no such replay, or done."""
        return int(await self._lease(keys=[K.space_replay(space, sub_id)],
                                     args=[owner, int(time.time() * 1000), lease_ms]))

    async def advance(self, space: str, sub_id: str, owner: str, pos: str, delivered: int, done: bool) -> bool:
        """Record progress, if `owner` still holds the lease."""
        return bool(await self._advance(keys=[K.space_replay(space, sub_id), K.space_replays(space)],
                                        args=[owner, pos, delivered, "1" if done else "0", sub_id]))

    async def forget_replay(self, space: str, sub_id: str) -> None:
        """Drop a replay (its subscription is gone)."""
        async with self.r.pipeline(transaction=True) as p:
            p.delete(K.space_replay(space, sub_id))
            p.srem(K.space_replays(space), sub_id)
            await p.execute()

    # -- deliveries --------------------------------------------------------------------------
    async def deliver_replayed(self, queue: str, sub_id: str,
                               messages: Sequence[tuple[str, bytes]]) -> tuple[int, bool]:
        """Write replayed messages [(id, json)] to one subscription's queue, each once across
        replay and live, in order until the queue is at its cap: (written, stopped at the cap).
        The same messages again after the consumer made room write the rest."""
        if not messages:
            return 0, False
        keys = [K.queue_stream(queue), K.queue_hash(queue), *(K.replay_mark(queue, sub_id, m) for m, _ in messages)]
        args: list[Arg] = [self.limits.max_undelivered, MARK_TTL_S, json.dumps([sub_id])]
        args += [body for _, body in messages]
        written, full = (await self.runner.run([Call(self._replay, keys, args)], wait=True))[0]
        return int(written), bool(full)

    def seam_calls(self, messages: Sequence[tuple[str, str | bytes, int]],
                   rows: Sequence[SeamRow]) -> list[tuple[Call, list[int]]]:
        """The script calls of live deliveries [(queue, message index, subs json, replaying
        subs)] of messages [(id, json, dedup ttl)], one call per slot of their queues, each
        with the message indices its answer's local indices (1-based) stand for."""
        by_slot: dict[int, list[SeamRow]] = {}
        for row in rows:
            by_slot.setdefault(self.runner.slot_of_queue(row[0]), []).append(row)
        return [self._seam_call(messages, group) for group in by_slot.values()]

    def _seam_call(self, messages: Sequence[tuple[str, str | bytes, int]],
                   rows: list[SeamRow]) -> tuple[Call, list[int]]:
        used = sorted({i for _, i, _, _ in rows})
        local = {i: n + 1 for n, i in enumerate(used)}
        args: list[Arg] = [len(used), self.limits.max_undelivered, MARK_TTL_S]
        for i in used:
            args += (messages[i][1], messages[i][2])
        keys: list[str] = []
        for queue, i, subs, replaying in rows:
            mid = messages[i][0]
            keys += [K.queue_stream(queue), K.delivery_mark(queue, mid), K.queue_hash(queue),
                     *(K.replay_mark(queue, s, mid) for s in replaying)]
            args += [local[i], subs, len(replaying), *replaying]
        return Call(self._seam, keys, args), used

