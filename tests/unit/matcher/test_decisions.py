"""The matcher's membership decisions as tables: who is gone, who coordinates, join or refuse,
leave, retry timing, one change at a time; and a named space's: its own coordinator, takeover,
joins up to the matchers it spans (the lightest first), re-home when every owner is gone, and a
leaving owner's hand-off."""

import pytest

from bluedove.core.partition.modes import FULL, MPARTITION, P2P
from bluedove.core.partition.segments import equal_partition, hand_over
from bluedove.core.space import default_space
from bluedove.gossip.messages import ALIVE, DEAD, DISPATCHER, LEFT, MATCHER, SUSPECT, MemberState
from bluedove.matcher.decisions import (
    Adopt,
    Join,
    Leave,
    Refuse,
    Rehome,
    Shrink,
    Stuck,
    Takeover,
    coordinator,
    leave_change,
    named_change,
    named_leave,
    next_change,
    note_left,
)

TABLE = equal_partition(default_space(), {f"m{i}": f"a{i}" for i in (1, 2, 3)}, epoch=5)
S = {"A": ALIVE, "S": SUSPECT, "D": DEAD, "L": LEFT}


def view(spec: str) -> dict[str, MemberState]:
    """"m1:A m2:D m4:A0 d1:A" -> members; a trailing 0 is generation 0 (known from the table
    only); an id starting with d, or a state ending in d ("m2:Dd"), is a dispatcher's entry."""
    out = {}
    for item in spec.split():
        mid, st = item.split(":")
        role = DISPATCHER if mid.startswith("d") or st.endswith("d") else MATCHER
        out[mid] = MemberState(mid, "a" + mid[1:], 0 if st.endswith("0") else 10, status=S[st[0]], role=role)
    return out


@pytest.mark.parametrize("spec,expected", [
    ("m1:A m2:A m3:A", "m1"),
    ("m1:D m2:A m3:A", "m2"),                  # a dead owner does not coordinate
    ("m1:S m2:A m3:A", "m2"),                  # nor a suspected one
    ("m1:L m2:L m3:A", "m3"),                  # nor one that left
    ("m2:A m3:A", "m2"),                       # one not heard of yet does not either
    ("m1:D m2:D m3:D", None),
    ("m0:A m1:D m2:A m3:A", "m2"),             # an idle member is no owner: it never coordinates
])
def test_the_lowest_id_live_owner_coordinates(spec, expected):
    assert coordinator(TABLE, view(spec)) == expected


@pytest.mark.parametrize("me,spec,now,left_since,expected", [
    ("m1", "m1:A m2:A m3:A", 100.0, {}, None),
    ("m1", "m1:A m2:D m3:A", 100.0, {}, Takeover(frozenset({"m2"}))),
    ("m1", "m1:A m2:D m3:D", 100.0, {}, Takeover(frozenset({"m2", "m3"}))),
    ("m2", "m1:A m2:A m3:D", 100.0, {}, None),                       # not the coordinator
    ("m2", "m1:D m2:A m3:A", 100.0, {}, Takeover(frozenset({"m1"}))),  # the next one up
    ("m1", "m1:A m2:S m3:A", 100.0, {}, None),                       # suspected is not gone
    ("m1", "m1:A m3:A", 100.0, {}, None),                            # not heard of yet is not gone
    ("m1", "m1:A m2:L m3:A", 100.0, {"m2": 80.0}, None),             # left: hands off itself
    ("m1", "m1:A m2:L m3:A", 100.0, {"m2": 70.0}, None),             # exactly the timeout: not yet
    ("m1", "m1:A m2:L m3:A", 100.0, {"m2": 69.0}, Takeover(frozenset({"m2"}))),  # still an owner after
    ("m1", "m1:A m2:D m3:L", 100.0, {"m3": 99.0}, Takeover(frozenset({"m2"}))),
])
def test_who_is_gone(me, spec, now, left_since, expected):
    assert next_change(TABLE, view(spec), me, now, left_since=left_since, left_timeout_s=30.0) == expected


