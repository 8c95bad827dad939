"""bluedove/core/partition/bootstrap.py's pure part: the first table, member specs, seeds; and the matcher's
readiness rule (bluedove/matcher/decisions.py serving_ready)."""

from __future__ import annotations

import pytest

from bluedove.core.partition.bootstrap import (
    BootError,
    SpaceMismatch,
    check_space,
    initial_table,
    numbered_members,
    parse_members,
    spanned,
    with_address,
)
from bluedove.core.partition.segments import equal_partition
from bluedove.core.space import Dimension, Space
from bluedove.matcher.decisions import serving_ready

SPACE = Space((Dimension("x0", 0.0, 1000.0), Dimension("x1", -1.0, 1.0)))


def test_without_a_seed_the_first_table_is_the_equal_partition_at_epoch_1():
    members = {"m1": "a:1", "m2": "", "m3": "c:3"}
    t = initial_table(SPACE, members)
    assert t == equal_partition(SPACE, members, epoch=1)
    assert t.cuts[0] == (0.0, 1000 / 3, 2000 / 3) and t.owners[1] == ("m1", "m2", "m3")


def test_the_seed_gives_the_interior_cuts_of_each_dimension():
    t = initial_table(SPACE, {"m1": "", "m2": ""}, {"cuts": [[100], [0.5]]})
    assert t.epoch == 1 and t.cuts == ((0.0, 100.0), (-1.0, 0.5))
    assert t.segments_of("m2") == {0: (100.0, 1000.0), 1: (0.5, 1.0)}


@pytest.mark.parametrize("seed, says", [
    ({"cuts": [[100]]}, r"seed.cuts: 1 lists for a space of 2 dimensions \(x0, x1\)"),
    ({"cuts": [[100, 200], [0.5]]}, r"seed.cuts\[0\] \(x0\): expected 1 interior cuts for 2 matchers"),
    ({"cuts": [[0], [0.5]]}, r"seed.cuts\[0\] \(x0\): cuts must rise strictly inside \(0, 1000\)"),
    ({"cuts": [[1000], [0.5]]}, r"cuts must rise strictly inside"),
    ({"cuts": [[100], ["a"]]}, r"seed.cuts\[1\] \(x1\): 'a' is not a finite number"),
    ({"cuts": [[100], [float("nan")]]}, r"is not a finite number"),
    ({"cut": []}, r"\"version\": 1 \(or the old form \{\"cuts\""),
])
def test_a_bad_seed_is_refused_naming_the_field(seed, says):
    with pytest.raises(BootError, match=says):
        initial_table(SPACE, {"m1": "", "m2": ""}, seed)


def test_decreasing_cuts_are_refused():
    with pytest.raises(BootError, match="rise strictly"):
        initial_table(SPACE, {"m1": "", "m2": "", "m3": ""}, {"cuts": [[600, 300], [0.1, 0.2]]})


def test_member_specs_keep_order_and_addresses():
    assert parse_members("m1=10.0.0.1:7001, m2 ,pod-3.svc=[::1]:7001") == {
        "m1": "10.0.0.1:7001", "m2": "", "pod-3.svc": "[::1]:7001"}
    assert list(numbered_members(3)) == ["m1", "m2", "m3"] and set(numbered_members(3).values()) == {""}


@pytest.mark.parametrize("spec, says", [
    ("m1,,m2", "empty member"), ("m1,m1", "m1 is named twice"), ("m1=host", "expected HOST:PORT"),
    ("m1=host:99999", "expected HOST:PORT"), ("=a:1", "member id ''"), ("a b", "member id 'a b'"),
])
def test_bad_member_specs_name_the_flag(spec, says):
    with pytest.raises(BootError, match=says) as info:
        parse_members(spec, "--boot-members")
    assert "--boot-members" in str(info.value)


def test_no_matchers_is_refused():
    with pytest.raises(BootError, match="--matchers 0"):
        numbered_members(0)


def test_another_space_is_refused_naming_both():
    other = Space((Dimension("price", 0.0, 10.0),))
    check_space(SPACE, Space(SPACE.dimensions))  # the same dimensions: fine
    with pytest.raises(SpaceMismatch, match=r"stored x0 \[0, 1000\), x1 \[-1, 1\); --space s.yaml gives "
                                            r"price \[0, 10\)"):
        check_space(SPACE, other, "--space s.yaml")


def test_registering_an_address_is_the_next_epoch_with_the_same_segments():
    t = initial_table(SPACE, {"m1": "", "m2": ""})
    t2 = with_address(t, "m2", "10.0.0.2:7001")
    assert t2.epoch == 2 and t2.members == {"m1": "", "m2": "10.0.0.2:7001"}
    assert (t2.cuts, t2.owners, t2.space) == (t.cuts, t.owners, t.space)


@pytest.mark.parametrize("loaded, me, newest, ready", [
    (True, "m1", 2, True),  # loaded, an owner, table current
    (False, "m1", 2, False),  # still loading the catalogue
    (True, "m9", 2, False),  # idle: owns no segments (yet)
    (True, "m1", 3, False),  # gossip or the store carries a newer epoch than ours
])
def test_readiness_rule(loaded, me, newest, ready):
    table = with_address(initial_table(SPACE, {"m1": "", "m2": ""}), "m1", "a:1")  # epoch 2
    assert serving_ready(loaded, me, table, newest) is ready


def test_not_ready_without_a_table():
    assert serving_ready(True, "m1", None, 0) is False


# -- the matchers a new space spans -----------------------------------------------------------
M4 = {f"m{i}": f"h:{i}" for i in range(1, 5)}


def test_a_space_of_every_matcher_or_more_spans_them_all_in_id_order():
    assert list(spanned({"m2": "b", "m1": "a"}, None, "s")) == ["m1", "m2"]
    assert spanned(M4, 4, "s") == M4 and spanned(M4, 9, "s") == M4


def test_small_spaces_spread_over_idle_matchers_by_name_not_onto_the_first_ids():
    """100 one-matcher spaces on 4 idle matchers: each matcher gets some (rendezvous hashing
    gives each ~25), and a space's place is the same whatever else exists."""
    placed = [next(iter(spanned(M4, 1, f"space-{i}"))) for i in range(100)]
    counts = {m: placed.count(m) for m in M4}
    assert min(counts.values()) >= 10, counts
    assert placed == [next(iter(spanned(M4, 1, f"space-{i}"))) for i in range(100)]


def test_the_least_busy_matchers_come_first_and_small_differences_do_not_count():
    busy = {"m1": 0.9, "m2": 0.8, "m3": 0.02, "m4": 0.04}
    for i in range(20):
        assert set(spanned(M4, 2, f"s{i}", busy)) == {"m3", "m4"}
    # within a tenth, the name decides: both m3 and m4 are picked by some names
    firsts = {next(iter(spanned(M4, 1, f"s{i}", busy))) for i in range(50)}
    assert firsts == {"m3", "m4"}
    # an unknown matcher counts as idle
    assert set(spanned(M4, 3, "x", {"m1": 0.9})) == {"m2", "m3", "m4"}
