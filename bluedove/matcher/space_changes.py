"""The table changes of the named spaces a matcher serves: each space's takeover, join and
re-home, decided after every gossip round (`decisions.named_change`, pure) and made with the
default space's hand-off (`Membership.publish`, per space); and a leaving matcher's hand-off
of every named space it owns segments in (`decisions.named_leave`).

Each space changes on its own: one change at a time per space, coordinated by its lowest-id
live owner, stored by compare-and-set on the space's own table epoch. The other owners adopt
it at once (Prepare with adopt) or, if unreachable then, from the store (their states' watch);
dispatchers read it on their next refusal or store read (docs/design.md, "Spaces").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Mapping
from typing import Any

from bluedove.core.partition.segments import SegmentTable, grown, hand_over, merge_out, plan_split, split
from bluedove.gossip.messages import MemberState
from bluedove.matcher.decisions import (
    Join,
    Leave,
    Rehome,
    Shrink,
    Stuck,
    Takeover,
    live_matchers,
    named_change,
    named_leave,
    note_left,
    proposal_refused,
)
from bluedove.matcher.membership import Membership
from bluedove.matcher.spaces_served import ServedSpaces

log = logging.getLogger("bluedove.matcher")

# Every served space is looked at when gossip's view of the members moves, and this often in
# any case (an owner that left is gone after a timeout, a failed change is retried); else only
# the spaces whose table moved. Looking at a thousand spaces takes a matcher ~15 ms: every
# round (5 a second) it cost ~5 % of a core.
LOOK_EVERY_S = 5.0


class NamedChanges:
    """Executes the named spaces' table changes for one matcher."""

    def __init__(self, membership: Membership, served: ServedSpaces) -> None:
        self.mb = membership
        self.served = served
        self._busy: set[str] = set()  # spaces with a change under way
        self._retry_at: dict[str, float] = {}  # after a failed change, nothing in that space before then
        self._left_seen: dict[str, dict[str, float]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._view: tuple[tuple[str, int, bool, str], ...] = ()  # the members as last looked at
        self._look_at = 0.0  # when every space is looked at next
        self._epochs: dict[str, int] = {}  # each space's table epoch when last looked at

    def _to_look_at(self, members: Mapping[str, MemberState], now: float) -> bool:
        """Whether every space is looked at this round (else only those whose table moved)."""
        view = tuple(sorted((i, e.status, e.generation > 0, e.role) for i, e in members.items()))
        if view != self._view or now >= self._look_at:
            self._view, self._look_at = view, now + LOOK_EVERY_S
            return True
        return False

    def after_round(self) -> None:
        """Decide and start each named space's next change (none while we leave)."""
        mb = self.mb
        if mb.leaving or mb.node is None:
            return
        members = mb.node.members
        me, now, s = mb.m.s.id, time.monotonic(), mb.m.s
        weights = {i: mb.weight(i) for i in members}
        live = live_matchers(members)
        every = self._to_look_at(members, now)
        if every:
            self._epochs = {}  # (a deleted space's entry goes too)
        for name, served in list(self.served.served.items()):
            table = served.state.table
            if name in self._busy or table is None or (not every and self._epochs.get(name) == table.epoch):
                continue
            self._epochs[name] = table.epoch
            left = self._left_seen[name] = note_left(self._left_seen.get(name, {}), table, members, now)
            change = named_change(table, members, me, now, spans=served.spans, weights=weights,
                                  ready=served.state.ready, retry_at=self._retry_at.get(name, 0.0),
                                  left_since=left, left_timeout_s=s.left_owner_timeout_s, live=live)
            if change is not None:
                self._spawn(name, self._make(name, table, change, members))

    async def _make(self, name: str, old: SegmentTable, change: Takeover | Join | Shrink | Rehome,
                    members: Mapping[str, MemberState]) -> None:
        if isinstance(change, Takeover):
            new = merge_out(old, set(change.gone), self.mb.weight)
            why = (f"{', '.join(sorted(change.gone))} gone; segments merged into "
                   f"{', '.join(sorted(grown(old, new)))}")
            await self.mb.publish(old, new, "takeover", why, space=name)
        elif isinstance(change, Join):
            at, how = plan_split(old, await self.mb.loads(old, name), await self.mb.stored_seed(old, name))
            new = split(old, change.member, members[change.member].addr, at)
            await self.mb.publish(old, new, "split", f"{change.member} joins the space: {how}", space=name)
        elif isinstance(change, Shrink):
            new = merge_out(old, {change.gone}, self.mb.weight)
            await self.mb.publish(old, new, "merge", f"the space shrinks to {len(new.members)} matchers: "
                                  f"{change.gone}'s segments merged into {', '.join(sorted(grown(old, new)))}",
                                  space=name)
        else:
            await self._rehome(name, old, change.taker, members, "its owners are gone")

    async def _rehome(self, name: str, old: SegmentTable, taker: str, members: Mapping[str, MemberState],
                      why: str) -> bool:
        new = hand_over(old, taker, members[taker].addr)
        return await self.mb.publish(old, new, "takeover", f"{why}; {taker} takes the whole space", space=name)

    def _spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        self._busy.add(name)
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            self._busy.discard(name)
            if not t.cancelled() and t.exception() is not None:
                log.error("table change in space %r failed: %r", name, t.exception())
                self._retry_at[name] = time.monotonic() + self.mb.m.s.change_retry_s

        task.add_done_callback(done)

    async def propose(self, name: str, new: SegmentTable, reason: str) -> tuple[str | None, int]:
        """An operator's re-seed of named space `name` (`bluedove seed --space-name`), published
        with the hand-off unless refused: (why refused or None, the space's epoch now)."""
        served = self.served.served.get(name)
        if served is None:
            return f"this matcher does not serve space {name!r}", 0
        old = served.state.table
        why = proposal_refused(old, new, served.state.ready, name in self._busy or self.mb.leaving)
        if why is not None or old is None:
            return why, old.epoch if old else 0
        self._busy.add(name)
        try:
            if not await self.mb.publish(old, new, "reseed", reason, from_owners=False, space=name):
                return "another table change got in first; try again on the new table", old.epoch
        finally:
            self._busy.discard(name)
        return None, new.epoch

    async def leave(self, deadline: float) -> str | None:
        """Hand every named space's segments of ours to other matchers (the caller has said we
        leave, so nobody joins us back). None when done; else why not."""
        for name in list(self.served.served):
            why = await self._leave_space(name, deadline)
            if why is not None:
                return why
        return None

    async def _leave_space(self, name: str, deadline: float) -> str | None:
        mb = self.mb
        while time.monotonic() < deadline:
            while name in self._busy:
                await asyncio.sleep(0.05)
            served = self.served.served.get(name)
            if served is None or served.state.table is None or mb.node is None:
                return None  # deleted meanwhile: nothing to hand off
            old, members = served.state.table, mb.node.members
            change = named_leave(old, members, mb.m.s.id, {i: mb.weight(i) for i in members})
            if change is None:
                return None
            if isinstance(change, Stuck):
                return f"space {name!r}: {change.reason}"
            self._busy.add(name)
            try:
                if isinstance(change, Leave):
                    new = merge_out(old, set(change.gone), mb.weight)
                    if await mb.publish(old, new, "merge", f"{mb.m.s.id} leaves; segments merged into "
                                        f"{', '.join(sorted(grown(old, new)))}", space=name):
                        return None
                elif await self._rehome(name, old, change.taker, members, f"{mb.m.s.id}, its last owner, leaves"):
                    return None
            except Exception as exc:  # noqa: BLE001 - a taker failed; try again on a fresh table
                log.warning("leave hand-off in space %r failed (%r); retrying", name, exc)
                await asyncio.sleep(mb.m.s.leave_retry_s)
            finally:
                self._busy.discard(name)
        return f"space {name!r}: hand-off not done in time"

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
