"""A set's answer as arrays (bluedove/matcher/matches.py) against brute force: per point the
subscriptions matched, the distinct queues (deliveries) and each delivery's ids, with queues
shared by several subscriptions or not, across live adds, bulk adds and removals; a run's
slices agree with the run; counting without the ids gives the same counts."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.matcher.index import NO_MATCH, PackThresholds, SubscriptionSet

K = 2
SMALL = PackThresholds(bulk_min=8, delta_min=4, ratio=4)  # packs happen mid-sequence


def brute(subs: dict[str, tuple[str, np.ndarray, np.ndarray]], point: np.ndarray) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for sid, (queue, lo, hi) in subs.items():
        if np.all(lo <= point) and np.all(point < hi):
            out.setdefault(queue, []).append(sid)
    return out


def norm(groups) -> dict[str, list[str]]:
    return {q: sorted(ids) for q, ids in groups.items()}


ops = st.lists(st.tuples(st.sampled_from(["add", "bulk", "remove"]), st.integers(0, 2**31)), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(ops=ops, n_queues=st.sampled_from([1, 3, 1000]), seed=st.integers(0, 2**31))
def test_matches_agree_with_brute_force(ops, n_queues, seed):
    rng = np.random.default_rng(seed)
    s = SubscriptionSet(K, thresholds=SMALL)
    subs: dict[str, tuple[str, np.ndarray, np.ndarray]] = {}
    next_id = 0

    def fresh(n):
        nonlocal next_id
        lows = rng.integers(0, 8, (n, K)).astype(np.float64)
        highs = lows + rng.integers(1, 6, (n, K))
        ids = [f"s{next_id + i}" for i in range(n)]
        next_id += n
        queues = [f"q{int(x)}" for x in rng.integers(0, n_queues, n)]
        return ids, queues, lows, highs

    for op, arg in ops:
        if op == "add":
            (sid,), (q,), lows, highs = fresh(1)
            assert s.add(sid, q, lows[0], highs[0])
            subs[sid] = (q, lows[0], highs[0])
        elif op == "bulk":
            ids, queues, lows, highs = fresh(1 + arg % 20)
            assert s.add_many(ids, queues, lows, highs) == len(ids)
            subs.update({i: (q, lo, hi) for i, q, lo, hi in zip(ids, queues, lows, highs)})
        elif subs:
            victim = sorted(subs)[arg % len(subs)]
            assert s.remove(victim)
            del subs[victim]
        live = Counter(q for q, _, _ in subs.values())
        assert s.directory.shared == sum(1 for c in live.values() if c >= 2)  # kept, not recounted

    points = rng.integers(0, 12, (40, K)).astype(np.float64)
    m = s.matches(points)
    want = [brute(subs, p) for p in points]
    assert m.counts.tolist() == [sum(map(len, w.values())) for w in want]
    assert m.fanout.tolist() == [len(w) for w in want]
    got: list[dict[str, list[str]]] = [{} for _ in points]
    for j, queue, ids in m.deliveries():
        assert queue not in got[j], "one delivery per (point, queue)"
        got[j][queue] = ids
    assert [norm(g) for g in got] == [norm(w) for w in want]
    at, queues, texts = m.delivery_rows()  # the columns the store writes
    assert [(j, q, json.loads(t)) for j, q, t in zip(at, queues, texts)] == list(m.deliveries())
    assert [norm(g) for g in s.match_batch(points)] == [norm(w) for w in want]
    assert all(g is NO_MATCH for g, w in zip(s.match_batch(points), want) if not w)

    counted = s.matches(points, deliveries=False)  # a matcher that only counts
    assert counted.counts.tolist() == m.counts.tolist() and counted.fanout.tolist() == m.fanout.tolist()

    cut = int(rng.integers(0, len(points) + 1))
    for lo, hi in ((0, cut), (cut, len(points))):
        part = m.part(lo, hi)
        assert part.counts.tolist() == m.counts[lo:hi].tolist()
        assert [norm(g) for g in part.as_dicts(NO_MATCH)] == [norm(w) for w in want[lo:hi]]


def test_delivery_texts_escape_ids_that_need_it():
    s = SubscriptionSet(K)
    odd = ['a"b', "c\\d", "e\nf", "plain"]
    for i, sid in enumerate(odd):
        s.add(sid, f"q{i}", [0.0, 0.0], [1.0, 1.0])  # queues of their own: one id per delivery
    s.add("shared", "q0", [0.0, 0.0], [1.0, 1.0])  # now q0 holds two: grouped deliveries
    _, queues, texts = s.matches(np.array([[0.5, 0.5]])).delivery_rows()
    assert sorted((q, sorted(json.loads(t))) for q, t in zip(queues, texts)) == [
        ("q0", sorted(['a"b', "shared"])), ("q1", ["c\\d"]), ("q2", ["e\nf"]), ("q3", ["plain"])]
    s.remove("shared")  # back to one id per delivery
    _, queues, texts = s.matches(np.array([[0.5, 0.5]])).delivery_rows()
    assert sorted((q, json.loads(t)) for q, t in zip(queues, texts)) == [
        ("q0", ['a"b']), ("q1", ["c\\d"]), ("q2", ["e\nf"]), ("q3", ["plain"])]
