"""A space's state in a matcher (bluedove/matcher/space_state.py). Its trim: asleep until a
table change shrinks the space's range here, then run once the hand-off grace is over; a second
shrink during the grace moves it later; an idle space's trim task never runs one. A dropped
state, once closed, is freed by reference counting alone (the matcher freezes long-lived objects
out of the collector's reach)."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
import weakref

from bluedove.core.partition.segments import equal_partition, split
from bluedove.core.space import default_space
from bluedove.matcher.index_thread import IndexThread
from bluedove.matcher.space_state import SpaceState
from bluedove.matcher.spaces_served import _stop
from bluedove.runtime.settings import MatcherSettings

TABLE = equal_partition(default_space(), {"a": "", "b": ""})  # a owns [0, 500) everywhere


def state(grace_s: float) -> tuple[SpaceState, list[float]]:
    s = MatcherSettings(id="a", handoff_grace_s=grace_s, trim_check_s=0.01)
    st = SpaceState("orders", s, None, IndexThread(), "count", lambda _t: None)  # type: ignore[arg-type]
    st.table = TABLE
    st.owner.begin(TABLE)
    trims: list[float] = []

    async def trim(_table) -> None:
        trims.append(time.monotonic())

    st.owner.trim = trim  # type: ignore[method-assign]
    return st, trims


def shrunk(table, at: float):
    """`table` with c joined, cutting a's range at `at` on every dimension."""
    return split(table, "c", "", {i: ("a", at) for i in range(table.space.k)})


def test_a_shrink_is_trimmed_once_the_grace_is_over_and_an_idle_space_never():
    async def run() -> None:
        st, trims = state(grace_s=0.2)
        task = asyncio.get_running_loop().create_task(st.tasks(shared=True)[0]())
        await asyncio.sleep(0.3)
        assert trims == []  # no table change: nothing to trim
        t0 = time.monotonic()
        await st.apply_table(shrunk(TABLE, 250.0))
        await asyncio.sleep(0.1)
        await st.apply_table(dataclasses.replace(shrunk(TABLE, 250.0), epoch=3))  # the grace starts again
        t1 = time.monotonic()
        await asyncio.sleep(0.5)
        task.cancel()
        assert len(trims) == 1 and trims[0] >= t1 + 0.2 > t0 + 0.2, (trims, t0, t1)

    asyncio.run(run())


def test_a_closed_state_is_freed_without_the_collector():
    async def run() -> list[weakref.ref]:
        st, _ = state(grace_s=0.2)
        st.begin(TABLE)
        tasks = [asyncio.get_running_loop().create_task(t()) for t in st.tasks(shared=True)]
        await asyncio.sleep(0.05)
        refs = [weakref.ref(x) for x in (st, st.queue, st.owner, st.owner.sets)]
        await _stop(st, tasks)
        assert not st.ready and st.queue is None and st.owner.sets is None  # a late call: not ready
        return refs

    gc.collect()
    gc.disable()
    try:
        refs = asyncio.run(run())
        assert [r() for r in refs] == [None] * 4
    finally:
        gc.enable()
