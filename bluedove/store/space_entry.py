"""A queue entering a named space: what must be written before its first subscription there.

A queue's subscriptions in a named space live in that space's catalogue (`{s:S:c:N}`), a slot
apart from the queue's own keys (`{q:Q}`) and from the space's record (`{s:S}`), so no one
script can check all three. Before a queue's first subscription in space S:

- the queue records S in its set `bd:{q:Q}:spaces`, unless it is being deleted (a script on
  `{q:Q}`): deleting the queue first flags its hash `deleting` and reads that set in one step,
  so every space it entered before is walked, and none can be entered after;
- the space lists the queue's set of ids there in its `keys` set, unless the space is no
  longer the one the writer knows (deleted, or made again under its name: another `created`).

A crash between the two leaves a space recorded with no subscription in it (a deletion walks
it for nothing) or a listed key that was never written (a purge unlinks nothing): both
harmless. The writer remembers the pairs it entered, so a queue's later subscriptions in the
space cost nothing more; the marks it relies on outlive the memory (the queue's `deleting`
flag and gone marks, a space made again having another `created`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from bluedove.store import keys as K
from bluedove.store.batch import Call, Runner, Script

# KEYS: the queue's hash, its spaces set. ARGV: the space. 1 entered; 0 no such queue (or it is
# being deleted).
ENTER_QUEUE = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'deleting') == 1 then return 0 end
redis.call('SADD', KEYS[2], ARGV[1])
return 1
"""
# KEYS: the space's record, its keys set. ARGV: created, the queue's id-set key. 1 listed;
# 0 the space is not active with that `created`.
ENTER_SPACE = """
local had = redis.call('HMGET', KEYS[1], 'state', 'created')
if had[1] ~= 'active' or had[2] ~= ARGV[1] then return 0 end
redis.call('SADD', KEYS[2], ARGV[2])
return 1
"""
# KEYS: the queue's hash, its spaces set. Flags the queue `deleting` (if it exists) and
# answers the spaces it entered.
LEAVE_ALL = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'deleting', '1') end
return redis.call('SMEMBERS', KEYS[2])
"""
# KEYS: the space's record. ARGV: created. 1 while the space is active with that `created`.
STILL = """
local had = redis.call('HMGET', KEYS[1], 'state', 'created')
if had[1] == 'active' and had[2] == ARGV[1] then return 1 end
return 0
"""

REMEMBERED = 100_000  # (queue, space) pairs a writer remembers having entered


@dataclass(frozen=True)
class SpaceAt:
    """A named space as a writer knows it: its name and when it was made (a space deleted and
    made again under the same name is another space)."""

    name: str
    created: int


class SpaceGone(Exception):
    """The space was deleted (or deleted and made again) while the write was under way."""


class SpaceEntry:
    """Entering queues into named spaces, for a catalogue writer on `runner`'s connection."""

    def __init__(self, runner: Runner, register: Callable[[str], Script]) -> None:
        self.runner = runner
        self._enter_queue = register(ENTER_QUEUE)
        self._enter_space = register(ENTER_SPACE)
        self._still = register(STILL)
        self._entered: OrderedDict[tuple[str, str, int], None] = OrderedDict()

    async def enter(self, queues: list[str], space: str, created: int) -> set[str]:
        """Enter each of `queues` into space `space` (made at `created`), those not already
        entered in one round trip; the queues that could not (no such queue, or it is being
        deleted). SpaceGone if the space is not the active one made at `created`."""
        todo = [q for q in dict.fromkeys(queues) if (q, space, created) not in self._entered]
        if not todo:
            return set()
        cat = K.CatalogueKeys(space)
        calls: list[Call] = []
        for q in todo:
            calls.append(Call(self._enter_queue, [K.queue_hash(q), K.queue_spaces(q)], [space]))
            calls.append(Call(self._enter_space, [K.space_record(space), K.space_keys(space)],
                              [created, cat.queue_subs(q)]))
        out = await self.runner.run(calls)
        if not all(int(x) for x in out[1::2]):
            raise SpaceGone(space)
        refused = set()
        for q, in_queue in zip(todo, out[0::2]):
            if int(in_queue):
                self._remember((q, space, created))
            else:
                refused.add(q)
        return refused

    async def still(self, space: str, created: int) -> bool:
        """Whether space `space` is still the active one made at `created` (read after a write
        that crossed slots: one that is not undoes itself)."""
        out = await self.runner.run([Call(self._still, [K.space_record(space)], [created])])
        return bool(int(out[0]))

    def _remember(self, key: tuple[str, str, int]) -> None:
        self._entered[key] = None
        if len(self._entered) > REMEMBERED:
            self._entered.popitem(last=False)

