"""The named spaces one matcher serves, beside the default space: each a `SpaceState` of its own
(its table, its sets loaded from its own catalogue, its input queue), made when the registry
lists the space active with its table laid out, and dropped when the space is deleted
(bluedove/store/spaces.py; docs/design.md, "Spaces (in progress)").

The registry's generation (`bd:spaces:gen`) is read every `spaces_refresh_s`; a move, or
every `table_refresh_s` in any case, reads the list of spaces again. A named space's table
changes (bluedove/matcher/space_changes.py) reach its state from their coordinator (`Prepare`
with adopt) or through the store (its watch, `SpaceState._watch_stored_table`); gossip carries
the default space's alone so far.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from bluedove.core.partition.segments import SegmentTable
from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.matcher.errors import NotReady
from bluedove.matcher.named_tails import NamedTails
from bluedove.matcher.space_state import SpaceState
from bluedove.runtime.settings import MatcherSettings
from bluedove.store.spaces import ACTIVE, SpaceRecord, SpaceStore
from bluedove.store.store import MatcherStore

log = logging.getLogger("bluedove.matcher")

FORCED_EVERY_S = 0.2  # the most often calls for one space not served make the registry be read


class Served:
    """One named space served: its state, the record it was made for, and its tasks."""

    def __init__(self, state: SpaceState, rec: SpaceRecord, tasks: list[asyncio.Task[None]]) -> None:
        self.state, self.rec, self.tasks = state, rec, tasks


class ServedSpaces:
    """The named spaces this matcher serves, kept in step with the registry."""

    def __init__(self, spaces: SpaceStore, tables: MatcherStore, make: Callable[[str], SpaceState],
                 s: MatcherSettings) -> None:
        self.spaces = spaces
        self.spaces_tables = tables  # where each space's table is read
        refresh_s, full_s = s.spaces_refresh_s, s.table_refresh_s
        self._make = make  # a SpaceState for a space's name, sharing the process's index thread
        self.refresh_s, self.full_s = refresh_s, full_s
        self.served: dict[str, Served] = {}
        self._generation: int | None = None
        self._listed_at = 0.0
        self._lock = asyncio.Lock()  # one refresh at a time
        self._forced: dict[str, float] = {}  # when a call for a space not served last read the registry
        # Every served space's catalogue tail, in one task (their states run none of their own).
        self.tails = NamedTails(tables, lambda: {n: sv.state.owner for n, sv in self.served.items()},
                                s.spaces_tail_s, s.catalog_linger_ms / 1000, s.catalog_retry_s)

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
        """Follow the registry and the served spaces' catalogue logs, forever."""
        tails = asyncio.get_running_loop().create_task(self.tails.run())
        try:
            await self._follow_registry()
        finally:
            tails.cancel()
            await asyncio.gather(tails, return_exceptions=True)

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
        """Read the registry's generation; when it moved (or `full_s` passed, or `force`), serve
        every active named space not served yet and drop those no longer active."""
        gen = await self.spaces.generation()
        now = time.monotonic()
        if not force and gen == self._generation and now - self._listed_at < self.full_s:
            return
        recs = {r.spec.name: r for r in await self.spaces.list() if r.spec.name != DEFAULT_SPACE}
        for name in [n for n, s in self.served.items() if _gone(recs.get(n), s.rec)]:
            await self._drop(name)
        for name, rec in recs.items():
            if rec.state == ACTIVE and name not in self.served:
                await self._serve(rec)
        self._generation, self._listed_at = gen, now

    async def _serve(self, rec: SpaceRecord) -> None:
        name = rec.spec.name
        raw = await self.spaces_tables.get_table(name)
        if raw is None:
            return  # its table is laid out just after the record: the next refresh finds it
        table = SegmentTable.from_json(raw)
        state = self._make(name)
        state.begin(table)
        try:
            await state.load()
        except BaseException:
            await _stop(state, [])
            raise
        loop = asyncio.get_running_loop()
        self.served[name] = Served(state, rec, [loop.create_task(run()) for run in state.tasks(follow=False)])
        log.info("serving space %r at epoch %d: %s subscriptions per dimension", name, table.epoch,
                 state.started().counts())

    async def _drop(self, name: str) -> None:
        served = self.served.pop(name)
        await _stop(served.state, served.tasks)
        log.info("space %r deleted: no longer served", name)

    async def stop(self) -> None:
        for name in list(self.served):
            await self._drop(name)


def _gone(now: SpaceRecord | None, served: SpaceRecord) -> bool:
    """Whether a served space is no longer the registry's active one (deleted, or made again)."""
    return now is None or now.state != ACTIVE or now.created != served.created


async def _stop(state: SpaceState, tasks: list[asyncio.Task[Any]]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if state.queue is not None:
        await state.queue.stop()
