"""The catalogue tails of every named space a matcher serves, in one task: every `every_s`,
one pipelined read of all their logs without waiting (`catalogue_tails`), each space's entries
applied by its sets' owner (`SetsOwner.apply_tail`).

The default space keeps blocking reads of its own (`SetsOwner.follow`): they cost a held
connection each (one per server, one per shard on a Redis Cluster), so with one per named space
a thousand spaces would hold a thousand connections per matcher, sixteen thousand on a cluster.
Polled, a named space costs none between reads, and one stream read per shard in a round trip
shared by all. What the tail brings late is rare: a dispatcher sends every subscription change
to its matchers directly once the catalogue has it, so the tail carries the changes whose
direct call failed, and the removals of deleted queues. A space that had a direct call in the
last ACTIVE_S is read every `every_s`; the others, idle, a slice of them each round so that
each is read every `idle_every_s` (a thousand idle spaces are sixteen thousand streams: ~26 ms
of a matcher's CPU to ask for, each time).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping

from bluedove.matcher.sets_owner import SetsOwner
from bluedove.store.keys import parse_pos
from bluedove.store.store import MatcherStore

log = logging.getLogger("bluedove.matcher")

COUNT = 1000  # entries per stream per read; a stream with more is read again at once
ACTIVE_S = 10.0  # a space this long after a direct subscription call is read every round


class NamedTails:
    """One task tailing the catalogue logs of the named spaces served (their owners, loaded)."""

    def __init__(self, store: MatcherStore, owners: Callable[[], Mapping[str, SetsOwner]], every_s: float,
                 idle_every_s: float, linger_s: float, retry_s: float) -> None:
        self.store = store
        self.owners = owners
        self.every_s, self.idle_every_s, self.linger_s, self.retry_s = every_s, idle_every_s, linger_s, retry_s
        self._active: dict[str, float] = {}  # space -> when its last direct subscription call came
        self._turn = 0  # where the next slice of idle spaces starts

    def touch(self, name: str, now: float) -> None:
        """A dispatcher sent space `name` a subscription change directly: read it every round a while."""
        self._active[name] = now

    def due(self, names: list[str], now: float) -> list[str]:
        """The spaces to read this round: every active one, and the next slice of the idle ones."""
        self._active = {n: t for n, t in self._active.items() if now - t < ACTIVE_S}
        active = [n for n in names if n in self._active]
        idle = [n for n in names if n not in self._active]
        if not idle:
            return active
        share = max(1, math.ceil(len(idle) * self.every_s / self.idle_every_s))
        start = self._turn % len(idle)
        self._turn = start + share
        return active + (idle[start:start + share] + idle[:max(0, start + share - len(idle))])

    async def run(self) -> None:
        """Read and apply, forever: at once again while a stream had more than one read's worth."""
        while True:
            try:
                more = await self.round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the named spaces' catalogue tail failed; retrying")
                await asyncio.sleep(self.retry_s)
                continue
            if not more:
                await asyncio.sleep(self.every_s)

    async def round(self) -> bool:
        """One read of every served space's log after its position, applied; True when some
        stream returned a full read (more may wait)."""
        every = self.owners()
        owners = {n: every[n] for n in self.due(sorted(every), time.monotonic())}
        if not owners:
            return False
        after = {name: o.log_pos for name, o in owners.items()}
        got = await self.store.catalogue_tails(after, COUNT)
        if not got:
            return False
        # As the blocking tail does: the direct calls of what was just written are in after the
        # linger, so the sets skip those changes unparsed.
        await asyncio.sleep(self.linger_s)
        for name, entries in got.items():
            await owners[name].apply_tail(dict(enumerate(parse_pos(after[name]))), entries)
        return any(len(e) >= COUNT for shards in got.values() for e in shards.values())
