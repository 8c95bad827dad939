"""Replays: a new subscription's history, read from its space's log and delivered off the hot path.

A subscribe with `replay_from` (bluedove/dispatcher/operations/subscriptions.py) files the
subscription with every matcher as any subscribe does, each of which answers only once every
batch it matched without the subscription is stored, and so logged (bluedove/matcher/
space_state.py). The log's end read after that (one stream id per shard) is the replay's end:
every message the subscription was not matched against live is at or before it. Messages at or
before it that were matched against it live were delivered with replay marks (the seam: a
matcher marks a new replaying subscription's deliveries for a while), and the replay sets the
same marks, so each message reaches the subscription once.

The work is a `Replayer`'s, in any dispatcher: it holds the replay's lease (renewed with each
step), reads each shard's chunks after its recorded position up to the end, matches them
against the subscription (bluedove/core/replay_match.py), writes the matches to the queue
marked `"replayed": true`, and records the new position. A dispatcher that stops leaves the
lease to run out; every dispatcher looks for replays under way whose lease is free, so another
goes on from the position. Steps are bounded (STEP_CHUNKS chunks) and paced: after a step
taking t, the replay rests REST_FACTOR × t (a quarter of the dispatcher's time at most: its
event loop serves the publishes and polls too), so live publishing is never starved, and longer
if `replay_rate` bounds the messages it reads a second. A queue at its cap holds its replay
back rather than losing history: the replay stops before the first message the queue has no
room for and tries that chunk again a moment later, its marks skipping what it already wrote.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Any

from bluedove.core.log_chunk import chunk_part
from bluedove.core.model import Subscription
from bluedove.core.replay_match import replay_matches
from bluedove.core.space import Space
from bluedove.store.keys import LOG_SHARDS, join_pos, newer, parse_pos
from bluedove.store.message_log import entry_ms
from bluedove.store.space_entry import SpaceAt
from bluedove.store.store import DispatcherStore

log = logging.getLogger("bluedove.dispatcher")

STEP_CHUNKS = 16  # chunks of one shard read in a step (a chunk is a matched batch: up to ~1,000 messages)
LOOK_S = 5.0  # how often a dispatcher looks for replays under way with no worker
# After a step of t s a replay rests REST_FACTOR × t: it takes at most 1 / (1 + REST_FACTOR) of
# the dispatcher's event loop. With 1 (half), publishing beside a replay ran at ~0.5 of its rate
# on 2 cores; with 3, at ~0.8 (docs/benchmarks.md, "Replay").
REST_FACTOR = 3.0
# A replay whose queue is at its cap waits this long before it tries the chunk again (the
# consumer's acks make room; the marks skip what the chunk already wrote).
FULL_REST_S = 1.0
REPLAYED = b',"replayed":true}'


def replayed_body(body: bytes) -> bytes:
    """A stored body with `"replayed": true` added (the body is a compact JSON object)."""
    return body.rstrip()[:-1] + REPLAYED


class Replayer:
    """The replays this dispatcher works on, and its look for those no one works on."""

    def __init__(self, store: DispatcherStore, spaces: Any, rate: float = 0.0, lease_s: float = 15.0) -> None:
        self.store = store
        self.rate = rate  # most logged messages a replay reads a second (0: unbounded but paced)
        self.lease_ms = int(lease_s * 1000)  # renewed every step; another takes over after this
        self.spaces = spaces  # name -> (Space, SpaceAt) of a space with a log, or None (SpacePaths-like)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
        self.running: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.delivered = 0  # replayed deliveries this dispatcher wrote (the metrics)
        # each replay's subscription as last read (its catalogue JSON, and the filter built of it):
        # read every step, so a deletion or a new filter is seen, and built again only if it changed
        self._subs: dict[tuple[str, str], tuple[dict[str, Any], Subscription]] = {}
        self._look: asyncio.Task[None] | None = None

    def start(self, names: Any) -> None:
        """Look every LOOK_S for replays under way in the spaces `names()` gives."""
        self._look = asyncio.get_running_loop().create_task(self._looking(names))

    async def stop(self) -> None:
        tasks = [t for t in (self._look, *self.running.values()) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def run(self, name: str, space: Space, at: SpaceAt | None, sub_id: str) -> None:
        """Work on a replay here, unless this dispatcher already does."""
        key = (name, sub_id)
        if key in self.running:
            return
        task = asyncio.get_running_loop().create_task(self._run(name, space, at, sub_id))
        self.running[key] = task
        task.add_done_callback(lambda _: (self.running.pop(key, None), self._subs.pop(key, None)))

    async def _looking(self, names: Any) -> None:
        while True:
            await asyncio.sleep(LOOK_S)
            try:
                for name in names():
                    found = await self.spaces(name)
                    if found is None:
                        continue
                    for sub_id in await self.store.replays_under_way(name):
                        self.run(name, found[0], found[1], sub_id)
            except Exception as exc:  # noqa: BLE001 - the store may be briefly away: look again later
                log.warning("could not look for replays under way: %r", exc)

    async def _run(self, name: str, space: Space, at: SpaceAt | None, sub_id: str) -> None:
        try:
            while await self._step(name, space, at, sub_id):
                pass
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the lease runs out and another (or we, later) goes on
            log.warning("replay of %s in space %r stopped: %r", sub_id, name, exc)

    async def _step(self, name: str, space: Space, at: SpaceAt | None, sub_id: str) -> bool:
        """One bounded step of a replay; False when it is done, gone, or another works on it."""
        if await self.store.take_lease(name, sub_id, self.owner, self.lease_ms) != 1:
            return False
        state = await self.store.replay_state(name, sub_id)
        if state is None:
            return False
        queue, from_ms = state["queue"], int(state["from"])
        raw = await self.store.get_subscription(sub_id, queue, at)
        if raw is None:  # unsubscribed (or its queue deleted): nothing more to replay
            await self.store.forget_replay(name, sub_id)
            return False
        sub = self._subscription(name, raw, space)
        end, pos = parse_pos(state["end"]), parse_pos(state["pos"])
        t0 = time.monotonic()
        shard = next((n for n in range(LOG_SHARDS) if newer(end[n], pos[n])), None)
        written = read = 0
        full = False
        if shard is not None:
            chunks = await self.store.read_log(name, shard, pos[shard], end[shard], STEP_CHUNKS)
            for entry_id, fields in chunks:
                n, w, full = await self._deliver(queue, sub, fields, from_ms)
                read, written = read + n, written + w
                if full:  # the queue is at its cap: this chunk again once the consumer made room
                    break
                pos[shard] = entry_id
            if len(chunks) < STEP_CHUNKS and not full:  # the shard holds nothing more up to the end
                pos[shard] = end[shard]
        done = not any(newer(e, p) for p, e in zip(pos, end))
        if not await self.store.advance(name, sub_id, self.owner, join_pos(pos), written, done):
            return False
        self.delivered += written
        if not done:  # paced: a quarter of the time at most, and at most `rate` messages a second
            took = time.monotonic() - t0
            rest = max(min(1.0, REST_FACTOR * took), read / self.rate - took if self.rate else 0.0)
            await asyncio.sleep(max(rest, FULL_REST_S) if full else rest)
        return not done

    def _subscription(self, name: str, raw: dict[str, Any], space: Space) -> Subscription:
        key = (name, str(raw["id"]))
        known = self._subs.get(key)
        if known is None or known[0] != raw:
            known = self._subs[key] = (raw, Subscription.from_json(raw, space))
        return known[1]

    async def _deliver(self, queue: str, sub: Subscription, fields: dict[bytes, bytes],
                       from_ms: int) -> tuple[int, int, bool]:
        """One chunk's matches written to the queue: (messages read, deliveries written, whether
        the queue's cap stopped them before the chunk's end)."""
        part = chunk_part(fields)
        hits = replay_matches(part.points, part.body, sub, from_ms).tolist()
        if not hits:
            return part.n, 0, False
        written, full = await self.store.deliver_replayed(queue, sub.id, [(part.id(i), replayed_body(part.body(i)))
                                                                          for i in hits])
        return part.n, written, full


def position_ms(state: dict[str, str]) -> int | None:
    """How far a replay has come, as a log time: once done, its end; before, the least advanced
    shard's position among those with anything to replay (None before the first step)."""
    if not state.get("pos"):
        return None
    pos, end = parse_pos(state["pos"]), parse_pos(state["end"])
    if state.get("done") == "1":
        return max(entry_ms(e) for e in end)
    left = [p for p, e in zip(pos, end) if newer(e, p)]
    return min(entry_ms(p) for p in left) if left else max(entry_ms(e) for e in end)
