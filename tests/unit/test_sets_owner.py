"""matcher/sets_owner.py: every reload builds, replays the catalogue log and swaps — against a
catalogue kept in memory."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np

from bluedove.model import build_subscription
from bluedove.segments import equal_partition, merge_out
from bluedove.settings import MatcherSettings
from bluedove.space import default_space
from bluedove.store.keys import pos_of, pos_with, shard_of
from matcher.sets_owner import SetsOwner

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

    async def catalogue_position(self) -> str:
        return pos_with("0-0", SHARD, self.log[-1][0] if self.log else "0-0")

    async def catalogue_snapshot_raw(self) -> tuple[str, list[str]]:
        return await self.catalogue_position(), list(self.subs.values())

    async def catalogue_changes(self, after: str) -> tuple[str, list[dict]]:
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


async def test_export_gives_rows_and_the_position_they_are_current_to():
    store = Catalogue()
    store.add("s1", 100, 200)
    store.add("s2", 300, 400)
    o = owner(store)
    await o.load_catalogue(TABLE)
    pos, ids, queues, lows, highs = await o.export(0, 250, math.inf)
    assert pos_of(pos, SHARD) == "2-0" and list(ids) == ["s2"] and list(queues) == ["q"] and lows[0][0] == 300


def test_the_decisions_import_no_io():
    code = "import sys, matcher.decisions; print(sorted({'grpc', 'asyncio', 'redis'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
