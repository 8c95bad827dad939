"""bluedove/core/partition/seeds.py: a seed checked against a space and a member count, the table it gives
(boundaries → cuts, placement → owners per dimension), a re-seed of a running table, and where
the seed's histogram halves a range."""

from __future__ import annotations

import copy
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bluedove.core.partition.bootstrap import BootError, initial_table
from bluedove.core.partition.seeds import SeedError, parse_seed, reseeded, seed_split_point, seeded_table
from bluedove.core.partition.segments import SegmentTable, equal_partition
from bluedove.core.space import Dimension, Space

SPACE = Space((Dimension("x0", 0.0, 1000.0), Dimension("x1", -1.0, 1.0)))
MEMBERS = {"m1": "a:1", "m2": "b:2", "m3": "c:3"}


def seed_v1(**over) -> dict:
    s = {
        "version": 1, "created": "2026-11-24T02:00:00Z", "matchers": 3, "space": SPACE.to_json(),
        "dimensions": {
            "x1": {"boundaries": [-1, -0.5, 0.25, 1]},
            "x0": {"boundaries": [0, 100, 700, 1000],
                   "histogram": {"edges": [0, 250, 500, 750, 1000], "load": [0, 3, 1, 0],
                                 "messages": [0, 3, 1, 0], "subscriptions": [1, 1, 1, 1]}},
        },
        "placement": [{"matcher": 0, "segments": {"x0": 2, "x1": 0}},
                      {"matcher": 1, "segments": {"x0": 0, "x1": 2}},
                      {"matcher": 2, "segments": {"x0": 1, "x1": 1}}],
    }
    s.update(over)
    return s


def test_boundaries_become_cuts_and_placement_owners_per_dimension():
    t = seeded_table(SPACE, MEMBERS, seed_v1())
    assert t.epoch == 1 and t.members == MEMBERS
    assert t.cuts == ((0.0, 100.0, 700.0), (-1.0, -0.5, 0.25))
    # m1 owns index 2 on x0 and index 0 on x1: a different permutation per dimension.
    assert t.owners == (("m2", "m3", "m1"), ("m1", "m3", "m2"))
    assert t.segments_of("m1") == {0: (700.0, 1000.0), 1: (-1.0, -0.5)}
    assert t.candidates((50.0, 0.9)) == [(0, "m2"), (1, "m2")]


def test_the_placement_may_be_listed_in_any_order_of_matchers():
    s = seed_v1()
    s["placement"].reverse()
    assert seeded_table(SPACE, MEMBERS, s) == seeded_table(SPACE, MEMBERS, seed_v1())


def test_initial_table_uses_the_seed_and_wraps_its_errors_as_boot_errors():
    assert initial_table(SPACE, MEMBERS, seed_v1()) == seeded_table(SPACE, MEMBERS, seed_v1())
    with pytest.raises(BootError, match=r"seed.matchers: 3 matchers, but the cluster has 2"):
        initial_table(SPACE, {"m1": "", "m2": ""}, seed_v1())


def test_the_old_cuts_form_is_the_identity_placement():
    t = seeded_table(SPACE, {"m1": "", "m2": ""}, {"cuts": [[100], [0.5]]})
    assert t.owners == (("m1", "m2"), ("m1", "m2")) and t.cuts == ((0.0, 100.0), (-1.0, 0.5))


def test_reseeded_is_the_next_epoch_with_the_same_members_in_order():
    old = equal_partition(SPACE, MEMBERS, epoch=7)
    new = reseeded(old, seed_v1())
    assert new.epoch == 8 and list(new.members.items()) == list(MEMBERS.items())
    assert new.owners[0] == ("m2", "m3", "m1")


def bad(path, value):
    s = seed_v1()
    *head, last = path
    node = s
    for p in head:
        node = node[p]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return s


