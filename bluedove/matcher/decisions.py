"""The matcher's membership decisions, pure: given the table, the gossip view of the members
and the time, which table change (if any) this matcher makes next.

- who is gone: an owner gossip agreed is dead (never a member merely not heard of yet), or
  one that left on purpose but is still an owner `left_timeout_s` after (its own hand-off
  failed);
- who coordinates: the lowest-id live owner; every member agrees once gossip has settled;
- join or refuse: an alive matcher that owns nothing joins (mPartition), or stays idle under
  the baseline partitions, which are fixed-size; a dispatcher (a gossip member of role
  "dispatcher") is never idle, never joined and never taken over: it owns nothing;
- leave: a leaving owner merges itself (and owners already dead) out into the live ones.

No I/O and no clock: `membership.py` passes the time and executes what is decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol

from bluedove.core.partition.modes import MPARTITION
from bluedove.core.partition.segments import SegmentTable
from bluedove.gossip.messages import ALIVE, DEAD, LEFT, MATCHER


class Member(Protocol):
    """A member as gossip sees it (`bluedove.gossip.state.MemberState`), read only."""

    @property
    def status(self) -> int: ...

    @property
    def generation(self) -> int: ...

    @property
    def role(self) -> str: ...


# The changes, each executed by `membership.py`.
@dataclass(frozen=True)
class Adopt:
    """The change that adopts the newer table whose epoch gossip carries."""

    epoch: int  # gossip carries this newer table epoch: adopt that table first


@dataclass(frozen=True)
class Takeover:
    """The change that merges dead owners' segments into adjacent live owners."""

    gone: frozenset[str]  # merge these owners' segments into adjacent live owners


@dataclass(frozen=True)
class Join:
    """The change that splits the busiest segments to give an idle matcher its share."""

    member: str  # split the busiest segments to give this idle member its share


@dataclass(frozen=True)
class Refuse:
    """No change: an idle matcher stays idle, as the partition mode takes no joins."""

    member: str  # this idle member stays idle: the partition mode takes no joins
    partition: str


@dataclass(frozen=True)
class Leave:
    """The change that merges this leaving matcher (and dead owners) out into the live ones."""

    gone: frozenset[str]  # merge ourselves and the owners not alive out into the live ones


@dataclass(frozen=True)
class Stuck:
    """No change: we are leaving but no other owner is alive to take our segments."""

    reason: str  # we are leaving but no other owner is alive to take our segments


@dataclass(frozen=True)
class Shrink:
    """The change that merges one owner of a named space out into the others: the space spans
    more matchers than its size (the autoscaler lowered it)."""

    gone: str


@dataclass(frozen=True)
class Rehome:
    """The change that gives a named space's whole range to one live matcher outside its table:
    every owner is gone, or the last live one leaves."""

    taker: str


Change = Adopt | Takeover | Join | Refuse | Leave | Stuck | Rehome


def alive(members: Mapping[str, Member], member: str) -> bool:
    e = members.get(member)
    return e is not None and e.role == MATCHER and e.status == ALIVE


def coordinator(table: SegmentTable, members: Mapping[str, Member]) -> str | None:
    """The lowest-id live owner of segments, or None when no owner is alive."""
    live = [i for i in table.members if alive(members, i)]
    return min(live) if live else None


def note_left(left_since: Mapping[str, float], table: SegmentTable, members: Mapping[str, Member],
              now: float) -> dict[str, float]:
    """`left_since` with the owners gossip says left, each at the first time it was seen so."""
    out = dict(left_since)
    for o in table.members:
        e = members.get(o)
        if e is not None and e.role == MATCHER and e.status == LEFT:
            out.setdefault(o, now)
    return out


def gone(table: SegmentTable, members: Mapping[str, Member], me: str, now: float,
         left_since: Mapping[str, float], left_timeout_s: float) -> frozenset[str]:
    """The owners other than us that are dead, or left more than `left_timeout_s` ago."""
    out = set()
    for o in table.members:
        e = members.get(o)
        if o == me or e is None or e.role != MATCHER:  # a dispatcher's entry says nothing of an owner
            continue
        if e.status == DEAD or now - left_since.get(o, now) > left_timeout_s:
            out.add(o)
    return frozenset(out)


def leave_change(table: SegmentTable, members: Mapping[str, Member], me: str) -> Leave | Stuck | None:
    """A leaving member's next step: None once it owns nothing."""
    if me not in table.members:
        return None
    others = [o for o in table.members if o != me and alive(members, o)]
    if not others:
        return Stuck("no other live owner to hand the segments to")
    return Leave(frozenset({me} | {o for o in table.members if o not in others}))