@pytest.mark.parametrize("spec,partition,expected", [
    ("m1:A m2:A m3:A m4:A", MPARTITION, Join("m4")),
    ("m1:A m2:A m3:A m5:A m4:A", MPARTITION, Join("m4")),     # the lowest id first
    ("m1:A m2:A m3:A m4:A0", MPARTITION, None),              # generation 0: never heard from itself
    ("m1:A m2:A m3:A m4:S", MPARTITION, None),               # only an alive member joins
    ("m1:A m2:A m3:A m4:L", MPARTITION, None),
    ("m1:A m2:D m3:A m4:A", MPARTITION, Takeover(frozenset({"m2"}))),  # takeover before join
    ("m1:A m2:A m3:A m4:A", P2P, Refuse("m4", P2P)),          # the baselines are fixed-size
    ("m1:A m2:A m3:A m4:A", FULL, Refuse("m4", FULL)),
    ("m1:A m2:D m3:A m4:A", P2P, Takeover(frozenset({"m2"}))),  # but still take the dead over
])
def test_join_or_refuse(spec, partition, expected):
    assert next_change(TABLE, view(spec), "m1", 100.0, partition=partition) == expected


@pytest.mark.parametrize("kwargs,expected", [
    ({}, Takeover(frozenset({"m2"}))),
    ({"busy": True}, None),                                  # one change at a time
    ({"ready": False}, None),                                # not loaded yet: no planning
    ({"retry_at": 100.5}, None),                             # a change failed: wait
    ({"retry_at": 100.0}, Takeover(frozenset({"m2"}))),      # the wait is over
    ({"gossip_epoch": 6}, Adopt(6)),                         # a newer table first
    ({"gossip_epoch": 5}, Takeover(frozenset({"m2"}))),      # the same epoch is ours
    ({"gossip_epoch": 6, "busy": True}, None),
    ({"gossip_epoch": 6, "ready": False}, Adopt(6)),         # adopted even while loading
])
def test_timing_and_one_change_at_a_time(kwargs, expected):
    assert next_change(TABLE, view("m1:A m2:D m3:A"), "m1", 100.0, **kwargs) == expected


@pytest.mark.parametrize("me,spec,expected", [
    ("m2", "m1:A m2:L m3:A", Leave(frozenset({"m2"}))),
    ("m2", "m1:D m2:L m3:A", Leave(frozenset({"m1", "m2"}))),   # the dead go out with us
    ("m2", "m1:S m2:L m3:A", Leave(frozenset({"m1", "m2"}))),   # so do the suspected
    ("m2", "m1:D m2:L m3:D", Stuck("no other live owner to hand the segments to")),
    ("m4", "m1:A m2:A m3:A m4:L", None),                       # owns nothing: done
])
def test_leave(me, spec, expected):
    assert leave_change(TABLE, view(spec), me) == expected
    assert next_change(TABLE, view(spec), me, 100.0, leaving=True) == expected
    assert next_change(TABLE, view(spec), me, 100.0, leaving=True, busy=True) is None


def test_a_left_owner_is_timed_from_when_it_was_first_seen_left():
    seen = note_left({}, TABLE, view("m1:A m2:L m3:A m4:L"), 10.0)
    assert seen == {"m2": 10.0}  # m4 owns nothing
    assert note_left(seen, TABLE, view("m1:A m2:L m3:L"), 20.0) == {"m2": 10.0, "m3": 20.0}


# Dispatchers are gossip members that own no segments: whatever their state, a matcher never
# joins them, takes them over, or lets them coordinate. Without roles, the first and the last
# three cases fail (a Join of a dispatcher, a Takeover of a live owner, the wrong coordinator);
# the others guard that a dispatcher's death or leave never counts as an owner's.
@pytest.mark.parametrize("me,spec,expected", [
    ("m1", "m1:A m2:A m3:A d1:A", None),                          # alive and owning nothing: not idle
    ("m1", "m1:A m2:A m3:A d1:A d2:A m4:A", Join("m4")),         # an idle matcher still joins
    ("m1", "m1:A m2:A m3:A d1:D", None),                          # a dead dispatcher: no takeover
    ("m1", "m1:A m2:A m3:A d1:L", None),                          # nor one that left
    ("m1", "m1:A m2:D m3:A d1:A", Takeover(frozenset({"m2"}))),   # a dead owner among them is
    ("m1", "m1:A m2:A m3:A m4:Ad", None),                          # a dispatcher named like a matcher
    ("m1", "m1:A m2:Dd m3:A", None),                              # an owner's id on a dispatcher says nothing
    ("m2", "m1:Ad m2:A m3:A m4:A", Join("m4")),                   # ... nor makes it coordinate
])
def test_a_dispatcher_is_never_joined_taken_over_or_counted(me, spec, expected):
    assert next_change(TABLE, view(spec), me, 100.0) == expected