@pytest.mark.parametrize("seed, says", [
    (bad(["version"], 2), r"seed.version: 2 is not supported"),
    (bad(["matchers"], 4), r"seed.matchers: 4 matchers, but the cluster has 3"),
    (bad(["matchers"], "3"), r"seed.matchers: expected a positive integer"),
    (bad(["space"], Space((Dimension("x0", 0, 10), Dimension("x1", -1, 1))).to_json()), r"seed.space: "),
    (bad(["dimensions", "x1"], KeyError), r"seed.dimensions: expected exactly x0, x1; missing x1"),
    (bad(["dimensions", "y"], {"boundaries": [0, 1]}), r"seed.dimensions: .*unknown y"),
    (bad(["dimensions", "x1", "boundaries"], [-1, 0, 1]), r"seed.dimensions.x1.boundaries: expected 4 values"),
    (bad(["dimensions", "x1", "boundaries"], [-1, 0.5, 0.25, 1]), r"seed.dimensions.x1.boundaries: .*rise strictly"),
    (bad(["dimensions", "x1", "boundaries"], [-2, 0, 0.5, 1]), r"seed.dimensions.x1.boundaries: must start at"),
    (bad(["dimensions", "x0", "boundaries"], [0, 1, 2, float("inf")]), r"seed.dimensions.x0.boundaries: inf is not"),
    (bad(["dimensions", "x0", "histogram", "load"], [1, 2]), r"seed.dimensions.x0.histogram.load: expected 4"),
    (bad(["dimensions", "x0", "histogram", "load"], [1, -2, 0, 0]), r"histogram.load: every value must be"),
    (bad(["dimensions", "x0", "histogram", "edges"], [0, 5, 5, 7, 9]), r"histogram.edges: expected at least"),
    (bad(["placement"], []), r"seed.placement: expected 3 entries"),
    (bad(["placement", 1, "matcher"], 0), r"seed.placement\[1\].matcher: matcher 0 is placed twice"),
    (bad(["placement", 1, "matcher"], 3), r"seed.placement\[1\].matcher: expected an integer from 0 to 2"),
    (bad(["placement", 2, "segments", "x0"], 3), r"seed.placement\[2\].segments.x0: expected a segment index"),
    (bad(["placement", 2, "segments", "x1"], KeyError), r"seed.placement\[2\].segments.x1: expected a segment"),
    (bad(["placement", 2, "segments", "x0"], 2), r"seed.placement\[2\].segments.x0: segment 2 is already placed"),
    (bad(["placement", 0, "segments", "z"], 1), r"seed.placement\[0\].segments: unknown dimension z"),
    ([1, 2], r"seed: expected a JSON object"),
])
def test_a_bad_seed_is_refused_naming_the_field(seed, says):
    with pytest.raises(SeedError, match=says):
        seeded_table(SPACE, MEMBERS, seed)


# -- random seeds ------------------------------------------------------------------------------
@st.composite
def valid_seeds(draw):
    n = draw(st.integers(1, 6))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    dims = {}
    for d in SPACE.dimensions:
        inner = sorted(rnd.sample(range(1, 10_000), n - 1))
        bounds = [d.min] + [d.min + (d.max - d.min) * c / 10_000 for c in inner] + [d.max]
        dims[d.name] = {"boundaries": bounds}
    perms = {d.name: rnd.sample(range(n), n) for d in SPACE.dimensions}
    placement = [{"matcher": j, "segments": {name: perms[name][j] for name in perms}} for j in range(n)]
    rnd.shuffle(placement)
    return {"version": 1, "matchers": n, "dimensions": dims, "placement": placement}


@settings(max_examples=150, deadline=None)
@given(valid_seeds())
def test_a_valid_seed_gives_a_table_where_every_matcher_owns_its_placed_segment(seed):
    n = seed["matchers"]
    members = {f"m{j + 1}": "" for j in range(n)}
    t = seeded_table(SPACE, members, seed)
    for entry in seed["placement"]:
        m = f"m{entry['matcher'] + 1}"
        for i, d in enumerate(SPACE.dimensions):
            b = seed["dimensions"][d.name]["boundaries"]
            idx = entry["segments"][d.name]
            assert t.segments_of(m)[i] == (b[idx], b[idx + 1])
            assert t.owner_at(i, (b[idx] + b[idx + 1]) / 2) == m
    assert SegmentTable.from_json(t.to_json()) == t


def _break(seed: dict, how: int, rnd: random.Random) -> dict:
    s = copy.deepcopy(seed)
    n = s["matchers"]
    name = rnd.choice(SPACE.names)
    if how == 0:  # a boundary out of order or repeated
        b = s["dimensions"][name]["boundaries"]
        b[rnd.randrange(1, len(b))] = b[0]
    elif how == 1:  # a segment placed twice (or an index out of range with one matcher)
        s["placement"][0]["segments"][name] = (s["placement"][-1]["segments"][name] if n > 1 else 1)
    elif how == 2:  # a matcher missing
        s["placement"].pop()
    elif how == 3:  # a wrong count of boundaries
        s["dimensions"][name]["boundaries"].append(2000.0)
    else:  # a non-number
        s["dimensions"][name]["boundaries"][0] = "zero"
    return s


