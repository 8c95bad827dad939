"""Flags several benches declare alike, and the workload of `--workload`; each bench module adds
its own parser with `add_parser(subparsers)` and picks from these."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from bluedove.core.forwarding import POLICIES


def add_output_flags(p: argparse.ArgumentParser) -> None:
    """`--seed` and `--json`: every bench has them."""
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print one JSON object")


def add_workload_flags(p: argparse.ArgumentParser, names: str = "paper or sparse", subs: int | None = None,
                       variants: bool = False) -> None:
    """`--workload`, `--subs` (as `n_subs`) and, with `variants`, the paper workloads' variants."""
    p.add_argument("--workload", default="paper", help=f"{names} (see docs/workloads.md)")
    p.add_argument("--subs", dest="n_subs", type=int, default=subs,
                   help="number of subscriptions" + ("" if subs is None else f" (default {subs})"))
    if variants:
        p.add_argument("--sigma", type=float, default=None, help="variant: subscription skew (default 250)")
        p.add_argument("--adverse", type=int, default=None, help="variant: messages skewed on the first j dims")
        p.add_argument("--dims", type=int, default=None, help="variant: only the first k dimensions (default 4)")


def add_cluster_flags(p: argparse.ArgumentParser, matchers: int, publishers: int = 2,
                      policy: bool = False) -> None:
    """The local cluster a bench starts, and its publisher processes."""
    p.add_argument("--matchers", type=int, default=matchers, help=f"matcher processes (default {matchers})")
    p.add_argument("--dispatchers", type=int, default=1, help="dispatcher processes sharing the ports (default 1)")
    p.add_argument("--publishers", type=int, default=publishers,
                   help=f"publisher processes (default {publishers})")
    if policy:
        p.add_argument("--policy", choices=POLICIES, default="adaptive", help="forwarding policy")


def add_deliver_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--deliver", choices=("count", "store"), default="count",
                   help="count: matchers count matches (what the paper measured); store: write deliveries")


def add_phase_flags(p: argparse.ArgumentParser, connections: int, connections_help: str) -> None:
    """How long each measured phase lasts, and the concurrent calls per process."""
    p.add_argument("--connections", type=int, default=connections, help=f"{connections_help} (default {connections})")
    p.add_argument("--duration", type=float, default=10.0, help="seconds each measured phase (or mode) lasts "
                                                                 "(default 10)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds before each measurement starts (default 2)")


def workload_or_none(args: argparse.Namespace):
    """The bench's workload from `--workload`, `--seed` and `--subs`; None (after saying why on
    stderr) when the name or a parameter is not valid, for the caller to exit with 2."""
    from bluedove.lab.workloads.paper import get as get_workload

    try:
        return get_workload(args.workload, seed=args.seed, n_subs=getattr(args, "n_subs", None))
    except (ValueError, TypeError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return None


def report(result: dict, as_json: bool, print_text: Callable[[dict], None]) -> None:
    """A bench's result: one JSON object with `--json`, else the bench's text."""
    if as_json:
        print(json.dumps(result))
    else:
        print_text(result)
