"""bluedove/core/partition/segments.py: the segment table, mPartition placement and message candidates.

The property at the end is mPartition's invariant (the paper's §III-A): every
candidate matcher of a message holds every subscription the message matches, along the
candidate's dimension.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.core.model import build_subscription
from bluedove.core.partition.segments import SegmentTable, equal_partition, grown, merge_out, shrunk, split
from bluedove.core.space import Dimension, Space, default_space

SPACE = default_space()  # x0..x3 in [0, 1000)
FOUR = {"a": "127.0.0.1:7001", "b": "127.0.0.1:7002", "c": "127.0.0.1:7003", "d": "127.0.0.1:7004"}


@pytest.fixture
def table() -> SegmentTable:
    """Four matchers a..d; every dimension cut at 0, 250, 500, 750."""
    return equal_partition(SPACE, FOUR, epoch=3)


def one_dim(cuts, owners, members=None, lo=0.0, hi=100.0) -> SegmentTable:
    space = Space((Dimension("price", lo, hi),))
    members = members or {o: "" for o in owners}
    return SegmentTable(1, space, members, (tuple(cuts),), (tuple(owners),))


# -- equal_partition -----------------------------------------------------------------------------


def test_equal_partition_cuts_every_dimension_into_equal_segments(table):
    assert table.epoch == 3
    assert table.members == FOUR
    assert table.cuts == ((0.0, 250.0, 500.0, 750.0),) * 4
    assert table.owners == (("a", "b", "c", "d"),) * 4


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_equal_partition_segments_tile_the_range(n):
    members = {f"m{j}": "" for j in range(n)}
    t = equal_partition(SPACE, members)
    for i in range(SPACE.k):
        bounds = [t.segment_bounds(i, j) for j in range(n)]
        assert bounds[0][0] == 0.0 and bounds[-1][1] == 1000.0
        assert all(b[1] == c[0] for b, c in zip(bounds, bounds[1:]))  # contiguous, no gaps
        assert all(hi - lo == pytest.approx(1000.0 / n) for lo, hi in bounds)


def test_equal_partition_copies_the_members_mapping():
    members = dict(FOUR)
    t = equal_partition(SPACE, members)
    members["e"] = "elsewhere"
    assert "e" not in t.members


def test_equal_partition_needs_a_matcher():
    with pytest.raises(ValueError):
        equal_partition(SPACE, {})


# -- owner_at and candidates ---------------------------------------------------------------------


@pytest.mark.parametrize("value, owner", [
    (0.0, "a"),  # the space's min
    (249.999, "a"),
    (250.0, "b"),  # exactly on a cut: the segment that starts there
    (math.nextafter(250.0, 0), "a"),
    (500.0, "c"),
    (749.5, "c"),
    (750.0, "d"),
    (math.nextafter(1000.0, 0), "d"),  # the largest value in the space
])
def test_owner_at(table, value, owner):
    assert table.owner_at(0, value) == owner


def test_owner_at_looks_at_the_asked_dimension():
    t = SegmentTable(
        1, SPACE, {"a": "", "b": ""},
        ((0.0, 500.0), (0.0, 100.0), (0.0,), (0.0, 999.0)),
        (("a", "b"), ("b", "a"), ("b",), ("a", "b")),
    )
    assert [t.owner_at(i, 300.0) for i in range(4)] == ["a", "a", "b", "a"]
    assert [t.owner_at(i, 999.0) for i in range(4)] == ["b", "a", "b", "b"]


def test_candidates_are_one_owner_per_dimension(table):
    assert table.candidates((0.0, 250.0, 600.0, 999.0)) == [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
    assert table.candidates([10, 10, 10, 10]) == [(0, "a"), (1, "a"), (2, "a"), (3, "a")]


# -- overlapping ---------------------------------------------------------------------------------


@pytest.mark.parametrize("low, high, owners", [
    (0, 1000, {"a", "b", "c", "d"}),
    (0, 250, {"a"}),  # ends exactly where b starts: b's segment does not overlap [0, 250)
    (0, math.nextafter(250, 1000), {"a", "b"}),
    (249, 251, {"a", "b"}),
    (250, 500, {"b"}),  # starts exactly on a cut, ends exactly on the next
    (250, 750, {"b", "c"}),
    (100, 200, {"a"}),
    (math.nextafter(750, 0), 751, {"c", "d"}),
    (750, 1000, {"d"}),
    (999, 1000, {"d"}),
    # outside the space
    (-100, 10, {"a"}),
    (-100, 0, set()),  # ends at min
    (990, 5000, {"d"}),
    (1000, 5000, set()),  # starts at max: overlaps nothing
    (2000, 3000, set()),
    # empty ranges
    (300, 300, set()),
    (400, 300, set()),
])
def test_overlapping(table, low, high, owners):
    assert table.overlapping(1, low, high) == owners


def test_overlapping_a_dimension_with_one_segment():
    t = one_dim([0.0], ["a"])
    assert t.overlapping(0, 0, 100) == {"a"}
    assert t.overlapping(0, 99, 100) == {"a"}
    assert t.overlapping(0, 100, 200) == set()


# -- placement (mPartition) ----------------------------------------------------------------------


def test_placement_of_a_wildcard_subscription_is_everyone_along_every_dimension(table):
    s = build_subscription("s", "q", {}, SPACE)
    assert table.placement(s.lows, s.highs) == {m: {0, 1, 2, 3} for m in FOUR}


def test_placement_follows_each_dimensions_overlap(table):
    # x0 in [100, 300): a, b; x1 in [500, 750): c; x2, x3 wildcards: everyone.
    s = build_subscription("s", "q", {"x0": [100, 300], "x1": [500, 750]}, SPACE)
    assert table.placement(s.lows, s.highs) == {
        "a": {0, 2, 3},
        "b": {0, 2, 3},
        "c": {1, 2, 3},
        "d": {2, 3},
    }


def test_a_void_subscription_is_placed_nowhere_along_its_empty_dimension(table):
    s = build_subscription("s", "q", {"x0": [1000, 2000]}, SPACE)
    assert s.void
    # x0 is empty, so no owner along x0; the other dimensions still place it (harmless:
    # the matcher's set refuses an empty box), but nothing is placed along x0.
    assert all(0 not in dims for dims in table.placement(s.lows, s.highs).values())


# -- segments_of ---------------------------------------------------------------------------------


def test_segments_of_gives_each_members_range(table):
    assert table.segments_of("a") == {i: (0.0, 250.0) for i in range(4)}
    assert table.segments_of("d") == {i: (750.0, 1000.0) for i in range(4)}


def test_segments_of_joins_adjacent_segments_and_omits_dimensions_owned_by_others():
    t = SegmentTable(
        2, Space((Dimension("u", 0.0, 10.0), Dimension("v", 0.0, 10.0))), {"a": "", "b": ""},
        ((0.0, 2.0, 5.0), (0.0,)),
        (("a", "b", "b"), ("a",)),
    )
    assert t.segments_of("b") == {0: (2.0, 10.0)}
    assert t.segments_of("a") == {0: (0.0, 2.0), 1: (0.0, 10.0)}
    assert t.segments_of("nobody") == {}


# -- serialisation -------------------------------------------------------------------------------


def test_json_round_trip(table):
    data = json.loads(json.dumps(table.to_json()))  # through real JSON
    assert SegmentTable.from_json(data) == table


def test_json_round_trip_of_uneven_cuts():
    space = Space((Dimension("price", -10.5, 99.25), Dimension("x", 0.0, 1.0)))
    t = SegmentTable(42, space, {"m1": "h1:1", "m2": "h2:2"},
                     ((-10.5, 0.1, 3.0), (0.0, 0.5)), (("m2", "m1", "m1"), ("m1", "m2")))
    data = json.loads(json.dumps(t.to_json()))
    assert data["epoch"] == 42
    assert data["cuts"] == [[-10.5, 0.1, 3.0], [0.0, 0.5]]
    assert SegmentTable.from_json(data) == t


# -- constructor validation ----------------------------------------------------------------------


def test_a_members_segments_must_be_adjacent():
    with pytest.raises(ValueError, match="adjacent"):
        one_dim((0.0, 10.0, 20.0), ("a", "b", "a"), members={"a": "h:1", "b": "h:2"})
    assert (one_dim((0.0, 10.0, 20.0), ("a", "a", "b"), members={"a": "h:1", "b": "h:2"}).segments_of("a")
            == {0: (0.0, 20.0)})


@pytest.mark.parametrize("cuts, owners, members, dim", [
    ([5.0], ["a"], None, "price"),  # does not start at min
    ([0.0, 0.0], ["a", "a"], None, "price"),  # not strictly rising
    ([0.0, 60.0, 40.0], ["a", "a", "a"], None, "price"),
    ([0.0, 100.0], ["a", "a"], None, "price"),  # a cut at max: an empty last segment
    ([0.0, 150.0], ["a", "a"], None, "price"),  # a cut outside the space
    ([0.0, math.nan], ["a", "a"], None, "price"),  # NaN compares false with everything
    ([0.0, math.nan, 50.0], ["a", "a", "a"], None, "price"),
    ([0.0, math.inf], ["a", "a"], None, "price"),
    ([math.nan], ["a"], None, "price"),
    ([], [], {"a": ""}, "price"),  # no segment at all
    ([0.0, 50.0], ["a"], None, "price"),  # one owner per segment
    ([0.0], ["a", "b"], None, "price"),
    ([0.0, 50.0], ["a", "ghost"], {"a": ""}, "price"),  # owners must be members
])
def test_invalid_tables_are_rejected_naming_the_dimension(cuts, owners, members, dim):
    with pytest.raises(ValueError) as exc:
        one_dim(cuts, owners, members)
    assert dim in str(exc.value)


def test_a_table_needs_cuts_and_owners_for_every_dimension():
    with pytest.raises(ValueError):
        SegmentTable(1, SPACE, {"a": ""}, ((0.0,),) * 3, (("a",),) * 3)
    with pytest.raises(ValueError):
        SegmentTable(1, SPACE, {"a": ""}, ((0.0,),) * 4, (("a",),) * 5)


def test_a_member_may_own_nothing():
    t = one_dim([0.0], ["a"], {"a": "", "idle": ""})
    assert t.segments_of("idle") == {}


# -- property: the mPartition invariant ----------------------------------------------------------

GRID = 0.5  # values on a coarse grid, so points and bounds often land exactly on cuts


@st.composite
def tables(draw) -> SegmentTable:
    k = draw(st.integers(1, 3))
    n_members = draw(st.integers(1, 5))
    members = {f"m{j}": f"127.0.0.1:{7000 + j}" for j in range(n_members)}
    dims, cuts, owners = [], [], []
    for i in range(k):
        lo = draw(st.integers(-40, 40)) * GRID
        steps = draw(st.integers(1, 60))
        hi = lo + steps * GRID
        dims.append(Dimension(f"d{i}", lo, hi))
        inner = draw(st.sets(st.integers(1, steps - 1), max_size=6)) if steps > 1 else set()
        c = (lo,) + tuple(lo + s * GRID for s in sorted(inner))
        cuts.append(c)
        # A member owns one contiguous run per dimension: sorted run numbers over a permutation.
        perm = draw(st.permutations(sorted(members)))
        runs = sorted(draw(st.lists(st.integers(0, n_members - 1), min_size=len(c), max_size=len(c))))
        owners.append(tuple(perm[r] for r in runs))
    return SegmentTable(draw(st.integers(1, 10)), Space(tuple(dims)), members, tuple(cuts), tuple(owners))


def grid_value(draw, lo: float, hi: float) -> float:
    """A grid value in [lo, hi) (hi > lo)."""
    steps = max(int(math.ceil((hi - lo) / GRID)), 1)
    return lo + draw(st.integers(0, steps - 1)) * GRID


@st.composite
def table_sub_point(draw):
    """A table, a subscription (raw bounds may stick out of the space) and a point it matches."""
    t = draw(tables())
    predicates = {}
    for d in t.space.dimensions:
        if draw(st.booleans()):
            a = draw(st.integers(int(d.min / GRID) - 10, int(d.max / GRID) + 10)) * GRID
            b = draw(st.integers(int(d.min / GRID) - 10, int(d.max / GRID) + 10)) * GRID
            if a != b:
                predicates[d.name] = [min(a, b), max(a, b)]
    s = build_subscription("s", "q", predicates, t.space)
    point = tuple(grid_value(draw, lo, hi) if lo < hi else lo for lo, hi in zip(s.lows, s.highs))
    return t, s, point


@settings(max_examples=200, deadline=None)
@given(table_sub_point())
def test_every_candidate_of_a_matching_message_holds_the_subscription(case):
    t, s, point = case
    if not s.matches(point):  # a void subscription (or a grid point past its high) matches nothing
        assert s.void or any(not lo <= v < hi for lo, v, hi in zip(s.lows, point, s.highs))
        return
    placement = t.placement(s.lows, s.highs)
    for dim, owner in t.candidates(point):
        assert dim in placement.get(owner, set()), (dim, owner, point, s.lows, s.highs)


@settings(max_examples=150, deadline=None)
@given(tables(), st.data())
def test_overlapping_is_exactly_the_owners_of_segments_meeting_the_range(t, data):
    # Brute force over every segment, for any range, inside the space or not.
    for i, d in enumerate(t.space.dimensions):
        a = data.draw(st.integers(int(d.min / GRID) - 10, int(d.max / GRID) + 10)) * GRID
        b = data.draw(st.integers(int(d.min / GRID) - 10, int(d.max / GRID) + 10)) * GRID
        expected = set()
        for j, owner in enumerate(t.owners[i]):
            seg_lo, seg_hi = t.segment_bounds(i, j)
            if a < b and a < seg_hi and seg_lo < b:
                expected.add(owner)
        assert t.overlapping(i, a, b) == expected, (i, a, b)


@settings(max_examples=100, deadline=None)
@given(tables(), st.data())
def test_owner_at_owns_a_segment_holding_the_value(t, data):
    for i, d in enumerate(t.space.dimensions):
        v = grid_value(data.draw, d.min, d.max)
        owner = t.owner_at(i, v)
        assert any(
            o == owner and lo <= v < hi
            for j, o in enumerate(t.owners[i])
            for lo, hi in [t.segment_bounds(i, j)]
        )


# -- takeover: merge_out -------------------------------------------------------------------

def _table4():
    return equal_partition(default_space(), {f"m{i}": f"a{i}" for i in range(1, 5)})


def test_merge_out_gives_a_dead_members_segment_to_an_adjacent_owner():
    t = _table4()
    new = merge_out(t, {"m2"})
    assert new.epoch == t.epoch + 1 and "m2" not in new.members
    for i in range(4):
        assert new.cuts[i] == (0.0, 500.0, 750.0) and new.owners[i] == ("m1", "m3", "m4")  # left by default
    assert grown(t, new) == {"m1": {i: (0.0, 500.0) for i in range(4)}}


def test_merge_out_prefers_the_lighter_neighbour_and_handles_the_edges():
    t = _table4()
    new = merge_out(t, {"m2"}, weight={"m1": 10, "m3": 1, "m4": 0}.get)
    assert new.owners[0] == ("m1", "m3", "m4") and new.cuts[0] == (0.0, 250.0, 750.0)
    first = merge_out(t, {"m1"})
    assert first.owners[0] == ("m2", "m3", "m4") and first.cuts[0] == (0.0, 500.0, 750.0)
    last = merge_out(t, {"m4"})
    assert last.owners[0] == ("m1", "m2", "m3") and last.cuts[0] == (0.0, 250.0, 500.0)


def test_merge_out_of_adjacent_dead_members_and_every_point_keeps_a_live_owner():
    t = _table4()
    new = merge_out(t, {"m2", "m3"}, weight={"m1": 5, "m4": 1}.get)
    assert new.owners[1] == ("m1", "m4") and new.cuts[1] == (0.0, 250.0)
    for v in range(0, 1000, 7):
        assert new.owner_at(2, v) in {"m1", "m4"}
    with pytest.raises(ValueError):
        merge_out(t, {"m1", "m2", "m3", "m4"})


# -- join: split ---------------------------------------------------------------------------
def test_split_gives_the_new_member_the_upper_part_on_every_dimension():
    t = _table4()
    new = split(t, "m5", "a5", {0: ("m2", 300.0), 1: ("m4", 900.0), 2: ("m1", 100.0), 3: ("m3", 600.0)})
    assert new.epoch == t.epoch + 1 and new.members["m5"] == "a5"
    assert new.segments_of("m5") == {0: (300.0, 500.0), 1: (900.0, 1000.0), 2: (100.0, 250.0), 3: (600.0, 750.0)}
    assert new.segments_of("m2")[0] == (250.0, 300.0) and new.segments_of("m2")[1] == (250.0, 500.0)
    assert grown(t, new) == {"m5": new.segments_of("m5")}
    assert shrunk(t, new) == {"m1", "m2", "m3", "m4"}
    for v in (0.0, 299.9, 300.0, 499.9, 999.9):  # every value still has exactly one owner
        assert new.owner_at(0, v) == ("m5" if 300 <= v < 500 else t.owner_at(0, v))


def test_split_at_an_existing_boundary_of_a_merged_range_and_refusals():
    t = merge_out(_table4(), {"m2"})  # m1 owns [0, 500) as two old segments, merged into one
    new = split(t, "m5", "a5", {i: ("m1", 250.0) for i in range(4)})
    assert new.segments_of("m1")[0] == (0.0, 250.0) and new.segments_of("m5")[0] == (250.0, 500.0)
    with pytest.raises(ValueError):
        split(t, "m5", "a5", {i: ("m1", 500.0) for i in range(4)})  # not inside m1's range
    with pytest.raises(ValueError):
        split(t, "m3", "a3", {i: ("m1", 100.0) for i in range(4)})  # already a member
    with pytest.raises(ValueError):
        split(t, "m5", "a5", {0: ("m1", 100.0)})  # every dimension is needed


def test_a_split_then_a_merge_of_the_new_member_restores_the_ranges():
    t = _table4()
    new = split(t, "m5", "a5", {i: ("m3", 600.0) for i in range(4)})
    back = merge_out(new, {"m5"}, weight={"m3": 0, "m4": 1}.get)
    assert back.cuts == t.cuts and back.owners == t.owners