def next_change(table: SegmentTable, members: Mapping[str, Member], me: str, now: float, *,
                ready: bool = True, busy: bool = False, leaving: bool = False, gossip_epoch: int = 0,
                partition: str = MPARTITION, retry_at: float = 0.0,
                left_since: Mapping[str, float] | None = None, left_timeout_s: float = 30.0) -> Change | None:
    """The table change this matcher makes now, if any.

    `busy`: a change is under way (one at a time); `gossip_epoch`: the newest table epoch gossip
    carries; `retry_at`: after a failed change, nothing before then; `left_since`: when each
    owner was first seen left (`note_left`)."""
    if busy:
        return None
    if leaving:
        return leave_change(table, members, me)
    if gossip_epoch > table.epoch:
        return Adopt(gossip_epoch)
    if not ready or now < retry_at or coordinator(table, members) != me:
        return None
    out = gone(table, members, me, now, left_since or {}, left_timeout_s)
    if out:
        return Takeover(out)
    idle = sorted(i for i, e in members.items()
                  if e.role == MATCHER and e.status == ALIVE and e.generation > 0 and i not in table.members)
    if not idle:
        return None
    if partition != MPARTITION:
        # The baselines are fixed-size: a split plans mPartition's segments.
        return Refuse(idle[0], partition)
    return Join(idle[0])


def live_matchers(members: Mapping[str, Member]) -> list[str]:
    """The matchers gossip says are alive and have started (dispatchers are not), by id."""
    return sorted(i for i, e in members.items() if e.role == MATCHER and e.status == ALIVE and e.generation > 0)


def lightest(ids: list[str], weights: Mapping[str, float]) -> str:
    """The member of `ids` with the least weight (its subscriptions), the lowest id on a tie."""
    return min(ids, key=lambda i: (weights.get(i, 0.0), i))


def named_change(table: SegmentTable, members: Mapping[str, Member], me: str, now: float, *,
                 spans: int | None, weights: Mapping[str, float], ready: bool = True, retry_at: float = 0.0,
                 left_since: Mapping[str, float] | None = None, left_timeout_s: float = 30.0,
                 live: list[str] | None = None) -> Takeover | Join | Shrink | Rehome | None:
    """The change this matcher makes now to a named space's table, if any (one change per
    space at a time: the caller skips a space with one under way).

    Its lowest-id live owner coordinates it: it merges gone owners out, then joins the lightest
    live matcher outside the table while the space spans fewer than `spans` matchers (None: all;
    a matcher gives a named space the matchers its spec or its first table gave it, or the
    autoscaler's), or merges its heaviest owner out while it spans more.
    When every owner is gone the lowest-id live matcher of the cluster re-homes it on the
    lightest live matcher (`weights`: subscriptions per member). `live`: `live_matchers(members)`,
    if the caller has it (one list for every space of a round). No I/O, like `next_change`."""
    if not ready or now < retry_at:
        return None
    out = gone(table, members, me, now, left_since or {}, left_timeout_s)
    live = live_matchers(members) if live is None else live
    owners = [o for o in table.members if o in live and o not in out]
    if not owners:
        if out != set(table.members) or not live or live[0] != me:
            return None  # an owner is only suspected so far, or another matcher re-homes it
        return Rehome(lightest(live, weights))
    if min(owners) != me:
        return None
    if out:
        return Takeover(out)
    if spans is not None and len(table.members) > spans and len(owners) > 1:
        # the heaviest owner gives its part back: the space gathers on the lighter matchers
        return Shrink(max(owners, key=lambda i: (weights.get(i, 0.0), i)))
    idle = [i for i in live if i not in table.members]
    if not idle or (spans is not None and len(table.members) >= spans):
        return None
    return Join(lightest(idle, weights))


def named_leave(table: SegmentTable, members: Mapping[str, Member], me: str,
                weights: Mapping[str, float]) -> Leave | Rehome | Stuck | None:
    """A leaving matcher's next step in a named space: merge out into the live owners, or, when
    none is left, hand the whole range to the lightest live matcher outside the table; None once
    it owns nothing there."""
    if me not in table.members:
        return None
    others = [o for o in table.members if o != me and alive(members, o)]
    if others:
        return Leave(frozenset({me} | {o for o in table.members if o not in others}))
    outside = [i for i in live_matchers(members) if i != me and i not in table.members]
    if not outside:
        return Stuck("no other live matcher to hand the space's segments to")
    return Rehome(lightest(outside, weights))


def serving_ready(loaded: bool, me: str, table: SegmentTable | None, newest_epoch: int) -> bool:
    """The readiness probe's answer (gRPC health "bluedove.ready"): the catalogue is loaded, we
    own segments, and our table is the newest epoch we have seen (in the store or through
    gossip). An idle member, or one about to adopt a newer table, takes no traffic."""
    return loaded and table is not None and me in table.members and table.epoch >= newest_epoch


def proposal_refused(old: SegmentTable | None, new: SegmentTable, ready: bool, busy: bool) -> str | None:
    """Why an operator's proposed table (a re-seed: the next epoch of `old`, the same members and
    space, another layout) is refused now, or None to publish it."""
    if old is None or not ready:
        return "this matcher is still loading its subscriptions"
    if busy:
        return "another table change is under way; try again"
    if new.epoch != old.epoch + 1:
        return f"the table is epoch {new.epoch}, not the next of this matcher's epoch {old.epoch}"
    if new.space != old.space:
        return "the table is over another space"
    if new.members != old.members:
        return f"the table's members {dict(new.members)} are not the current ones {dict(old.members)}"
    return None
