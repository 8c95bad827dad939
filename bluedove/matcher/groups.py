"""Equal boxes held once: a set's trees index each distinct box a single time (a group), and
the entries that have that box are the group's members.

Subscriptions share filters: in the `orders` workload 40,000 subscriptions have 998 distinct
filters, and a set of 25,557 entries holds 673 distinct (box, filter) pairs. Walking one box per
entry found every shared box once per subscriber (4,289 index hits a message, where 113 boxes
are distinct) and checked each entry's filter; walking groups finds each box once, checks each
group's filter once (bluedove/matcher/group_match.py), and lists the members only of the
groups kept (docs/benchmarks.md, "Typed workloads").

A group's key is its box (the caller's order, bit for bit) and what its members are: plain
subscriptions; boxes of the filter whose code the set's book gave when they were filed; or,
when the book did not know the filter then, a group of one. Members are a doubly linked list
in arrays indexed by internal id, so that a removal is O(1); a walk reads them from a flat copy
(`start`/`stop` into `flat`, by group), read in order, which a group changed since it was made
(not `fresh`) skips for the list; the copy is made again once a part of the entries changed
(pointer-chasing the lists was 18 µs of an `orders` message, 1,334 members). Group ids, like
internal ids, ascend and are never reused (the levels take them in that order:
bluedove/matcher/levels.py).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from bluedove.core.jit import compiled

Ints = npt.NDArray[np.int64]
# The flat copy is made again once more than this many entries (and an eighth of them) joined or
# left a group since it was made: ~5 ns an entry, against ~10 ns a member read from a list.
FLAT_MIN = 256


_EMPTY_I = np.zeros(0, dtype=np.int64)  # shared while empty: `_grown` replaces, never writes into, them
_EMPTY_B = np.zeros(0, dtype=np.bool_)


def _grown(a: np.ndarray, size: int, fill: int | bool) -> np.ndarray:
    if size <= len(a):
        return a
    return np.concatenate([a, np.full(max(size, 2 * len(a)) - len(a), fill, dtype=a.dtype)])


class Groups:
    """Group id -> its members (`head`, then `nxt` by internal id), how many (`size`), whether
    they are boxes of filters (`checked`), and the filter code `code` checked for all of them
    (bluedove/matcher/group_match.py keeps it, `valid` while it holds)."""

    def __init__(self) -> None:
        self._gid_of: dict[bytes, int] = {}
        self._key: list[bytes | None] = []  # group id -> its key while live (a slot per id ever given)
        # Arrays start empty and grow by doubling (a space's idle sets cost next to nothing).
        self.head = _EMPTY_I
        self.size = _EMPTY_I
        self.checked = _EMPTY_B
        self.code = _EMPTY_I
        self.valid = _EMPTY_B
        self.of = _EMPTY_I  # internal id -> its group
        self.nxt = _EMPTY_I
        self.prv = _EMPTY_I
        self.start = _EMPTY_I  # the flat copy: group -> [start, stop) in flat
        self.stop = _EMPTY_I
        self.flat = _EMPTY_I
        self.flat_queue = np.zeros(0, dtype=np.int32)  # beside `flat`: each member's queue code
        self.fresh = _EMPTY_B  # group -> unchanged since the copy
        self.changed = 0  # joins and leaves since the copy
        self.flat_min = FLAT_MIN
        self.n = 0  # group ids handed out
        self.live = 0  # groups with members
        self.entries = 0  # members of all groups
        # what `valid` was judged against: the book and its epoch (group_match.py)
        self.judged: tuple[object, int] = (None, -1)

    def file(self, first: int, keys: list[bytes], checked: npt.NDArray[np.bool_]) -> tuple[Ints, Ints]:
        """Entries first, first + 1, … have boxes `keys` (one each): each joins the group of
        its key, a new one if none is live. Returns (each entry's group, the rows that began a
        new group); new groups' ids ascend with their rows."""
        n = len(keys)
        found = list(map(self._gid_of.get, keys))
        new: list[int] = []
        if None in found:  # new keys get ids in the order of their first row
            fresh: dict[bytes, int] = {}
            for r, (key, g) in enumerate(zip(keys, found)):
                if g is None and key not in fresh:
                    fresh[key] = r
            ids = range(self.n, self.n + len(fresh))
            self._gid_of.update(zip(fresh, ids))
            self._key.extend(fresh)
            self.n += len(fresh)
            new = list(fresh.values())
            found = list(map(self._gid_of.__getitem__, keys))
        gids = np.array(found, dtype=np.int64)
        self._room(first + n)
        rows = np.array(new, dtype=np.int64)
        self.checked[gids[rows]] = checked[rows]
        self.live += len(new)
        self.entries += n
        self.changed += n
        _link(np.arange(first, first + n, dtype=np.int64), gids, self.head, self.nxt, self.prv, self.of, self.size,
              self.valid, self.fresh)
        return gids, rows

    def join(self, iid: int, key: bytes, checked: bool) -> tuple[int, bool]:
        """`file` of one entry (a live insert), with no arrays built: (its group, whether new)."""
        g = self._gid_of.get(key)
        new = g is None
        if g is None:
            g = self._gid_of[key] = self.n
            self._key.append(key)
            self.n += 1
            self.live += 1
            if self.n > len(self.head) or iid >= len(self.of):
                self._room(iid + 1)
            self.checked[g] = checked
        elif iid >= len(self.of):
            self._room(iid + 1)
        h = int(self.head[g])
        self.nxt[iid], self.prv[iid], self.of[iid] = h, -1, g
        if h >= 0:
            self.prv[h] = iid
        self.head[g] = iid
        self.size[g] += 1
        self.valid[g] = self.fresh[g] = False
        self.entries += 1
        self.changed += 1
        return g, new

    def _room(self, end: int) -> None:
        self.head = _grown(self.head, self.n, -1)
        self.size = _grown(self.size, self.n, 0)
        self.checked = _grown(self.checked, self.n, False)
        self.code = _grown(self.code, self.n, -1)
        self.valid = _grown(self.valid, self.n, False)
        self.start = _grown(self.start, self.n, 0)
        self.stop = _grown(self.stop, self.n, 0)
        self.fresh = _grown(self.fresh, self.n, False)
        self.of = _grown(self.of, end, -1)
        self.nxt = _grown(self.nxt, end, -1)
        self.prv = _grown(self.prv, end, -1)

    def leave(self, iid: int) -> int:
        """Entry `iid` leaves its group: the group's id if that left it empty (its box is to
        go from the trees; the key is free again), else -1."""
        gone = self.leave_many(np.array([iid], dtype=np.int64))
        return int(gone[0]) if len(gone) else -1

    def leave_many(self, iids: Ints) -> Ints:
        """`leave` for many entries: the groups they left empty."""
        gone = _unlink(iids, self.head, self.nxt, self.prv, self.of, self.size, self.valid, self.fresh)
        self.entries -= len(iids)
        self.changed += len(iids)
        self.live -= len(gone)
        for g in gone.tolist():
            del self._gid_of[self._key[g]]
            self._key[g] = None
        return gone

    def ready(self, queue: npt.NDArray[np.int32]) -> None:
        """The flat copy made again if more than an eighth of the entries (and `flat_min`)
        changed; `queue`: internal id -> queue code (an entry's never changes)."""
        if self.changed > max(self.flat_min, self.entries // 8):
            self.flat = _flatten(self.n, self.entries, self.head, self.nxt, self.start, self.stop, self.fresh)
            self.flat_queue = queue[self.flat]
            self.changed = 0

    def expand(self, gids: Ints, counts: Ints, queue: npt.NDArray[np.int32]) -> tuple[Ints, Ints]:
        """A walk's groups by point (gids, counts per point) as their members by point."""
        if self.entries == self.live:  # a member each: no list to walk
            return self.head[gids], counts
        self.ready(queue)
        return _expand(gids, counts, self.head, self.nxt, self.size, self.start, self.stop, self.flat, self.fresh)

    def members(self, gids: Ints) -> tuple[Ints, Ints]:
        """The members of groups `gids`: (internal ids, the index in `gids` of each one's group)."""
        return _members(gids, self.head, self.nxt, self.size)


@compiled
def _flatten(n: int, entries: int, head: Ints, nxt: Ints, start: Ints, stop: Ints,
             fresh: npt.NDArray[np.bool_]) -> Ints:
    """Every group's members, group after group; each group fresh."""
    flat = np.empty(entries, dtype=np.int64)
    k = 0
    for g in range(n):
        start[g] = k
        i = head[g]
        while i >= 0:
            flat[k] = i
            k += 1
            i = nxt[i]
        stop[g] = k
        fresh[g] = True
    return flat


@compiled
def _link(iids: Ints, gids: Ints, head: Ints, nxt: Ints, prv: Ints, of: Ints, size: Ints,
          valid: npt.NDArray[np.bool_], fresh: npt.NDArray[np.bool_]) -> None:
    for j in range(len(iids)):
        i, g = iids[j], gids[j]
        h = head[g]
        nxt[i], prv[i], of[i] = h, -1, g
        if h >= 0:
            prv[h] = i
        head[g] = i
        size[g] += 1
        valid[g] = fresh[g] = False


@compiled
def _unlink(iids: Ints, head: Ints, nxt: Ints, prv: Ints, of: Ints, size: Ints, valid: npt.NDArray[np.bool_],
            fresh: npt.NDArray[np.bool_]) -> Ints:
    """Each entry out of its group's list; the groups left empty."""
    gone = np.empty(len(iids), dtype=np.int64)
    n = 0
    for i in iids:
        g, p, q = of[i], prv[i], nxt[i]
        if p >= 0:
            nxt[p] = q
        else:
            head[g] = q
        if q >= 0:
            prv[q] = p
        of[i] = nxt[i] = prv[i] = -1
        size[g] -= 1
        valid[g] = fresh[g] = False
        if size[g] == 0:
            gone[n] = g
            n += 1
    return gone[:n]


@compiled
def _expand(gids: Ints, counts: Ints, head: Ints, nxt: Ints, size: Ints, start: Ints, stop: Ints, flat: Ints,
            fresh: npt.NDArray[np.bool_]) -> tuple[Ints, Ints]:
    total = 0
    for g in gids:
        total += size[g]
    out = np.empty(total, dtype=np.int64)
    per = np.zeros(len(counts), dtype=np.int64)
    j = n = 0
    for m in range(len(counts)):
        for _ in range(counts[m]):
            g = gids[j]
            if fresh[g]:
                for x in range(start[g], stop[g]):
                    out[n] = flat[x]
                    n += 1
            else:
                i = head[g]
                while i >= 0:
                    out[n] = i
                    n += 1
                    i = nxt[i]
            j += 1
        per[m] = n
    for m in range(len(counts) - 1, 0, -1):
        per[m] -= per[m - 1]
    return out[:n], per


@compiled
def _members(gids: Ints, head: Ints, nxt: Ints, size: Ints) -> tuple[Ints, Ints]:
    total = 0
    for g in gids:
        total += size[g]
    out = np.empty(total, dtype=np.int64)
    row = np.empty(total, dtype=np.int64)
    n = 0
    for j in range(len(gids)):
        i = head[gids[j]]
        while i >= 0:
            out[n], row[n] = i, j
            n += 1
            i = nxt[i]
    return out[:n], row[:n]
