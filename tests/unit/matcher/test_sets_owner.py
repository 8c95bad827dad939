"""bluedove/matcher/sets_owner.py: every reload builds, replays the catalogue log and swaps — against a
catalogue kept in memory."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import time

import numpy as np
import pytest

from bluedove.core.model import build_subscription
from bluedove.core.partition.segments import equal_partition, merge_out, split
from bluedove.core.space import default_space
from bluedove.matcher.sets_owner import SetsOwner
from bluedove.runtime.settings import MatcherSettings
from bluedove.store.keys import CATALOG_SHARDS, pos_of, pos_with, shard_of

SPACE = default_space()  # x0..x3 in [0, 1000)
TABLE = equal_partition(SPACE, {"a": "", "b": ""})  # a owns [0, 500) everywhere
SHARD = shard_of("q")  # every subscription here is of queue q: its changes are in one shard's log


def order(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


def at(o: SetsOwner) -> str:
    """Where the owner's sets are in the log of queue q's shard."""
    return pos_of(o.log_pos, SHARD)


class Catalogue:
    """The store's catalogue calls: a hash of subscriptions and one shard's log of changes."""

    def __init__(self) -> None:
        self.subs: dict[str, str] = {}
        self.log: list[tuple[str, dict]] = []

    def add(self, sub_id: str, low: float, high: float) -> None:
        text = json.dumps(build_subscription(sub_id, "q", {"x0": [low, high]}, SPACE).to_json())
        self.subs[sub_id] = text
        self.log.append((f"{len(self.log) + 1}-0", {"op": "add", "id": sub_id, "sub": text}))

    def remove(self, sub_id: str) -> None:
        self.subs.pop(sub_id, None)
        self.log.append((f"{len(self.log) + 1}-0", {"op": "remove", "id": sub_id}))

    async def catalogue_position(self, space: str = "default") -> str:
        assert space == "default"  # the owner reads its own space's catalogue
        return pos_with("0-0", SHARD, self.log[-1][0] if self.log else "0-0")

    async def catalogue_snapshot_raw(self, space: str = "default") -> tuple[str, list[str]]:
        return await self.catalogue_position(space), list(self.subs.values())

    async def catalogue_changes(self, after: str, space: str = "default") -> tuple[str, list[dict]]:
        assert space == "default"
        new = [(p, f) for p, f in self.log if order(p) > order(pos_of(after, SHARD))]
        return (pos_with(after, SHARD, new[-1][0]), [f for _, f in new]) if new else (after, [])


async def run_now(fn, *args):
    return fn(*args)


def owner(store: Catalogue, member: str = "a") -> SetsOwner:
    return SetsOwner(MatcherSettings(id=member), store, run_now)


async def test_a_load_is_the_snapshot_and_the_log_since():
    store = Catalogue()
    store.add("s1", 100, 200)
    store.add("s2", 600, 700)  # b's along x0, ours along the rest
    o = owner(store)
    done = await o.load_catalogue(TABLE)
    assert o.sets.counts() == [1, 2, 2, 2] and at(o) == "2-0" and done.replayed == 0
    store.add("s3", 0, 10)
    await o.load_catalogue(TABLE)
    assert o.sets.counts() == [2, 3, 3, 3] and at(o) == "3-0"


async def test_a_removed_id_stays_removed_across_reloads():
    store = Catalogue()
    store.add("s1", 100, 200)
    o = owner(store)
    await o.load_catalogue(TABLE)
    o.sets.remove("s1")  # a direct remove; the snapshot still lists s1
    await o.load_catalogue(TABLE)
    assert o.sets.counts() == [0, 0, 0, 0]


async def test_a_rebuild_replays_from_the_oldest_position_and_keeps_the_newest():
    store = Catalogue()
    store.add("s1", 100, 200)
    o = owner(store)
    await o.load_catalogue(TABLE)  # current to 1-0
    store.add("s2", 150, 250)
    store.remove("s1")
    bigger = merge_out(TABLE, {"b"})

    def fill(new, old):  # rows said to be current to 2-0, but copied from sets current to 1-0
        new.add_rows(["s1"], ["q"], np.array([[100.0, 0, 0, 0]]), np.array([[200.0, 1000, 1000, 1000]]))

    done = await o.rebuild(bigger, fill, [pos_with("0-0", SHARD, "2-0")], uses_old=True)
    assert done.replayed == 2 and at(o) == "3-0"
    assert sorted(o.sets.sets[0].ids()) == ["s2"]
    done = await o.rebuild(bigger, fill, [pos_with("0-0", SHARD, "2-0")])  # rows of their own: from 2-0 only
    assert done.replayed == 1 and at(o) == "3-0"


class Unread(Catalogue):
    """A catalogue whose snapshot must not be read (a trim works from the sets in memory)."""

    async def catalogue_snapshot_raw(self) -> tuple[str, list[str]]:
        raise AssertionError("the trim read the catalogue")


async def test_a_trim_keeps_the_rows_of_the_narrower_range_without_reading_the_catalogue():
    store = Unread()
    o = owner(store)
    o.begin(TABLE)
    o.sets.add_rows(["s1", "s2", "s3"], ["q"] * 3, np.array([[100.0, 0, 0, 0], [300, 0, 0, 0], [0, 600, 0, 0]]),
                    np.array([[200.0, 1000, 1000, 1000], [400, 1000, 1000, 1000], [1000, 700, 1000, 1000]]))
    store.add("s4", 120, 130)  # in the log after the rows: replayed onto the trimmed sets
    assert o.sets.counts() == [3, 2, 3, 3]  # (s3 spans all of x0, and misses a's x1)
    o.sets.remove("s2")  # removed before the trim: stays removed
    # c joins: a keeps [0, 250) of x0, and its ranges of x1..x3 (c cuts b's there)
    narrower = split(TABLE, "c", "", {0: ("a", 250.0), 1: ("b", 750.0), 2: ("b", 750.0), 3: ("b", 750.0)})
    before = [o.sets.sets[i] for i in range(4)]
    done = await o.trim(narrower)
    assert sorted(o.sets.sets[0].ids()) == ["s1", "s3", "s4"] and done.replayed == 1
    assert [o.sets.sets[i] is before[i] for i in range(4)] == [False, True, True, True]  # kept as they were
    assert o.sets.segments[0] == (0.0, 250.0)


async def test_a_trim_to_a_range_the_sets_do_not_hold_is_a_reload():
    store = Catalogue()
    store.add("s1", 100, 200)
    o = owner(store)
    await o.load_catalogue(TABLE)
    wider = merge_out(TABLE, {"b"})  # a now owns everything: not a narrowing
    await o.trim(wider)
    assert o.sets.segments[0] == (0.0, 1000.0) and sorted(o.sets.sets[0].ids()) == ["s1"]


async def test_export_gives_rows_and_the_position_they_are_current_to():
    store = Catalogue()
    store.add("s1", 100, 200)
    store.add("s2", 300, 400)
    o = owner(store)
    await o.load_catalogue(TABLE)
    pos, ids, queues, lows, highs, filters = await o.export(0, 250, math.inf)
    assert pos_of(pos, SHARD) == "2-0" and list(ids) == ["s2"] and list(queues) == ["q"] and lows[0][0] == 300
    assert filters == {}  # no row is a filter's box


# -- the tail ----------------------------------------------------------------------------------
def queue_in_shard(shard: int) -> str:
    return next(q for q in (f"q{i}" for i in range(10_000)) if shard_of(q) == shard)


class Logs:
    """The store's catalogue tail calls over every shard's log, in memory: read in groups of
    shards as the store says (all at once, or one each as on a cluster), counting what each
    read handed out."""

    def __init__(self, one_read: bool) -> None:
        self.logs: dict[int, list[tuple[str, dict]]] = {}
        self.one_read = one_read
        self.handed: list[str] = []  # every (shard, entry id) handed out, in order
        self.reads = 0
        self.changed = asyncio.Event()

    def write(self, queue: str, f: dict) -> None:
        log = self.logs.setdefault(shard_of(queue), [])
        log.append((f"{len(log) + 1}-0", f))
        self.changed.set()

    def add(self, sub_id: str, queue: str, low: float, high: float) -> dict:
        sub = build_subscription(sub_id, queue, {"x0": [low, high]}, SPACE)
        self.write(queue, {"op": "add", "id": sub_id, "sub": json.dumps(sub.to_json())})
        return sub

    def catalogue_read_groups(self) -> list[list[int]]:
        shards = list(range(CATALOG_SHARDS))
        return [shards] if self.one_read else [[s] for s in shards]

    async def catalogue_tail_many(self, after: dict[int, str], block_ms: int | None = None,
                                  space: str = "default") -> dict:
        assert space == "default"
        while True:
            out = {s: [(i, f) for i, f in self.logs.get(s, []) if order(i) > order(a)] for s, a in after.items()}
            out = {s: e for s, e in out.items() if e}
            if out or block_ms is None:
                self.reads += 1
                self.handed += [f"{s}:{i}" for s, e in out.items() for i, _ in e]
                return out
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), block_ms / 1000)
            except asyncio.TimeoutError:
                return {}


async def tail_until(o: SetsOwner, logs: Logs, timeout: float = 10.0) -> None:
    """Run the owner's tail until its position is at the end of every log."""
    want = {s: e[-1][0] for s, e in logs.logs.items()}
    task = asyncio.create_task(o.follow())
    try:
        deadline = time.monotonic() + timeout
        while any(pos_of(o.log_pos, s) != i for s, i in want.items()):
            assert time.monotonic() < deadline, f"the tail stopped at {o.log_pos}, short of {want}"
            await asyncio.sleep(0.01)
    finally:
        task.cancel()


