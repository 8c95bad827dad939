"""The matchers' subscription sets agree with the brute-force oracle through table changes.

A pure model of a cluster at the level of the matchers' index (bluedove/matcher/sets.py over
bluedove/matcher/index.py and its packed trees, with pack thresholds small enough that packs happen
mid-sequence): subscriptions are added and removed, members join by a split, leave or die
(merge-out: a takeover), and the hand-off is done as the matchers do it (a taker builds the
grown dimensions' sets from its own rows plus the old owner's export of the added range, or
from the catalogue when there is no single old owner; a shrunk member keeps its sets through
the grace, then trims them from the catalogue). After every step, for every dimension, the
point's owner on that dimension answers exactly what the oracle does, and so does a shrunk
member still in its grace for values of its old range (dispatchers on the old table).

Values come from a grid that holds the segment cuts, the space's min and max, split points,
their neighbouring doubles, and zero-width-ish ranges [a, nextafter(a)).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bluedove.core.partition.segments import SegmentTable, equal_partition, gained, grown, merge_out, split
from bluedove.core.space import Dimension, Space
from bluedove.matcher.index import PackThresholds, SubscriptionSet
from bluedove.matcher.sets import SubscriptionSets

K = 2
LO, HI = 0.0, 1000.0
SPACE = Space(tuple(Dimension(f"x{i}", LO, HI) for i in range(K)))
SMALL = PackThresholds(bulk_min=3, delta_min=2, ratio=2)  # packs every few changes
BASE = [LO, 125.0, 250.0, 333.25, 500.0, 625.0, 750.0, 875.5, HI]  # equal cuts of 2, 4 and 8 members and more
GRID = sorted({v for b in BASE for v in (b, math.nextafter(b, -math.inf), math.nextafter(b, math.inf))
               if LO <= v <= HI})
VALUES = st.one_of(st.sampled_from(GRID), st.floats(LO, HI, allow_nan=False))


def _within(mine: dict, held: dict) -> bool:
    return all(i in held and held[i][0] <= lo and hi <= held[i][1] for i, (lo, hi) in mine.items())


def new_sets(member: str, table: SegmentTable) -> SubscriptionSets:
    s = SubscriptionSets(member, table)
    s.sets = [SubscriptionSet(K, SMALL) for _ in range(K)]
    return s


class Model:
    def __init__(self, n: int) -> None:
        self.table = equal_partition(SPACE, {f"m{j}": f"h:{j}" for j in range(n)})
        self.sets = {m: new_sets(m, self.table) for m in self.table.members}
        self.catalogue: dict[str, tuple[list[float], list[float]]] = {}
        self.graces: dict[str, SegmentTable] = {}  # shrunk member -> the table it still serves
        self.next_member = n

    # -- subscriptions -----------------------------------------------------------------------
    def add(self, sid: str, lows: list[float], highs: list[float]) -> None:
        if any(not a < b for a, b in zip(lows, highs)):
            return
        self.catalogue[sid] = (lows, highs)
        for s in self.sets.values():  # the owners directly, the rest through the catalogue tail
            s.add(sid, "q", lows, highs)

    def remove(self, sid: str) -> None:
        self.catalogue.pop(sid, None)
        for s in self.sets.values():
            s.remove(sid, now=0.0)

    def _catalogue_rows(self):
        ids = list(self.catalogue)
        lows = np.array([self.catalogue[i][0] for i in ids], dtype=np.float64).reshape(-1, K)
        highs = np.array([self.catalogue[i][1] for i in ids], dtype=np.float64).reshape(-1, K)
        return ids, ["q"] * len(ids), lows, highs

    def from_catalogue(self, member: str, table: SegmentTable, old: SubscriptionSets | None) -> SubscriptionSets:
        new = new_sets(member, table)
        if old is not None:
            new.carry_removals(old)
        new.add_rows(*self._catalogue_rows())
        return new

    # -- table changes -------------------------------------------------------------------------
    def change(self, new: SegmentTable, dead: set[str] = frozenset()) -> None:
        old = self.table
        takers = grown(old, new)
        built = {}
        for t, ranges in takers.items():
            mine = self.sets.get(t)
            if mine is not None and _within(new.segments_of(t), mine.segments):
                continue  # it still holds all of it (a shrunk range in its grace): no load
            if mine is None:
                mine = new_sets(t, old)
                mine.segments = {}
            sources = self._sources(old, new, t, ranges, set(takers) | dead)
            built[t] = self._handoff(t, new, mine, sources) if sources is not None else \
                self.from_catalogue(t, new, mine)
        for m in dead | (set(old.members) - set(new.members)):
            self.sets.pop(m, None)
            self.graces.pop(m, None)
        self.sets.update(built)
        for m in new.members:
            if m in built:
                self.graces.pop(m, None)
            elif self.sets[m].segments != new.segments_of(m):
                self.graces.setdefault(m, old)  # keeps its sets (a superset) until the trim
        self.table = new

    def _sources(self, old, new, taker, ranges, busy):
        """(dim, old owner, low, high) per range the taker gains; None when one has no single
        live old owner that is not itself taking (the catalogue then), as the coordinator decides."""
        out = []
        for i, owners, a, b in gained(old, taker, ranges):
            if len(owners) != 1 or next(iter(owners)) in busy:
                return None
            out.append((i, next(iter(owners)), a, b))
        return out

    def _handoff(self, taker, new, mine, sources) -> SubscriptionSets:
        """matcher/handoff.load_from_owners: grown dimensions from our rows plus the exports."""
        grown_dims = {d for d, *_ in sources}
        out = new_sets(taker, new)
        out.carry_removals(mine)
        for i in range(K):
            if i not in grown_dims:
                out.sets[i] = mine.sets[i]
                continue
            ids, queues, lows, highs = mine.sets[i].export(i, -math.inf, math.inf)
            ids, queues, lows_l, highs_l = list(ids), list(queues), [lows], [highs]
            for d, src, a, b in sources:
                if d == i:
                    e = self.sets[src].sets[i].export(i, a, b)
                    ids += e[0]
                    queues += e[1]
                    lows_l.append(e[2])
                    highs_l.append(e[3])
            out.add_rows(ids, queues, np.concatenate(lows_l), np.concatenate(highs_l), dims={i})
        return out

    def join(self, at: list[float]) -> None:
        """Split: on each dimension the owner of `at[i]` is cut there (when strictly inside)."""
        cut = {}
        for i, v in enumerate(at):
            owner = self.table.owner_at(i, v)
            lo, hi = self.table.segments_of(owner)[i]
            if not lo < v < hi:
                return
            cut[i] = (owner, v)
        name = f"m{self.next_member}"
        self.next_member += 1
        self.change(split(self.table, name, f"h:{name}", cut))

    def leave(self, member: str, dead: bool) -> None:
        if len(self.table.members) < 2:
            return
        self.change(merge_out(self.table, {member}), dead={member} if dead else set())

    def trim(self, member: str) -> None:
        if self.graces.pop(member, None) is not None:
            self.sets[member] = self.from_catalogue(member, self.table, self.sets[member])

    # -- the check -----------------------------------------------------------------------------
    def oracle(self, p) -> set[str]:
        return {s for s, (lo, hi) in self.catalogue.items() if all(a <= v < b for a, v, b in zip(lo, p, hi))}

    def check(self, points: list[list[float]]) -> None:
        for p in points:
            want = self.oracle(p)
            for i in range(K):
                askers = [(self.table, self.table.owner_at(i, p[i]))]
                askers += [(t, m) for m, t in self.graces.items() if t.owner_at(i, p[i]) == m]
                for k, (table, m) in enumerate(askers):
                    s = self.sets[m]
                    if k and not s.owns(i, p[i]):
                        continue  # it refuses the value (the dispatcher tries another candidate): fine
                    assert s.owns(i, p[i]), f"{m} (epoch {table.epoch}) does not hold {p[i]} of dimension {i}"
                    got = {x for ids in s.sets[i].match_batch(np.array([p]))[0].values() for x in ids}
                    assert got == want, (f"{m}'s set {i} at epoch {self.table.epoch} for {p}: "
                                         f"missing {sorted(want - got)}, extra {sorted(got - want)}")


# -- strategies ------------------------------------------------------------------------------------
@st.composite
def bounds(draw):
    lows, highs = [], []
    for _ in range(K):
        kind = draw(st.sampled_from(["range", "range", "wild", "thin"]))
        if kind == "wild":
            a, b = LO, HI
        elif kind == "thin":
            a = draw(VALUES.filter(lambda v: v < HI))
            b = math.nextafter(a, math.inf)
        else:
            a, b = sorted((draw(VALUES), draw(VALUES)))
        lows.append(a)
        highs.append(b)
    return lows, highs


OPS = st.one_of(
    st.tuples(st.just("add"), bounds()),
    st.tuples(st.just("add"), bounds()),
    st.tuples(st.just("remove"), st.integers(0, 200)),
    st.tuples(st.just("join"), st.lists(VALUES, min_size=K, max_size=K)),
    st.tuples(st.just("leave"), st.integers(0, 20), st.booleans()),
    st.tuples(st.just("trim"), st.integers(0, 20)),
)
POINTS = st.lists(st.lists(VALUES.filter(lambda v: v < HI), min_size=K, max_size=K), min_size=1, max_size=8)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.integers(1, 4), st.lists(st.tuples(OPS, POINTS), min_size=1, max_size=30))
def test_sets_agree_with_the_oracle_through_table_changes(n, steps):
    model = Model(n)
    made = 0
    for op, points in steps:
        if op[0] == "add":
            model.add(f"s{made}", *op[1])
            made += 1
        elif op[0] == "remove" and made:
            model.remove(f"s{op[1] % made}")
        elif op[0] == "join":
            model.join(op[1])
        elif op[0] == "leave":
            members = sorted(model.table.members)
            model.leave(members[op[1] % len(members)], dead=op[2])
        elif op[0] == "trim" and model.graces:
            model.trim(sorted(model.graces)[op[1] % len(model.graces)])
        cuts = [[c, math.nextafter(c, -math.inf)] for i in range(K) for c in model.table.cuts[i][1:]]
        edges = [[b] * K for b in (LO, math.nextafter(HI, -math.inf))] + [[c[0]] * K for c in cuts] + \
            [[c[1]] * K for c in cuts]
        model.check(points + edges)


@settings(max_examples=150, deadline=None)
@given(bounds(), st.lists(st.lists(VALUES.filter(lambda v: v < HI), min_size=K, max_size=K), min_size=1,
                          max_size=6), st.integers(0, 2))
def test_any_pair_agrees_live_packed_and_after_removal(box, points, fillers):
    """One subscription among a few others, asked while it sits in the buffer of recent boxes,
    once packed into a tree, once removed (masked in that tree), and added again."""
    lows, highs = box
    s = SubscriptionSet(K, SMALL)
    want = [all(a <= v < b for a, v, b in zip(lows, p, highs)) for p in points]

    def check(present: bool) -> None:
        for p, w in zip(points, want):
            got = {x for ids in s.match_batch(np.array([p]))[0].values() for x in ids}
            assert ("t" in got) == (w and present), f"{box} at {p}: got {sorted(got)}"

    for j in range(fillers):
        s.add(f"f{j}", "q", [LO] * K, [GRID[j + 1]] * K)
    if not s.add("t", "q", lows, highs):
        assert any(not a < b for a, b in zip(lows, highs))
        return
    check(True)
    for j in range(fillers, fillers + 4):  # enough to pack "t" with them
        s.add(f"f{j}", "q", [GRID[j]] * K, [HI] * K)
    assert "t" in s and any(s._by_id["t"] in t.ids for t in s._levels.trees)
    check(True)
    s.remove("t")
    check(False)
    s.add_many(["t"], ["q"], np.array([lows]), np.array([highs]))
    check(True)
