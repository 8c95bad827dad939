"""`bench kernel` on the matcher's whole path: the index walk, then the check of filters after it
(bluedove/matcher/group_match.py, reading each message's stored body as a matcher
does), then the count a matcher makes (`Directory.matches`). `--workload orders` (a typed space,
docs/workloads.md), `--vs paper` (another workload beside it, timed interleaved in the same
run), `--boxes-vs-subs N` (one filter of N boxes against N one-box subscriptions).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bluedove.core.attributes import NUMBER
from bluedove.core.model import build_subscription
from bluedove.core.partition.segments import equal_partition
from bluedove.core.space import Space
from bluedove.core.wire import Part, bodies, body_template, typed_bodies
from bluedove.lab.bench.base import report
from bluedove.lab.bench.kernel_sets import Partitioned, build_partitioned, choose, set_groups
from bluedove.lab.workloads import Workload
from bluedove.lab.workloads import orders as orders_mod
from bluedove.lab.workloads.paper import get as get_paper
from bluedove.lab.workloads.typed import TypedWorkload, matching
from bluedove.matcher.filter_book import FilterBook, reader
from bluedove.matcher.index import SubscriptionSet

SUBS_PER_QUEUE = 10  # orders: queues of 10 subscriptions, as its default of 10,000 in 1,000


@dataclass
class Prepared:
    """A workload as the timed path takes it: one row per index entry (a plain subscription, or a
    box of a filter keyed `<id>#<i>`), the book of filters, and the messages as one `Part`."""

    name: str
    n_subs: int
    rows: Workload  # the rows' bounds (lows, highs) in the workload's space
    keys: list[str]
    queues: list[str]
    book: FilterBook | None
    points: np.ndarray
    part: Part
    attributes: list[dict[str, Any]] | None  # typed messages' attributes (the oracle's input)
    typed: TypedWorkload | None


class _Rows:
    """Some messages of a `Part`, picked by row: what the check reads of a part (n, body(i))."""

    def __init__(self, part: Part, rows: np.ndarray) -> None:
        self.part, self.rows, self.n = part, rows, len(rows)

    def body(self, i: int) -> bytes:
        return self.part.body(int(self.rows[i]))


def _part(points: np.ndarray, body_list: list[bytes]) -> Part:
    ends = np.fromiter(map(len, body_list), dtype=np.int64, count=len(body_list)).cumsum().astype(np.uint32)
    no_ids = np.zeros(len(body_list), dtype=np.uint32)  # the path reads no message id
    return Part(0, points, b"", no_ids, b"".join(body_list), ends, np.zeros(len(body_list), dtype=bool))


def attributes_text(attrs: dict[str, Any], space: Space) -> bytes:
    """A typed message's attributes as its stored body holds them (docs/design.md, "Typed
    attributes"): in the space's order, numbers as doubles."""
    return json.dumps({a.name: float(attrs[a.name]) if a.type == NUMBER else attrs[a.name]
                       for a in space.schema if a.name in attrs}, separators=(",", ":")).encode()


def typed_messages(space: Space, attrs: list[dict[str, Any]]) -> tuple[np.ndarray, Part]:
    """Messages' points (their partition attributes' coordinates) and stored bodies."""
    by = [space.by_name[d.name] for d in space.dimensions]
    points = np.array([[a.coordinate(m.get(a.name)) for a in by] for m in attrs], dtype=np.float64)
    points = points.reshape(len(attrs), space.k)
    ids = [b"%032x" % i for i in range(len(attrs))]
    texts = [attributes_text(m, space) for m in attrs]
    return points, _part(points, typed_bodies(ids, texts, [b"null"] * len(attrs), b"2026-01-01T00:00:00Z"))


