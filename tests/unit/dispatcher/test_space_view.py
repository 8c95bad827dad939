"""bluedove/dispatcher/space_view.py: a named space's table as a dispatcher routes by it. A newer
table read from the store replaces it (the one it replaces still counts for placement through
the hand-off grace); a stale one is read again in the background, at most once per period; its
candidates are the table's, usable ones first."""

from __future__ import annotations

import asyncio

import numpy as np

from bluedove.core.partition.segments import equal_partition
from bluedove.core.spaces import parse_space_spec
from bluedove.dispatcher.space_view import SpaceView
from bluedove.dispatcher.view import ClusterView
from bluedove.runtime.settings import DispatcherSettings

SPACE = parse_space_spec({"name": "fleet", "attributes": [{"name": "lat", "min": -90, "max": 90},
                                                          {"name": "lon", "min": -180, "max": 180}]}).space
MEMBERS = {"m1": "127.0.0.1:1", "m2": "127.0.0.1:2"}


class Source:
    """The store's table of the space, as `get_table` answers it; counts the reads."""

    def __init__(self, table: dict) -> None:
        self.table, self.reads = table, 0

    async def get_table(self, space: str = "default") -> dict:
        assert space == "fleet"
        self.reads += 1
        return self.table


def view(source: Source) -> SpaceView:
    return SpaceView("fleet", ClusterView(DispatcherSettings(id="d1"), store=None), source,
                     equal_partition(SPACE, MEMBERS, epoch=1))


def test_a_newer_stored_table_is_read_in_the_background_once_per_period():
    newer = equal_partition(SPACE, {"m2": "127.0.0.1:2", "m1": "127.0.0.1:1"}, epoch=2)
    source = Source(newer.to_json())

    async def run() -> SpaceView:
        v = view(source)
        v.refresh_soon(every_s=60)  # read just now: nothing
        await asyncio.sleep(0)
        assert source.reads == 0 and v.current().epoch == 1
        v.refresh_soon(every_s=0)
        v.refresh_soon(every_s=0)  # one read under way: not a second
        await asyncio.sleep(0.01)
        return v

    v = asyncio.run(run())
    assert source.reads == 1 and v.current().epoch == 2 and v.previous is not None
    # during the hand-off grace, a subscription goes to the owners under both tables
    assert v.placement((-90.0, -180.0), (-80.0, -170.0)) == {"m1", "m2"}
    # and so do many at once, each as it alone would
    rng = np.random.default_rng(3)
    lows = np.column_stack([rng.uniform(-90, 80, 40), rng.uniform(-180, 170, 40)])
    highs = lows + np.column_stack([rng.uniform(0.1, 10, 40), rng.uniform(0.1, 10, 40)])
    many = v.placement_many(lows, highs)
    assert [{m for m, mask in many.items() if mask[r]} for r in range(40)] == \
        [v.placement(tuple(lows[r]), tuple(highs[r])) for r in range(40)]
    v.previous = (v.previous[0], 0.0)  # the grace is over: the current table alone
    assert v.placement((-90.0, -180.0), (-80.0, -170.0)) == {"m2"} and v.previous is None


def test_an_older_table_changes_nothing():
    v = view(Source({}))
    v.set_table(equal_partition(SPACE, MEMBERS, epoch=1))
    assert v.previous is None


def test_candidates_are_the_spaces_own_with_none_usable_yet():
    v = view(Source({}))
    points = np.array([[-80.0, 170.0], [80.0, -170.0]])
    ranking = v.rank_batch(points, 0.0)
    for i, p in enumerate(points.tolist()):
        got = {(int(ranking.cand_d[i, j]), ranking.members[ranking.cand_m[i, j]]) for j in range(ranking.count[i])}
        assert got == set(v.current().candidates(p))
