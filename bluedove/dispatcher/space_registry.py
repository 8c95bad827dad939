"""One dispatcher's copy of the registry of spaces (bluedove/store/spaces.py), and the purge of
the spaces deleted.

The copy answers "is there a space of this name?" with no store call: it is reloaded whole
when the store's registry generation moves (read every `refresh_s`) and every `reload_s`
whatever it says (a crash between a change and its bump leaves the generation unmoved). A
name the copy lacks is read from the store once (`lookup`): a space created through another
dispatcher is found at once, not a refresh later; an unknown name costs one HGETALL, as any
other 404 does.

Deleting a space marks it `deleting`; the dispatcher that took the DELETE purges it in the
background, in steps of at most `budget` keys each, and every dispatcher whose copy shows a
space still `deleting` (the one that took it was stopped) purges it as well: a purge step is
safe to repeat and to run twice at once (its docstring says why), so a space is purged as long
as one dispatcher runs.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

from bluedove.store.client import RedisClient
from bluedove.store.spaces import ACTIVE, DELETING, PURGE_BUDGET, SpaceActive, SpaceRecord, SpaceStore

log = logging.getLogger("bluedove.dispatcher")


class SpaceRegistry:
    """Names → records of every space the store registers, and the purges running here."""

    def __init__(self, r: RedisClient, refresh_s: float = 1.0, reload_s: float = 30.0,
                 budget: int = PURGE_BUDGET) -> None:
        self.spaces = SpaceStore(r)
        self.refresh_s = refresh_s
        self.reload_s = reload_s
        self.budget = budget
        self.records: dict[str, SpaceRecord] = {}
        self.gen: int | None = None
        self.loaded_at = float("-inf")  # monotonic time of the last whole reload
        self.purging: dict[str, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None
        self.on_refresh: list[Callable[[], None]] = []  # told after each reload of the copy

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        for task in (self._task, *self.purging.values()):
            if task is not None:
                task.cancel()

    async def _watch(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception as exc:  # noqa: BLE001 - the store may be briefly away: the copy goes stale
                log.warning("could not read the registry of spaces: %r", exc)
            await asyncio.sleep(self.refresh_s)

    async def refresh(self, force: bool = False) -> None:
        """Reload the copy if the generation moved, `reload_s` passed, or `force`; purge what is deleting."""
        gen = await self.spaces.generation()
        now = time.monotonic()
        if not force and gen == self.gen and now - self.loaded_at < self.reload_s:
            return
        old = self.records
        # A record unchanged stays the object it was: the new ones are frozen out of the
        # collector's reach (as the start-up's objects are), where a thousand spaces' records
        # scanned by every full collection cost each publish more (bench spaces).
        self.records = {rec.spec.name: old[rec.spec.name] if old.get(rec.spec.name) == rec else rec
                        for rec in await self.spaces.list()}
        if self.records.keys() - old.keys():
            gc.freeze()
        self.gen, self.loaded_at = gen, now
        for told in self.on_refresh:
            told()
        for name, rec in self.records.items():
            if rec.state == DELETING:
                self.purge_soon(name)

    async def lookup(self, name: str) -> SpaceRecord | None:
        """The record of space `name`, active or deleting; None if there is none. From the copy,
        or the store's own for a name the copy lacks (kept: the copy's next reload agrees)."""
        rec = self.records.get(name)
        if rec is not None:
            return rec
        rec = await self.spaces.get(name)
        if rec is not None and rec.state == ACTIVE:
            self.records[name] = rec
        return rec

    def remember(self, name: str, rec: SpaceRecord | None) -> None:
        """Take the copy's record of `name` as `rec` now (after this dispatcher changed it)."""
        if rec is None:
            self.records.pop(name, None)
        else:
            self.records[name] = rec

    def purge_soon(self, name: str) -> None:
        """Purge space `name` in the background, unless this dispatcher already is."""
        if name not in self.purging:
            self.purging[name] = asyncio.get_running_loop().create_task(self._purge(name))

    async def _purge(self, name: str) -> None:
        removed = 0
        try:
            while True:
                step = await self.spaces.purge_step(name, self.budget)
                removed += step.removed
                if step.done:
                    break
                await asyncio.sleep(0)  # other requests between two steps
            self.records.pop(name, None)
            log.info("space %r purged: %d keys removed here", name, removed)
        except SpaceActive:
            log.info("space %r was made again while it was purged: left to its new self", name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the store away: the next reload that sees it deleting resumes
            log.warning("purging space %r stopped after %d keys: %r", name, removed, exc)
        finally:
            self.purging.pop(name, None)