def rows_of(space: Space, predicates: list[dict[str, Any]], queue_of: np.ndarray,
            ) -> tuple[Workload, list[str], list[str], FilterBook]:
    """Every subscription's index rows as a matcher files them, its filter in a book."""
    book = FilterBook(space)
    keys: list[str] = []
    queues: list[str] = []
    lows: list[tuple[float, ...]] = []
    highs: list[tuple[float, ...]] = []
    for j, preds in enumerate(predicates):
        sub = build_subscription(str(j), f"q{int(queue_of[j])}", preds, space)
        book.learn(sub)
        for key, lo, hi in sub.rows():
            keys.append(key)
            queues.append(sub.queue)
            lows.append(lo)
            highs.append(hi)
    lo_a = np.array(lows, dtype=np.float64).reshape(-1, space.k)
    hi_a = np.array(highs, dtype=np.float64).reshape(-1, space.k)
    rows = Workload("rows", space, lo_a, hi_a, np.zeros(len(keys), dtype=np.int64), 1, lambda n, rng: lo_a[:0])
    return rows, keys, queues, book


def prepare(name: str, n_subs: int | None, messages: int, seed: int) -> Prepared:
    """`orders` or `paper`/`sparse` (docs/workloads.md) with its messages, ready for the path."""
    rng = np.random.default_rng([seed, 1])
    if name == "orders":
        n = n_subs or 10_000
        return prepare_typed(orders_mod.get(seed=seed, n_subs=n, n_queues=max(1, n // SUBS_PER_QUEUE)), messages, seed)
    w = get_paper(name, seed=seed, n_subs=n_subs)
    pts = w.sample(messages, rng)
    ids = [b"%032x" % i for i in range(len(pts))]
    part = _part(pts, bodies(body_template(w.space.names), ids, pts, [b"null"] * len(pts), b"2026-01-01T00:00:00Z"))
    keys = [str(j) for j in range(w.n_subs)]
    return Prepared(w.name, w.n_subs, w, keys, [f"q{q}" for q in w.queue_of.tolist()], None, pts, part, None, None)


def prepare_typed(tw: TypedWorkload, messages: int, seed: int) -> Prepared:
    rows, keys, queues, book = rows_of(tw.space, tw.predicates, tw.queue_of)
    attrs = tw.sample(messages, np.random.default_rng([seed, 1]))
    points, part = typed_messages(tw.space, attrs)
    return Prepared(tw.name, tw.n_subs, rows, keys, queues, book, points, part, attrs, tw)


def typed_rate(tw: TypedWorkload, matchers: int, seed: int, n: int) -> tuple[float, float]:
    """`bench e2e`'s kernel of a typed workload: (msg/s on one core, CPU µs per message by
    thread time) on the matcher's whole path, each the best of 3."""
    p = prepare_typed(tw, n, seed)
    part = partitioned(p, matchers)
    best = best_cpu = np.inf
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.thread_time()
        run_partitioned(part, p.points, p.part)
        best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, time.thread_time() - c0)
    return n / best, best_cpu * 1e6 / n


def partitioned(p: Prepared, partitions: int) -> Partitioned:
    """mPartition's sets of `partitions` matchers, each holding the book (as a matcher's sets do)."""
    table = equal_partition(p.rows.space, {f"m{j}": "" for j in range(partitions)})
    return build_partitioned(p.rows, table, p.keys, p.queues, p.book)


def full_set(p: Prepared) -> SubscriptionSet:
    s = SubscriptionSet(p.rows.space.k)
    s.book = p.book
    s.add_many(p.keys, p.queues, p.rows.lows, p.rows.highs)
    return s


def on_set(s: SubscriptionSet, points: np.ndarray, parts: list, ids: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A matcher's path on one set (bluedove/matcher/queues.py `_match`, counting): the walk,
    the filters' check, the count of matches and deliveries: (no ids, counts); `ids`: the
    entries matched instead of the count (ids, counts), for the check against the oracle."""
    if ids:
        return s.match(points, reader(parts))
    m = s.count(points, reader(parts))
    return _NO_IDS, m.counts


_NO_IDS = np.zeros(0, dtype=np.int64)


def run_partitioned(p: Partitioned, points: np.ndarray, part: Part, ids: bool = False) -> tuple[list, np.ndarray]:
    """Each message to its least-loaded candidate's set (as `bench kernel`), one path call per
    set: [(rows, set key, ids, counts)] (`on_set`) and the matches per message."""
    k = points.shape[1]
    counts = np.empty(len(points), dtype=np.int64)
    groups = []
    for rows, g in set_groups(p, points):
        got, c = on_set(p.sets[g // k][g % k], points[rows], [_Rows(part, rows)], ids)
        counts[rows] = c
        groups.append((rows, g, got, c))
    return groups, counts


def verify(p: Prepared, part: Partitioned, full: SubscriptionSet, n: int) -> list[str]:
    """The first `n` messages through both paths against the oracle (typed: the core's exact
    check, `Filter.matches`; numeric: the boxes); a list of discrepancies."""
    pts = p.points[:n]
    sub = _part(pts, [p.part.body(i) for i in range(len(pts))])
    if p.typed is not None and p.attributes is not None:
        want = [sorted(map(str, r)) for r in matching(p.typed.filters(), p.attributes[:n])]
    else:
        ok = [np.nonzero(np.all((p.rows.lows <= x) & (x < p.rows.highs), axis=1))[0] for x in pts]
        want = [sorted(str(j) for j in r.tolist()) for r in ok]
    got_part: dict[int, list[str]] = {}
    k = pts.shape[1]
    for rows, g, ids, c in run_partitioned(part, pts, sub, ids=True)[0]:
        names, pos = part.sets[g // k][g % k].directory.sid, 0
        for r, m in zip(rows.tolist(), c.tolist()):
            got_part[r] = sorted(str(names[x]) for x in ids[pos:pos + m].tolist())
            pos += m
    ids, c = on_set(full, pts, [sub], ids=True)
    errors, pos = [], 0
    for r, m in enumerate(c.tolist()):
        got_full = sorted(str(full.directory.sid[x]) for x in ids[pos:pos + m].tolist())
        pos += m
        for label, got in (("partitioned", got_part.get(r, [])), ("full replication", got_full)):
            if got != want[r]:
                errors.append(f"{p.name} {label}: message {r} gave {len(got)} matches, oracle {len(want[r])}")
    return errors


def rates(n: int, times: list[float]) -> dict[str, int]:
    r = sorted(n / t for t in times)
    return {"best": round(r[-1]), "median": round(statistics.median(r)), "worst": round(r[0])}


def index_hits(part: Partitioned, points: np.ndarray) -> tuple[float, float]:
    """Index entries whose box holds each message (boxes of filters included), and the distinct
    boxes the walk meets for them (bluedove/matcher/groups.py): per message."""
    member, dim = choose(part, points)
    entries = boxes = 0
    for g in np.unique(member * points.shape[1] + dim).tolist():
        rows = np.flatnonzero(member * points.shape[1] + dim == g)
        s = part.sets[g // points.shape[1]][g % points.shape[1]]
        entries += int(s.match_ids(points[rows])[1].sum())
        boxes += len(s._walk(points[rows])[0])  # noqa: SLF001 (the walk alone, what the bench reports)
    n = max(len(points), 1)
    return round(entries / n, 2), round(boxes / n, 2)


def timed(fns: list, repeat: int) -> list[list[float]]:
    """Each function `repeat` times, interleaved (a noisy neighbour hurts all alike)."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for j, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[j].append(time.perf_counter() - t0)
    return times


def measure(names: list[str], n_subs: int | None, messages: int, partitions: int, seed: int, repeat: int,
            check: int) -> tuple[list[dict], list[str]]:
    """Each workload's figures on the whole path, timed interleaved; and any discrepancy."""
    preps = [prepare(name, n_subs, messages, seed) for name in names]
    built = []
    for p in preps:
        t0 = time.perf_counter()
        part = partitioned(p, partitions)
        built.append((part, full_set(p), time.perf_counter() - t0))
    errors = [e for p, (part, full, _) in zip(preps, built) for e in verify(p, part, full, check)]
    fns = []
    for p, (part, full, _) in zip(preps, built):
        fns += [lambda p=p, part=part: run_partitioned(part, p.points, p.part),
                lambda p=p, full=full: on_set(full, p.points, [p.part])]
    times = timed(fns, repeat)
    out = []
    for j, (p, (part, full, build_s)) in enumerate(zip(preps, built)):
        groups, counts = run_partitioned(part, p.points, p.part)
        _, full_counts = on_set(full, p.points, [p.part])
        if not np.array_equal(counts, full_counts):
            errors.append(f"{p.name}: match counts differ partitioned vs full replication")
        member, dim = choose(part, p.points)
        r, fr = rates(len(p.points), times[2 * j]), rates(len(p.points), times[2 * j + 1])
        out.append({"workload": p.name, "subscriptions": p.n_subs, "index_rows": len(p.keys),
                    "filters": len(p.book) if p.book is not None else 0, "dims": p.rows.space.k,
                    "msgs_per_s": r["best"], "msgs_per_s_median": r["median"], "msgs_per_s_worst": r["worst"],
                    "full_msgs_per_s": fr["best"], "full_msgs_per_s_median": fr["median"],
                    "matches_per_msg": round(float(counts.mean()), 2),
                    **dict(zip(("index_hits_per_msg", "boxes_walked_per_msg"), index_hits(part, p.points))),
                    "set_size_searched": round(float(part.sizes[member, dim].mean()), 1),
                    "groups": len(groups), "build_s": round(build_s, 3)})
    return out, errors


def run_typed(args: argparse.Namespace) -> int:
    """`bench kernel --workload orders` and/or `--vs NAME`: the whole path, each workload beside the others."""
    names = [args.workload] + [v for v in (args.vs or "").split(",") if v and v != args.workload]
    for name in names:
        if name not in ("orders", "paper", "sparse"):
            print(f"bench kernel: workload: expected orders, paper or sparse, got {name!r}", file=sys.stderr)
            return 2
    repeat = max(1, args.repeat or 5)
    check = min(args.verify or 50, args.messages)
    runs, errors = measure(names, args.n_subs, args.messages, args.partitions, args.seed, repeat, check)
    if errors:
        print("bench kernel: MATCHING IS NOT EXACT", file=sys.stderr)
        for e in errors[:20]:
            print("  " + e, file=sys.stderr)
        return 1
    first = runs[0]
    result = {**first, "kind": "kernel", "path": "walk+check+count", "partitions": args.partitions,
              "messages": args.messages, "seed": args.seed, "repeat": repeat, "verified_points": check,
              "exact": True, "runs": runs,
              # each other workload's best and median rate over the first's, same run
              "vs": {r["workload"]: {"over_first_best": round(r["msgs_per_s"] / first["msgs_per_s"], 2),
                                     "over_first_median": round(r["msgs_per_s_median"] / first["msgs_per_s_median"],
                                                                2)} for r in runs[1:]},
              "python": platform.python_version()}
    report(result, args.json, _print)
    return 0


def _print(r: dict) -> None:
    print(f"bench kernel, the matcher's path (walk + filters' check + count): {r['partitions']} matchers,"
          f" {r['messages']:,} messages, best / median / worst of {r['repeat']} interleaved runs")
    for x in r["runs"]:
        print(f"  {x['workload']}: {x['subscriptions']:,} subs ({x['index_rows']:,} index rows,"
              f" {x['filters']:,} filters): {x['msgs_per_s']:,} / {x['msgs_per_s_median']:,} /"
              f" {x['msgs_per_s_worst']:,} msg/s; full replication {x['full_msgs_per_s']:,};"
              f" {x['matches_per_msg']} matches/msg of {x['index_hits_per_msg']} index hits"
              f" ({x['boxes_walked_per_msg']} distinct boxes walked)")
    for name, v in r["vs"].items():
        print(f"  {name} / {r['workload']}: {v['over_first_best']}x best, {v['over_first_median']}x median")
    print(f"  exact on {r['verified_points']} messages (oracle: the core's check)")