@pytest.mark.parametrize("one_read", [True, False], ids=["one-server", "cluster"])
async def test_the_tail_picks_up_every_shard_once_in_batches(one_read):
    """Subscriptions written to the catalogue alone (their direct calls failed), over several
    shards, written while the tail waits: every one is filed, each log entry is read once, and
    a read takes all the shards of its group."""
    logs = Logs(one_read)
    o = SetsOwner(MatcherSettings(id="a", catalog_block_ms=200, catalog_linger_ms=20), logs, run_now)
    o.begin(TABLE)
    subs = [logs.add(f"s{j}", queue_in_shard(j % 5), 10 * j, 10 * j + 5) for j in range(40)]
    await tail_until(o, logs)
    assert sorted(o.sets.sets[1].ids()) == sorted(s.id for s in subs)  # every one overlaps a's [0, 500) on x1
    assert len(logs.handed) == len(set(logs.handed)) == 40  # nothing read twice
    if one_read:
        assert logs.reads <= 2  # all five shards in one read (and the one that waited on nothing)


async def test_the_tail_skips_unparsed_what_a_direct_call_filed_and_keeps_removals():
    """A direct call's subscription is not parsed again from the log (its entry here would not
    parse), a removed id stays removed, and an add then a remove in one read leave nothing."""
    logs = Logs(True)
    o = SetsOwner(MatcherSettings(id="a", catalog_block_ms=200, catalog_linger_ms=0), logs, run_now)
    o.begin(TABLE)
    q = queue_in_shard(3)
    o.sets.add_direct(["d1"], [q], np.array([[100.0, 0, 0, 0]]), np.array([[200.0, 1000, 1000, 1000]]))
    logs.write(q, {"op": "add", "id": "d1", "sub": "not json: parsing it fails"})
    o.sets.remove("gone")
    logs.write(q, {"op": "add", "id": "gone", "sub": "not json either"})
    logs.add("s1", q, 0, 10)
    logs.write(q, {"op": "remove", "id": "s1"})
    logs.add("s2", q, 0, 10)
    await tail_until(o, logs)
    assert sorted(o.sets.sets[1].ids()) == ["d1", "s2"]


def test_the_decisions_import_no_io():
    code = "import sys, bluedove.matcher.decisions; print(sorted({'grpc', 'asyncio', 'redis'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
