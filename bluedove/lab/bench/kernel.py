"""`bluedove bench kernel`: one core's matching rate on each message's least-loaded candidate set; exact or exit 1.

A typed workload (`orders`), `--vs` and `--boxes-vs-subs` run the matcher's whole path instead:
bluedove/lab/bench/kernel_typed.py, bluedove/lab/bench/kernel_boxes.py; `--adds`, a set's
subscribing and unsubscribing: bluedove/lab/bench/kernel_churn.py."""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

import numba
import numpy as np

from bluedove.core.partition.segments import equal_partition
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags, add_workload_flags, report
from bluedove.lab.bench.kernel_sets import Partitioned, build_partitioned, choose, set_groups
from bluedove.lab.workloads import Workload, brute_force
from bluedove.lab.workloads.paper import get as get_workload
from bluedove.matcher import index as index_mod
from bluedove.matcher import packed as packed_mod
from bluedove.matcher.index import SubscriptionSet


def match_partitioned(p: Partitioned, points: np.ndarray):
    """Choose, group by (matcher, dimension) set, one match_ids call per group.
    Returns [(message rows, ids, counts)] per group and the matches per message."""
    k = points.shape[1]
    counts = np.empty(len(points), dtype=np.int64)
    groups = []
    for rows, g in set_groups(p, points):
        ids, c = p.sets[g // k][g % k].match_ids(points[rows])
        counts[rows] = c
        groups.append((rows, g, ids, c))
    return groups, counts


def _timed(fns: list, repeat: int) -> tuple[list[list[float]], list]:
    """Run each function `repeat` times, interleaved (so a noisy neighbour hurts all alike):
    the wall times of each, and each one's last result."""
    times: list[list[float]] = [[] for _ in fns]
    outs: list = [None] * len(fns)
    for _ in range(repeat):
        for j, fn in enumerate(fns):
            t0 = time.perf_counter()
            outs[j] = fn()
            times[j].append(time.perf_counter() - t0)
    return times, outs


def _verify(w: Workload, p: Partitioned, full: SubscriptionSet, points: np.ndarray) -> list[str]:
    """Compare both paths with the brute-force oracle on `points`; a list of discrepancies."""
    errors = []
    expected = brute_force(w.lows, w.highs, points)
    groups, _ = match_partitioned(p, points)
    got_part: dict[int, list[int]] = {}
    k = points.shape[1]
    for rows, g, ids, c in groups:
        names = p.sets[g // k][g % k].sub_ids
        pos = 0
        for r, n in zip(rows.tolist(), c.tolist()):
            got_part[r] = sorted(int(names[x]) for x in ids[pos:pos + n].tolist())
            pos += n
    ids, c = full.match_ids(points)
    pos = 0
    for r, n in enumerate(c.tolist()):
        want = expected[r].tolist()
        got_full = sorted(int(full.sub_ids[x]) for x in ids[pos:pos + n].tolist())
        pos += n
        for label, got in (("partitioned", got_part.get(r, [])), ("full replication", got_full)):
            if got != want:
                extra, missing = sorted(set(got) - set(want))[:5], sorted(set(want) - set(got))[:5]
                errors.append(f"{label}: point {points[r].tolist()} gave {len(got)} matches, oracle {len(want)}"
                              f" (extra {extra}, missing {missing})")
    return errors


def _check_points(w: Workload, points: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """A sample of the messages plus points exactly on subscriptions' lows and (inside the space) highs."""
    sample = points[rng.choice(len(points), size=min(n, len(points)), replace=False)]
    subs = rng.choice(w.n_subs, size=min(n // 4 + 1, w.n_subs), replace=False)
    on_low = w.lows[subs].copy()
    on_high = w.highs[subs].copy()
    maxs = np.array([d.max for d in w.space.dimensions])
    on_high = np.where(on_high < maxs, on_high, on_low)  # a high on the space's max is not a message
    return np.vstack([sample, on_low, on_high])


def add_parser(sub) -> None:
    p = sub.add_parser("kernel", help=BENCHES["kernel"])
    add_workload_flags(p, variants=True)
    p.add_argument("--partitions", type=int, default=20, help="matchers the space is cut for")
    p.add_argument("--messages", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=5, help="timed runs; the best is reported with the spread")
    p.add_argument("--verify", type=int, default=200, help="messages checked against brute force")
    p.add_argument("--vs", default=None, metavar="WORKLOAD[,...]",
                   help="time the matcher's whole path (walk, filters' check, count) on these workloads too, "
                        "interleaved with --workload's in the same run (orders, paper, sparse)")
    p.add_argument("--boxes-vs-subs", type=int, default=None, metavar="N",
                   help="one filter of N boxes (an `in` of N values) against N one-box subscriptions of the "
                        "same boxes, on the same messages and path")
    p.add_argument("--adds", type=int, default=None, metavar="N",
                   help="instead: N subscriptions added to one set after its bulk load (in calls of --add-batch), "
                        "matched with them pending, then removed one at a time: µs per add and removal")
    p.add_argument("--add-batch", type=int, default=16, help="subscriptions per add call with --adds (default 16)")
    add_output_flags(p)
    p.set_defaults(func=run_bench)


def _workload(args: argparse.Namespace) -> Workload | None:
    """The workload of the flags; None after saying why on stderr."""
    if args.messages < 1 or args.partitions < 1:
        print("bench: --messages and --partitions must be at least 1", file=sys.stderr)
        return None
    params = {key: getattr(args, key, None) for key in ("sigma", "adverse", "dims", "n_subs")}
    try:
        return get_workload(args.workload, seed=args.seed, **params)
    except (ValueError, TypeError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return None


def _not_exact(errors: list[str], points: np.ndarray, counts: np.ndarray, full_counts: np.ndarray) -> bool:
    """Say on stderr what differs from brute force or full replication; True if anything does."""
    if not np.array_equal(counts, full_counts):
        bad = np.flatnonzero(counts != full_counts)
        errors.append(f"{len(bad)} messages have different match counts partitioned vs full replication,"
                      f" first {points[bad[0]].tolist()}: {counts[bad[0]]} vs {full_counts[bad[0]]}")
    if errors:
        print("bench kernel: MATCHING IS NOT EXACT", file=sys.stderr)
        for e in errors[:20]:
            print("  " + e, file=sys.stderr)
    return bool(errors)


def run_bench(args: argparse.Namespace) -> int:
    if getattr(args, "adds", None) is not None:
        from bluedove.lab.bench.kernel_churn import run_churn
        return run_churn(args)
    if getattr(args, "boxes_vs_subs", None) is not None:
        from bluedove.lab.bench.kernel_boxes import run_boxes
        return run_boxes(args)
    if args.workload == "orders" or getattr(args, "vs", None):
        from bluedove.lab.bench.kernel_typed import run_typed  # it builds on this module
        return run_typed(args)
    w = _workload(args)
    if w is None:
        return 2
    repeat = max(1, getattr(args, "repeat", 5) or 5)
    # messages from an independent stream of the same seed (not the subscriptions' stream)
    points = w.sample(args.messages, np.random.default_rng([args.seed, 1]))
    table = equal_partition(w.space, {f"m{j}": "" for j in range(args.partitions)})
    sub_ids = [str(n) for n in range(w.n_subs)]
    queues = [f"q{q}" for q in w.queue_of.tolist()]

    t0 = time.perf_counter()
    part = build_partitioned(w, table, sub_ids, queues)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    full = SubscriptionSet(w.space.k)
    full.add_many(sub_ids, queues, w.lows, w.highs)
    full_build_s = time.perf_counter() - t0

    check = _check_points(w, points, getattr(args, "verify", 200) or 200, np.random.default_rng([args.seed, 2]))
    errors = _verify(w, part, full, check)
    (part_times, full_times), ((groups, counts), (_, full_counts)) = _timed(
        [lambda: match_partitioned(part, points), lambda: full.match_ids(points)], repeat)
    if _not_exact(errors, points, counts, full_counts):
        return 1

    member, dim = choose(part, points)
    n = len(points)
    rate = sorted(n / t for t in part_times)
    full_rate = sorted(n / t for t in full_times)
    result = {
        "workload": w.name, "kind": "kernel", "partitions": args.partitions, "dims": w.space.k,
        "subscriptions": w.n_subs, "messages": n, "seed": args.seed, "repeat": repeat,
        "msgs_per_s": round(rate[-1]), "msgs_per_s_median": round(statistics.median(rate)),
        "msgs_per_s_worst": round(rate[0]),
        "matches_per_msg": round(float(counts.mean()), 2),
        "set_size_searched": round(float(part.sizes[member, dim].mean()), 1),
        "set_size_mean": round(float(part.sizes.mean()), 1), "set_size_max": int(part.sizes.max()),
        "groups": len(groups), "build_s": round(build_s, 3),
        "full_msgs_per_s": round(full_rate[-1]), "full_msgs_per_s_median": round(statistics.median(full_rate)),
        "full_build_s": round(full_build_s, 3), "speedup_vs_full": round(rate[-1] / full_rate[-1], 2),
        "verified_points": len(check),
        "exact": True,
        "index": {"packed_capacity": packed_mod.CAPACITY, "bulk_min": index_mod.BULK_MIN,
                  "delta_min": index_mod.DELTA_MIN, "ratio": index_mod.RATIO},
        "numba": numba.__version__, "python": platform.python_version(),
        "machine": platform.machine(),
    }
    report(result, args.json, _print_table)
    return 0


def _print_table(r: dict) -> None:
    rows = [
        ("workload", f"{r['workload']}  ({r['subscriptions']} subs, {r['dims']} dims, seed {r['seed']})"),
        ("partitions", f"{r['partitions']} matchers x {r['dims']} sets, {r['groups']} searched"),
        ("messages", f"{r['messages']}, best of {r['repeat']} runs"),
        ("matching rate", f"{r['msgs_per_s']:,} msg/s  (median {r['msgs_per_s_median']:,},"
                          f" worst {r['msgs_per_s_worst']:,})"),
        ("matches / msg", f"{r['matches_per_msg']}"),
        ("set searched", f"{r['set_size_searched']:,} subs on average (all sets: mean {r['set_size_mean']:,},"
                         f" max {r['set_size_max']:,})"),
        ("build", f"{r['build_s']} s for all sets"),
        ("full replication", f"{r['full_msgs_per_s']:,} msg/s  (median {r['full_msgs_per_s_median']:,}),"
                             f" one set of {r['subscriptions']:,}, built in {r['full_build_s']} s"),
        ("ratio", f"{r['speedup_vs_full']}x full replication"),
        ("exactness", f"checked against brute force on {r['verified_points']} points: exact"),
        ("index", ", ".join(f"{k}={v}" for k, v in r["index"].items())),
    ]
    width = max(len(a) for a, _ in rows)
    for a, b in rows:
        print(f"{a:<{width}}  {b}")
