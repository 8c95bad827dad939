"""`bench kernel --adds N`: what subscribing and unsubscribing cost one subscription set, and what
the boxes added since its bulk load cost its matching.

One set holds the workload's subscriptions (bulk loaded: one packed tree). N more, drawn from the
same workload with another seed, are added in calls of `--add-batch` (a matcher files a
subscribe call's subscriptions into each set in one call); the messages are then matched with
them pending (exact: checked against brute force), and they are removed one at a time. Matching
rates are the best of `--repeat` runs, interleaved with the set as it was before the adds and
with one set of the same subscriptions all packed:

- `pending_over_same`: a fresh copy of the set with the adds pending each run, as a matcher has
  it, packing itself anew when its queries have paid for that (`REPACK_LOOKS`), the pack's time
  included: what the adds cost matching, their extra matches aside;
- `held_over_same`: the same with the levels held (never repacked by queries): what walking a
  set in levels costs."""

from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import time
from typing import Any

import numpy as np

from bluedove.lab.bench.base import report
from bluedove.lab.workloads import brute_force
from bluedove.lab.workloads.paper import get as get_workload
from bluedove.matcher.index import DEFAULT_THRESHOLDS, SubscriptionSet

BATCH_POINTS = 64  # messages per match call, as a matcher's batches


def _rate(s: SubscriptionSet, points: np.ndarray) -> float:
    t0 = time.perf_counter()
    for j in range(0, len(points), BATCH_POINTS):
        s.match_ids(points[j:j + BATCH_POINTS])
    return len(points) / (time.perf_counter() - t0)


def _filled(w: Any, held: bool = False) -> SubscriptionSet:
    """The workload's subscriptions in one set (`held`: its queries never pack it anew)."""
    s = SubscriptionSet(w.lows.shape[1], dataclasses.replace(DEFAULT_THRESHOLDS, repack_looks=float("inf"))
                        if held else DEFAULT_THRESHOLDS)
    s.add_many([f"s{j}" for j in range(w.n_subs)], ["q"] * w.n_subs, w.lows, w.highs)
    return s


def _add(s: SubscriptionSet, ids: list[str], lows: np.ndarray, highs: np.ndarray, batch: int) -> float:
    """Seconds to add them in calls of `batch` (`add` one at a time when 1)."""
    t0 = time.perf_counter()
    if batch == 1:
        for sid, lo, hi in zip(ids, lows.tolist(), highs.tolist()):
            s.add(sid, "q", lo, hi)
    else:
        for j in range(0, len(ids), batch):
            s.add_many(ids[j:j + batch], ["q"] * len(ids[j:j + batch]), lows[j:j + batch], highs[j:j + batch])
    return time.perf_counter() - t0


def run_churn(args: argparse.Namespace) -> int:
    n, batch = args.adds, args.add_batch
    if n < 1 or batch < 1:
        print("bench kernel: --adds and --add-batch must be at least 1", file=sys.stderr)
        return 2
    params = {key: getattr(args, key, None) for key in ("sigma", "adverse", "dims", "n_subs")}
    w = get_workload(args.workload, seed=args.seed, **params)
    more = get_workload(args.workload, seed=args.seed + 1, **{**params, "n_subs": n})
    points = w.sample(args.messages, np.random.default_rng([args.seed, 1]))
    before, s, held = _filled(w), _filled(w), _filled(w, held=True)
    same = SubscriptionSet(w.lows.shape[1])
    same.add_many([f"s{j}" for j in range(w.n_subs)] + [f"n{j}" for j in range(n)], ["q"] * (w.n_subs + n),
                  np.vstack([w.lows, more.lows]), np.vstack([w.highs, more.highs]))
    ids = [f"n{j}" for j in range(n)]
    add_s = _add(s, ids, more.lows, more.highs, batch)
    _add(held, ids, more.lows, more.highs, batch)
    check = points[:max(1, args.verify)]
    expected = np.array([len(e) for e in brute_force(np.vstack([w.lows, more.lows]), np.vstack([w.highs, more.highs]),
                                                     check)])
    if not all(np.array_equal(t.match_ids(check)[1], expected) for t in (s, held)):
        print("bench kernel: MATCHING IS NOT EXACT with the added subscriptions pending", file=sys.stderr)
        return 1
    rates: dict[str, list[float]] = {"packed": [], "pending": [], "held": [], "same": []}
    for _ in range(max(1, args.repeat)):
        rates["packed"].append(_rate(before, points))
        fresh = _filled(w)  # as the adds leave it, each run
        _add(fresh, ids, more.lows, more.highs, batch)
        rates["pending"].append(_rate(fresh, points))
        rates["held"].append(_rate(held, points))
        rates["same"].append(_rate(same, points))
    t0 = time.perf_counter()
    for sid in ids:
        s.remove(sid)
    remove_s = time.perf_counter() - t0
    best = {k: round(max(v)) for k, v in rates.items()}
    result = {"kind": "kernel", "workload": args.workload, "subs": w.n_subs, "adds": n, "add_batch": batch,
              "us_per_add": round(add_s / n * 1e6, 2), "us_per_remove": round(remove_s / n * 1e6, 2),
              "msgs_per_s_packed": best["packed"], "msgs_per_s_pending": best["pending"],
              "pending_over_packed": round(best["pending"] / best["packed"], 3),
              "msgs_per_s_same_packed": best["same"], "pending_over_same": round(best["pending"] / best["same"], 3),
              "msgs_per_s_held": best["held"], "held_over_same": round(best["held"] / best["same"], 3),
              "messages": len(points), "verified_points": len(check), "exact": True, "seed": args.seed,
              "python": platform.python_version()}
    report(result, args.json, _print)
    return 0


def _print(r: dict) -> None:
    print(f"bench kernel --adds {r['adds']:,} ({r['workload']}, a set of {r['subs']:,}): {r['us_per_add']} µs an add"
          f" in calls of {r['add_batch']}, {r['us_per_remove']} µs a removal; matching {r['msgs_per_s_pending']:,}"
          f" msg/s with them pending against {r['msgs_per_s_packed']:,} packed ({r['pending_over_packed']}) and"
          f" {r['msgs_per_s_same_packed']:,} for the same all packed ({r['pending_over_same']}); levels held"
          f" {r['msgs_per_s_held']:,} ({r['held_over_same']}), exact")
