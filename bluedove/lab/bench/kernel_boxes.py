"""`bench kernel --boxes-vs-subs N`: what one filter of N boxes costs a matcher against N one-box
subscriptions of the same boxes. On the `orders` space (docs/workloads.md), one set (the
`amount` dimension's) on the matcher's whole path (bluedove/lab/bench/kernel_typed.py `on_set`),
the same messages: half of them on one of the N amounts. Two pairs:

- exact: `{"any_of": [{"amount": {"in": [v1 … v100]}}, …]}` (an `in` holds at most 100 values)
  against N subscriptions `{"amount": vi}` (the boxes
  decide; the filter's entries are still counted once per message and subscription);
- checked: the same with `"sku": {"prefix": "EL-"}` in each (an attribute not cut: every
  entry the walk finds is checked on the message's stored body).
"""

from __future__ import annotations

import argparse
import platform
import sys
from typing import Any

import numpy as np

from bluedove.core.filter_syntax import MAX_VALUES
from bluedove.lab.bench.base import report
from bluedove.lab.bench.kernel_typed import Prepared, full_set, on_set, rates, rows_of, timed, typed_messages
from bluedove.lab.workloads import orders as orders_mod


def _values(n: int) -> list[float]:
    """n distinct amounts in cents spread over [1, 9,000): no two share a cell."""
    return [round(1.0 + j * (8999.0 / n), 2) for j in range(n)]


def _pair(n: int, extra: dict[str, Any], attrs: list[dict[str, Any]], points: np.ndarray, part) -> list[Prepared]:
    """The one filter of n boxes and the n one-box subscriptions, each with `extra` conditions."""
    space = orders_mod.orders_space()
    vals = _values(n)
    out = []
    one = {"any_of": [{"amount": {"in": vals[i:i + MAX_VALUES]}} for i in range(0, n, MAX_VALUES)], **extra}
    for preds in ([one], [{"amount": v, **extra} for v in vals]):
        rows, keys, queues, book = rows_of(space, preds, np.arange(len(preds)))
        out.append(Prepared("", len(preds), rows, keys, queues, book, points, part, attrs, None))
    return out


def _messages(n: int, values: list[float], seed: int) -> tuple[list[dict[str, Any]], np.ndarray, Any]:
    rng = np.random.default_rng([seed, 3])
    attrs = orders_mod.get(seed=seed, n_subs=1, n_queues=1).sample(n, rng)
    hit = rng.random(n) < 0.5
    pick = rng.integers(0, len(values), n)
    for m, h, j in zip(attrs, hit.tolist(), pick.tolist()):
        if h:
            m["amount"] = values[j]
    points, part = typed_messages(orders_mod.orders_space(), attrs)
    return attrs, points, part


def run_boxes(args: argparse.Namespace) -> int:
    n = args.boxes_vs_subs
    if not 1 <= n <= 1000:
        print(f"bench kernel: --boxes-vs-subs: expected 1..1000 (a filter's most boxes), got {n}", file=sys.stderr)
        return 2
    repeat = max(1, args.repeat or 5)
    attrs, points, part = _messages(args.messages, _values(n), args.seed)
    kinds = {"exact": {}, "checked": {"sku": {"prefix": "EL-"}}}
    sets = {kind: [full_set(p) for p in _pair(n, extra, attrs, points, part)] for kind, extra in kinds.items()}
    fns = [lambda s=s: on_set(s, points, [part]) for pair in sets.values() for s in pair]
    times = timed(fns, repeat)
    result: dict[str, Any] = {"kind": "kernel", "boxes_vs_subs": n, "messages": len(points), "repeat": repeat,
                              "seed": args.seed, "python": platform.python_version(), "pairs": {}}
    for j, (kind, (one, many)) in enumerate(sets.items()):
        c_one = on_set(one, points, [part])[1]
        c_many = on_set(many, points, [part])[1]
        if not np.array_equal(c_one, c_many):
            print(f"bench kernel: MATCHING IS NOT EXACT: {kind}: the filter and the subscriptions differ on "
                  f"{int((c_one != c_many).sum())} messages", file=sys.stderr)
            return 1
        r_one, r_many = rates(len(points), times[2 * j]), rates(len(points), times[2 * j + 1])
        result["pairs"][kind] = {
            "filter_msgs_per_s": r_one, "subs_msgs_per_s": r_many, "matches_per_msg": round(float(c_one.mean()), 3),
            # the filter's cost over the subscriptions' (<= 1: the filter costs no more)
            "filter_cost_over_subs_median": round(r_many["median"] / r_one["median"], 2),
            "filter_cost_over_subs_best": round(r_many["best"] / r_one["best"], 2)}
    result["exact"] = True
    report(result, args.json, _print)
    return 0


def _print(r: dict) -> None:
    print(f"bench kernel --boxes-vs-subs {r['boxes_vs_subs']}: {r['messages']:,} messages, best / median of"
          f" {r['repeat']} interleaved runs, exact")
    for kind, x in r["pairs"].items():
        f, s = x["filter_msgs_per_s"], x["subs_msgs_per_s"]
        print(f"  {kind}: one filter {f['best']:,} / {f['median']:,} msg/s; {r['boxes_vs_subs']} subscriptions"
              f" {s['best']:,} / {s['median']:,} msg/s; the filter's cost over theirs"
              f" {x['filter_cost_over_subs_median']} (median), {x['filter_cost_over_subs_best']} (best);"
              f" {x['matches_per_msg']} matches/msg")