@settings(max_examples=150, deadline=None)
@given(valid_seeds(), st.integers(0, 4), st.integers(0, 2**32))
def test_a_broken_seed_is_refused_naming_a_seed_field(seed, how, r):
    members = {f"m{j + 1}": "" for j in range(seed["matchers"])}
    with pytest.raises(SeedError, match=r"^seed\.(dimensions|placement)"):
        seeded_table(SPACE, members, _break(seed, how, random.Random(r)))


# -- split points ------------------------------------------------------------------------------
def test_the_split_point_halves_the_histogram_load_inside_the_range():
    s = parse_seed(seed_v1(), SPACE, 3)
    # Loads 3 on [250, 500) and 1 on [500, 750): half of 4 is 2, two thirds into the first bucket.
    assert seed_split_point(s, 0, 0, 1000) == pytest.approx(250 + 250 * 2 / 3)
    assert seed_split_point(s, "x0", 0, 1000) == seed_split_point(s, 0, 0, 1000)
    # Only [500, 600) of [500, 750)'s load inside: halves in its middle.
    assert seed_split_point(s, 0, 500, 600) == pytest.approx(550)
    assert seed_split_point(s, 0, 750, 1000) is None  # no load there
    assert seed_split_point(s, 1, -1, 1) is None  # no histogram on x1
    assert seed_split_point(None, 0, 0, 1000) is None
    assert seed_split_point(seed_v1(), "x0", 0, 1000) == seed_split_point(s, 0, 0, 1000)  # the JSON itself
    with pytest.raises(SeedError, match="no dimension 'y'"):
        seed_split_point(s, "y", 0, 1)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 100), min_size=1, max_size=8), st.floats(0, 999), st.floats(1, 1000))
@example([5e-324, 5e-324], 250.0, 501.0)  # a share of a subnormal load rounds to 0 (was a ZeroDivisionError)
def test_the_split_point_is_inside_the_range_and_halves_its_load(loads, lo, width):
    hi = min(lo + width, 1000.0)
    edges = [1000.0 * x / len(loads) for x in range(len(loads) + 1)]
    s = parse_seed({**seed_v1(), "dimensions": {**seed_v1()["dimensions"], "x0": {
        "boundaries": [0, 100, 700, 1000], "histogram": {"edges": edges, "load": loads}}}}, SPACE, 3)
    cut = seed_split_point(s, 0, lo, hi)

    def load(a, b):
        return sum(w * max(0.0, min(b, edges[x + 1]) - max(a, edges[x])) / (edges[x + 1] - edges[x])
                   for x, w in enumerate(loads))

    if cut is None:  # only when the range holds no load
        assert load(lo, hi) == pytest.approx(0, abs=1e-9)
        return
    assert lo < cut < hi
    assert load(lo, cut) == pytest.approx(load(lo, hi) / 2, rel=1e-6, abs=1e-9)


def test_takeover_split_and_hand_off_bookkeeping_work_on_a_per_dimension_permutation():
    """merge_out, split and grown see each dimension on its own: on a seeded table, where
    owner order differs per dimension, every member still owns one contiguous range each."""
    from bluedove.core.partition.segments import grown, merge_out, split

    t = seeded_table(SPACE, MEMBERS, seed_v1())  # x0: m2 m3 m1; x1: m1 m3 m2
    gone = merge_out(t, {"m3"})
    assert gone.owners == (("m2", "m1"), ("m1", "m2")) and gone.cuts == ((0.0, 700.0), (-1.0, 0.25))
    assert grown(t, gone) == {"m2": {0: (0.0, 700.0)}, "m1": {1: (-1.0, 0.25)}}
    joined = split(gone, "m4", "d:4", {0: ("m1", 800.0), 1: ("m2", 0.5)})
    assert joined.segments_of("m4") == {0: (800.0, 1000.0), 1: (0.5, 1.0)}
    assert joined.segments_of("m1") == {0: (700.0, 800.0), 1: (-1.0, 0.25)}
