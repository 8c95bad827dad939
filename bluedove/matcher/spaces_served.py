"""The named spaces one matcher serves, beside the default space: each a `SpaceState` of its own
(its table, its sets loaded from its own catalogue, its input queue), made when the registry
lists the space active with its table laid out, and dropped when the space is deleted
(bluedove/store/spaces.py; docs/design.md, "Spaces (in progress)").

The registry's generation (`bd:spaces:gen`) is read every `spaces_refresh_s`; a move, or
every RELIST_S in any case, reads the list of spaces again. A named space's table
changes (bluedove/matcher/space_changes.py) reach its state from their coordinator (`Prepare`
with adopt) or through the store; gossip carries the default space's alone so far.

What each served space would otherwise run for itself runs once for all of them here, so an
idle space costs a matcher no task awake and no store call of its own: one read of every
served space's catalogue log every `spaces_tail_s` (bluedove/matcher/named_tails.py) and one
of every served space's table every TABLES_EVERY_S, each one pipelined round trip.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from bluedove.core.partition.segments import SegmentTable
from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.matcher.errors import NotReady
from bluedove.matcher.named_tails import NamedTails
from bluedove.matcher.queues import LogTarget
from bluedove.matcher.space_state import SpaceState
from bluedove.runtime.settings import MatcherSettings
from bluedove.store.keys import log_shard
from bluedove.store.spaces import ACTIVE, SpaceRecord, SpaceStore
from bluedove.store.store import MatcherStore

log = logging.getLogger("bluedove.matcher")

FORCED_EVERY_S = 0.2  # the most often calls for one space not served make the registry be read
# The whole registry is read this often even if its generation did not move (a crash between a
# change and the bump leaves it unmoved), as the dispatchers' copies do.
RELIST_S = 30.0
# Every served space's stored table is read this often: a change reaches its owners from its
# coordinator (`Prepare`) at once, so this is for an owner that was unreachable then. A thousand
# tables read cost a matcher ~50 ms.
TABLES_EVERY_S = 15.0


class Served:
    """One named space served: its state, the record it was made for, its tasks, and the matchers
    it spans (its spec's `matchers`, else those its first table was laid out over)."""

    def __init__(self, state: SpaceState, rec: SpaceRecord, tasks: list[asyncio.Task[None]], spans: int) -> None:
        self.state, self.rec, self.tasks, self.spans = state, rec, tasks, spans


class ServedSpaces:
    """The named spaces this matcher serves, kept in step with the registry."""

    def __init__(self, spaces: SpaceStore, tables: MatcherStore, make: Callable[[str], SpaceState],
                 s: MatcherSettings) -> None:
        self.spaces = spaces
        self.spaces_tables = tables  # where each space's table is read
        self.relist_s = RELIST_S
        self._make = make  # a SpaceState for a space's name, sharing the process's index thread
        self.refresh_s = s.spaces_refresh_s
        self.served: dict[str, Served] = {}
        self._reads: set[asyncio.Task[None]] = set()  # tables read on the gossip's word (`heard`)
        self._generation: int | None = None
        self._listed_at = 0.0
        self._lock = asyncio.Lock()  # one refresh at a time
        self._forced: dict[str, float] = {}  # when a call for a space not served last read the registry
        # Every served space's catalogue tail, in one task (their states run none of their own).
        self.tails = NamedTails(tables, lambda: {n: sv.state.owner for n, sv in self.served.items()},
                                s.spaces_tail_s, s.spaces_idle_tail_s, s.catalog_linger_ms / 1000,
                                s.catalog_retry_s)

    async def state(self, name: str) -> SpaceState:
        """The state of named space `name`. A space not served yet is looked for in the registry
        at once (a call for it comes from a dispatcher that knows it: one just made is served
        from its first message, not a refresh later), at most once per FORCED_EVERY_S a name; still
        none: NotReady (UNAVAILABLE: the dispatcher tries another candidate, or answers 503)."""
        served = self.served.get(name)
        if served is None:
            async with self._lock:
                now = time.monotonic()
                if name not in self.served and now - self._forced.get(name, 0.0) >= FORCED_EVERY_S:
                    if len(self._forced) >= 1000:
                        self._forced.clear()
                    self._forced[name] = now
                    await self.refresh(force=True)
            served = self.served.get(name)
        if served is None:
            raise NotReady(f"space {name!r} is not served here (yet)")
        return served.state

    async def run(self) -> None:
        """Follow the registry, and the served spaces' catalogue logs and tables, forever."""
        loop = asyncio.get_running_loop()
        shared = [loop.create_task(self.tails.run()), loop.create_task(self._watch_tables())]
        try:
            await self._follow_registry()
        finally:
            for t in shared:
                t.cancel()
            await asyncio.gather(*shared, return_exceptions=True)

    async def _watch_tables(self) -> None:
        """Every served space's stored table, read every TABLES_EVERY_S: a newer one is adopted (its
        owners adopted it from the change's coordinator already unless they were unreachable).
        Only a text that changed since the last read is parsed (a thousand tables parsed each
        time cost a matcher ~2 % of a core)."""
        seen: dict[str, str] = {}
        while True:
            await asyncio.sleep(TABLES_EVERY_S)
            try:
                served = dict(self.served)
                raws = await self.spaces_tables.get_tables_raw(list(served))
                seen = {n: raw for n, raw in seen.items() if n in served}
                for (name, sv), raw in zip(served.items(), raws):
                    if raw is None or seen.get(name) == raw or self.served.get(name) is not sv:
                        continue  # unchanged, or dropped meanwhile
                    await sv.state.stored_table(json.loads(raw))
                    seen[name] = raw
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reading the named spaces' tables failed; retrying")

    def heard(self, rises: dict[str, int]) -> None:
        """Named spaces' epochs the gossip brought (bluedove/gossip/space_epochs.py): a served
        space whose table is older reads its table from the store now, not at the next
        TABLES_EVERY_S read (an owner the change's coordinator could not reach)."""
        stale = [n for n, e in rises.items() if n in self.served and _older(self.served[n].state.table, e)]
        if stale:
            task = asyncio.get_running_loop().create_task(self._read_tables(stale))
            self._reads.add(task)
            task.add_done_callback(self._reads.discard)

    async def _read_tables(self, names: list[str]) -> None:
        try:
            for name, raw in zip(names, await self.spaces_tables.get_tables_raw(names)):
                sv = self.served.get(name)
                if raw is not None and sv is not None:
                    await sv.state.stored_table(json.loads(raw))
        except Exception as exc:  # noqa: BLE001 - the periodic read adopts it later
            log.warning("reading the tables of %s failed: %r", ", ".join(names), exc)

    async def _follow_registry(self) -> None:
        while True:
            try:
                async with self._lock:
                    await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reading the registry of spaces failed; retrying")
            await asyncio.sleep(self.refresh_s)

    async def refresh(self, force: bool = False) -> None:
        """Read the registry's generation; when it moved (or `relist_s` passed, or `force`), serve
        every active named space not served yet and drop those no longer active."""
        gen = await self.spaces.generation()
        now = time.monotonic()
        if not force and gen == self._generation and now - self._listed_at < self.relist_s:
            return
        recs = {r.spec.name: r for r in await self.spaces.list() if r.spec.name != DEFAULT_SPACE}
        for name in [n for n, s in self.served.items() if _gone(recs.get(n), s.rec)]:
            await self._drop(name)
        for name, sv in self.served.items():  # the size the autoscaler gave a space, if it grew
            sv.rec = recs[name]
            sv.spans = sv.rec.spec.matchers or sv.rec.spans or sv.spans
        fresh = [n for n, rec in recs.items() if rec.state == ACTIVE and n not in self.served]
        for name in fresh:
            await self._serve(recs[name])
        if fresh:
            # The new states out of the collector's reach, as the matcher's start-up objects are:
            # with a thousand spaces' states scanned by each full collection, a publish cost the
            # matchers ~15 % more CPU (bench spaces). A dropped state breaks its own cycles
            # (`SpaceState.close`), so refcounting frees it, frozen or not.
            gc.freeze()
        self._generation, self._listed_at = gen, now

    async def _serve(self, rec: SpaceRecord) -> None:
        name = rec.spec.name
        raw = await self.spaces_tables.get_table(name)
        if raw is None:
            return  # its table is laid out just after the record: the next refresh finds it
        table = SegmentTable.from_json(raw)
        state = self._make(name)
        queue = state.begin(table)
        if rec.spec.retention_s:  # its batches go to its log too (bluedove/store/message_log.py)
            queue.log = LogTarget(name, log_shard(state.s.id), rec.spec.retention_s)
        try:
            await state.load()
        except BaseException:
            await _stop(state, [])
            raise
        loop = asyncio.get_running_loop()
        spans = rec.spec.matchers or rec.spans or len(table.members)  # (a record read before its lay-out: 0)
        self.served[name] = Served(state, rec, [loop.create_task(run()) for run in state.tasks(shared=True)], spans)
        log.info("serving space %r at epoch %d: %s subscriptions per dimension", name, table.epoch,
                 state.started().counts())

    async def _drop(self, name: str) -> None:
        served = self.served.pop(name)
        await _stop(served.state, served.tasks)
        log.info("space %r deleted: no longer served", name)

    async def stop(self) -> None:
        for name in list(self.served):
            await self._drop(name)


def _older(table: SegmentTable | None, epoch: int) -> bool:
    return table is None or table.epoch < epoch


def _gone(now: SpaceRecord | None, served: SpaceRecord) -> bool:
    """Whether a served space is no longer the registry's active one (deleted, or made again)."""
    return now is None or now.state != ACTIVE or now.created != served.created


async def _stop(state: SpaceState, tasks: list[asyncio.Task[Any]]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if state.queue is not None:
        await state.queue.stop()
    state.close()
