"""Flags of the cluster benches (`bench delivery`, `bench publish`), with their defaults applied in one place."""

from __future__ import annotations

import argparse

# flag -> (default, type, help). Defaults are applied by `resolve`, so a flag another bench
# already defines (with its own default) is shared rather than defined twice.
FLAGS: dict[str, tuple[object, type, str]] = {
    "--matchers": (2, int, "matcher processes"),
    "--dispatchers": (1, int, "dispatcher processes sharing the ports"),
    "--publishers": (2, int, "publisher processes"),
    "--feeders": (3, int, "delivery: processes sending to the matchers' Forward directly (as dispatchers do)"),
    "--pollers": (2, int, "delivery: poller processes"),
    "--connections": (32, int, "delivery: concurrent polls per poller process (128 there); publish: concurrent calls"
                               " per mode"),
    "--poll-interval": (10.0, float, "delivery: seconds a poller connection takes at least to poll each of its queues"
                                    " once, like phones polling every so often (0: as fast as it can)"),
    "--duration": (10.0, float, "seconds each measured phase (or mode) lasts"),
    "--warmup": (2.0, float, "seconds before each measurement starts"),
    "--rate": (20_000.0, float, "delivery: the deliveries/s publishers are paced at in the sustain phase"),
    "--sample": (40, int, "delivery: queues whose deliveries are checked against brute force"),
    "--batch": (100, int, "publish: messages per REST batch and per PublishStream call"),
}


def add_cluster_bench_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("delivery and publish")
    for flag, (default, kind, text) in FLAGS.items():
        if flag not in parser._option_string_actions:  # noqa: SLF001 - shared with other benches
            group.add_argument(flag, type=kind, default=None, help=f"{text} (default {default})")


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with every unset cluster-bench flag at its default."""
    for flag, (default, _, _) in FLAGS.items():
        dest = flag.lstrip("-").replace("-", "_")
        if getattr(args, dest, None) is None:
            setattr(args, dest, default)
    return args


def workload_or_none(args: argparse.Namespace):
    """The bench's workload from `--workload`, `--seed` and `--subs`; None (after saying why on
    stderr) when the name or a parameter is not valid, for the caller to exit with 2."""
    import sys

    from bluedove.workloads.paper import get as get_workload

    try:
        return get_workload(args.workload, seed=args.seed, n_subs=getattr(args, "n_subs", None))
    except (ValueError, TypeError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return None