def test_a_dispatcher_is_neither_coordinator_nor_left_owner():
    assert coordinator(TABLE, view("m1:Ad m2:A m3:A")) == "m2"
    assert note_left({}, TABLE, view("m1:A m2:Ld m3:A d1:L"), 10.0) == {}
    assert leave_change(TABLE, view("m1:Ad m2:L m3:Dd"), "m2") == Stuck("no other live owner to hand the segments to")


# A named space over m2 and m3 of a cluster whose matchers are m1..m4.
NAMED = equal_partition(default_space(), {"m2": "a2", "m3": "a3"}, epoch=7)
LIGHT = {"m1": 50.0, "m2": 10.0, "m3": 10.0, "m4": 5.0}


@pytest.mark.parametrize("me,spec,spans,expected", [
    ("m2", "m1:A m2:A m3:A m4:A", 2, None),                               # spans its 2: no join
    ("m2", "m1:A m2:A m3:A m4:A", None, Join("m4")),                      # spans all: the lightest joins
    ("m2", "m1:A m2:A m3:A m4:A", 3, Join("m4")),
    ("m1", "m1:A m2:A m3:A m4:A", None, None),                            # m1 is no owner: m2 decides
    ("m3", "m1:A m2:A m3:A m4:A", None, None),                            # nor m3, a higher owner
    ("m2", "m1:A m2:A m3:D m4:A", 2, Takeover(frozenset({"m3"}))),        # merge first, join later
    ("m3", "m1:A m2:D m3:A m4:A", 2, Takeover(frozenset({"m2"}))),        # the next live owner decides
    ("m2", "m1:A m2:A m3:S m4:A", 2, None),                               # suspected is not gone
    ("m2", "m1:A m2:A m3:A m4:A0", None, Join("m1")),                     # m4 not started: not joined
    ("m2", "m1:A m2:A m3:A d4:A", None, Join("m1")),                      # a dispatcher never joins
    ("m1", "m1:A m2:D m3:D m4:A", 2, Rehome("m4")),                       # every owner gone: re-homed
    ("m4", "m1:A m2:D m3:D m4:A", 2, None),                               # by the lowest-id live matcher
    ("m1", "m1:A m2:D m3:S m4:A", 2, None),                               # one only suspected: wait
    ("m2", "m1:A m2:A m3:A m4:A", 1, Shrink("m3")),                       # over its size: the heaviest
    ("m3", "m1:A m2:A m3:A m4:A", 1, None),                               # goes, by the coordinator m2
    ("m2", "m1:A m2:A m3:D m4:A", 1, Takeover(frozenset({"m3"}))),        # a dead owner: merged first
])
def test_a_named_spaces_next_change(me, spec, spans, expected):
    assert named_change(NAMED, view(spec), me, 100.0, spans=spans, weights=LIGHT) == expected


def test_nothing_while_loading_or_before_the_retry_time():
    members = view("m1:A m2:A m3:D m4:A")
    assert named_change(NAMED, members, "m2", 100.0, spans=2, weights=LIGHT, ready=False) is None
    assert named_change(NAMED, members, "m2", 100.0, spans=2, weights=LIGHT, retry_at=101.0) is None


def test_an_owner_that_left_long_ago_is_taken_over():
    members = view("m1:A m2:A m3:L m4:A")
    assert named_change(NAMED, members, "m2", 100.0, spans=2, weights=LIGHT, left_since={"m3": 60.0},
                        left_timeout_s=30.0) == Takeover(frozenset({"m3"}))
    assert named_change(NAMED, members, "m2", 100.0, spans=2, weights=LIGHT, left_since={"m3": 80.0},
                        left_timeout_s=30.0) is None


@pytest.mark.parametrize("me,spec,expected", [
    ("m2", "m1:A m2:L m3:A m4:A", Leave(frozenset({"m2"}))),
    ("m2", "m1:A m2:L m3:D m4:A", Rehome("m4")),             # no live owner left: the lightest outside
    ("m2", "m2:L m3:D", Stuck("no other live matcher to hand the space's segments to")),
    ("m1", "m1:L m2:A m3:A m4:A", None),                     # owns nothing in the space
])
def test_a_leaving_owners_hand_off(me, spec, expected):
    assert named_leave(NAMED, view(spec), me, LIGHT) == expected


def test_hand_over_gives_the_whole_range_to_one_owner():
    new = hand_over(NAMED, "m4", "a4")
    assert new.epoch == NAMED.epoch + 1 and new.members == {"m4": "a4"}
    for i, d in enumerate(NAMED.space.dimensions):
        assert new.segments_of("m4")[i] == (d.min, d.max)
