"""The `bluedove` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

# The client commands run without importing any server module (~0.1 s to start instead of
# ~1.3 s): the other commands' modules are imported where they are needed.
from bluedove.client import cli as client_cli
from bluedove.runtime import tls
from bluedove.runtime.extras import MissingExtra

if TYPE_CHECKING:
    from bluedove.core.space import Space
    from bluedove.runtime.settings import MatcherSettings

COMMAND_GROUP = "bluedove.commands"


def _cmd_matcher(args: argparse.Namespace) -> int:
    """Check every flag of `bluedove matcher`, then serve until stopped."""
    from bluedove.core.partition.bootstrap import BootError, SpaceMismatch
    from bluedove.core.space import SpaceError
    from bluedove.gossip.peers import PeersSpecError
    from bluedove.matcher.server import serve
    from bluedove.runtime.settings import MatcherSettings, from_env
    from bluedove.runtime.telemetry import MetricsBindError

    settings = from_env(MatcherSettings, id=args.id, host=args.host, port=args.port, store_url=args.store,
                        leave_on_sigterm=True if args.leave_on_sigterm else None, partition=args.partition,
                        space_file=args.space, advertise=args.advertise, peers_dns=args.peers_dns,
                        boot_members=args.boot_members, seed_file=args.seed, metrics_port=args.metrics_port,
                        **tls.overrides(args))
    if problem := _matcher_flags_problem(args, settings):
        return _usage("matcher", problem)
    try:  # every flag is checked before anything starts
        space, space_log, seed = _matcher_space_and_seed(settings)
    except SpaceError as exc:
        where = "" if str(exc).startswith(settings.space_file) else f"{settings.space_file}: "
        return _usage("matcher", f"--space {where}{exc}")
    except PeersSpecError as exc:
        return _usage("matcher", f"--peers-dns {exc}")
    except BootError as exc:
        return _usage("matcher", str(exc))
    try:
        asyncio.run(serve(settings, deliver=args.deliver, seeds=tuple(args.join or ()), space=space, seed=seed,
                          space_log=space_log))
    except SpaceMismatch as exc:
        return _usage("matcher", str(exc))
    except MetricsBindError as exc:
        return _usage("matcher", f"--metrics-port {settings.metrics_port}: {exc}")
    return 0


def _matcher_flags_problem(args: argparse.Namespace, settings: MatcherSettings) -> str | None:
    """What is wrong with the matcher's TLS files, --metrics-port or --join, if anything."""
    from bluedove.core.partition.modes import MPARTITION

    try:
        tls.check(settings)
    except tls.TlsError as exc:
        return str(exc)
    if not 0 <= settings.metrics_port < 65536:
        return f"--metrics-port (BLUEDOVE_METRICS_PORT) {settings.metrics_port}: expected 0 to 65535"
    if args.join and settings.partition != MPARTITION:
        return (f"--join needs --partition mpartition (a joining matcher is given a split of "
                f"mPartition's segments; {settings.partition} is a fixed-size baseline)")
    return None


def _matcher_space_and_seed(settings: MatcherSettings) -> tuple[Space | None, int | None, dict[str, Any] | None]:
    """The matcher's space, its file's `retention_s` and the seed (None when not given), once
    --advertise, --boot-members and --peers-dns are checked; raises SpaceError, BootError or
    PeersSpecError."""
    from bluedove.core.partition.bootstrap import BootError, check_address, initial_table, load_seed, parse_members
    from bluedove.core.space import read_space_file
    from bluedove.gossip.peers import parse_spec

    space, space_log = read_space_file(settings.space_file) if settings.space_file else (None, None)
    if settings.advertise:
        check_address(settings.advertise, "--advertise ")
    if settings.boot_members:
        parse_members(settings.boot_members, "--boot-members")
        if not space:
            raise BootError("--boot-members needs --space (they make the first table, which needs the space)")
    seed = None
    if settings.seed_file:
        if not space:
            raise BootError("--seed needs --space (it lays out the first table, which needs the space)")
        seed = load_seed(settings.seed_file)
        try:
            initial_table(space, parse_members(settings.boot_members, "--boot-members") if settings.boot_members
                          else {settings.id: ""}, seed)
        except BootError as exc:
            raise BootError(f"--seed {settings.seed_file}: {exc}") from exc
    if settings.peers_dns:
        parse_spec(settings.peers_dns)
    return space, space_log, seed


def _cmd_dispatcher(args: argparse.Namespace) -> int:
    from bluedove.cli.boot import declare_spaces, dispatcher_space
    from bluedove.core.partition.bootstrap import BootError, SpaceMismatch, check_address
    from bluedove.core.space import SpaceError
    from bluedove.dispatcher.sampler import check_sample_settings
    from bluedove.dispatcher.server import serve
    from bluedove.gossip.peers import PeersSpecError, parse_spec
    from bluedove.runtime.settings import DispatcherSettings, from_env

    try:
        settings = from_env(DispatcherSettings, id=args.id, host=args.host, http_port=args.http_port,
                            grpc_port=args.grpc_port, store_url=args.store, policy=args.policy,
                            partition=args.partition, gossip_port=args.gossip_port, advertise=args.advertise,
                            peers_dns=args.peers_dns, sample_rate=args.sample_rate, sample_dir=args.sample_dir,
                            sample_rotate_s=args.sample_rotate_s, sample_rotate_mb=args.sample_rotate_mb,
                            sample_keep=args.sample_keep, auth=args.auth, spaces_file=args.spaces,
                            **tls.overrides(args))
        tls.check(settings)
    except ValueError as exc:  # a BLUEDOVE_* variable that is not of its setting's type; TLS files (TlsError)
        return _usage("dispatcher", str(exc))
    problem = check_sample_settings(settings.sample_rate, settings.sample_dir, settings.sample_rotate_s,
                                    settings.sample_rotate_mb, settings.sample_keep)
    if problem:
        return _usage("dispatcher", problem)
    checks = [("--advertise (BLUEDOVE_ADVERTISE)", settings.advertise), *(("--join", j) for j in args.join or ())]
    for flag, value in checks:
        try:
            if value:
                check_address(value, f"{flag} ")
        except BootError as exc:
            return _usage("dispatcher", str(exc))
    if not 0 <= settings.gossip_port < 65536:
        print(f"bluedove dispatcher: --gossip-port (BLUEDOVE_GOSSIP_PORT) {settings.gossip_port}: "
              "expected 0 to 65535", file=sys.stderr)
        return 2
    if settings.peers_dns:
        try:
            parse_spec(settings.peers_dns)
        except PeersSpecError as exc:
            print(f"bluedove dispatcher: --peers-dns (BLUEDOVE_PEERS_DNS) {exc}", file=sys.stderr)
            return 2
    # The flags are checked first: a usage error is told before any store is reached.
    try:  # without --space: the stored table's (waiting for one)
        space = dispatcher_space(args.store, args.space)
    except SpaceError as exc:
        where = "" if str(exc).startswith(str(args.space)) else f"{args.space}: "
        return _usage("dispatcher", f"--space {where}{exc}")
    except SpaceMismatch as exc:
        return _usage("dispatcher", str(exc))
    if settings.spaces_file:
        try:
            declare_spaces(settings.store_url, settings.spaces_file)
        except ValueError as exc:
            return _usage("dispatcher", f"--spaces {exc}")
    serve(settings, space, seeds=tuple(args.join or ()))
    return 0


def _usage(cmd: str, message: str) -> int:
    print(f"bluedove {cmd}: {message}", file=sys.stderr)
    return 2


def add_sample_flags(d: argparse.ArgumentParser) -> None:
    """The message sample's flags (bluedove/dispatcher/sampler.py; env BLUEDOVE_SAMPLE_*)."""
    d.add_argument("--sample-rate", type=float, default=None, metavar="F",
                   help="the fraction of published messages whose point and time are written to --sample-dir "
                        "(0 = off, the default; 1 = all)")
    d.add_argument("--sample-dir", default=None, metavar="DIR",
                   help="where the sample goes: DIR/<id>/messages-<UTC start>-<seq>.jsonl and DIR/space.json "
                        "(required when --sample-rate is above 0)")
    d.add_argument("--sample-rotate-s", type=float, default=None, metavar="S",
                   help="a new sample file after S seconds (default 300)")
    d.add_argument("--sample-rotate-mb", type=float, default=None, metavar="M",
                   help="a new sample file after M megabytes (default 64)")
    d.add_argument("--sample-keep", type=int, default=None, metavar="N",
                   help="sample files kept, the oldest deleted (default 48)")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `bluedove` command's parser: every sub-command, the lab's (entry points) last. For
    `matcher` and `dispatcher`, that command's alone: a cluster starts one process per role
    instance, and every other command's parser imports its own modules (~1 s of CPU a start)."""
    p = argparse.ArgumentParser(prog="bluedove", description="An elastic attribute-based publish/subscribe service.")
    sub = p.add_subparsers(dest="command", required=True)
    if command in ("matcher", "dispatcher"):
        (_add_matcher if command == "matcher" else _add_dispatcher)(sub)
        return p
    from bluedove.cli.up_cmd import add_command as add_up

    add_up(sub)  # up: a local cluster as real processes until Ctrl-C
    _add_matcher(sub)
    _add_dispatcher(sub)

    from bluedove.cli.autoscaler_cmd import add_command as add_autoscaler
    from bluedove.cli.boot import add_command as add_init
    from bluedove.cli.export_cmd import add_command as add_export
    from bluedove.cli.keys_cmd import add_command as add_keys
    from bluedove.cli.seed import add_command as add_seed

    add_init(sub)  # init: the first segment table
    add_seed(sub)  # seed: re-lay out a running cluster by a partition seed
    add_autoscaler(sub)  # autoscaler (Kubernetes)
    client_cli.add_parsers(sub)  # (re|un)subscribe, publish, poll, delete-queue, spaces (bluedove/client/cli.py)
    add_export(sub)  # export catalogue: Parquet for offline jobs
    add_keys(sub)  # keys: API keys (--auth keys)
    add_plugin_commands(sub)  # demo, bench, sim: the lab, when installed
    return p


def _add_matcher(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `matcher` sub-command's parser."""
    from bluedove.core.partition.modes import MODES
    from bluedove.local.flags import PARTITION_HELP

    m = sub.add_parser("matcher", help="run one matcher (`up` starts them; docs/operations.md starts them by hand)")
    m.add_argument("--id", required=True)
    m.add_argument("--host", default="127.0.0.1")
    m.add_argument("--port", type=int, required=True)
    m.add_argument("--store", required=True,
                   help="the store: redis://host:port/db, or redis+cluster://host:port,host:port for a Redis Cluster")
    m.add_argument("--deliver", choices=("store", "count"), default="store",
                   help="count: match without writing deliveries (benchmarks)")
    m.add_argument("--join", action="append", metavar="HOST:PORT",
                   help="a member to gossip with first (repeatable); the table's members are always tried")
    m.add_argument("--leave-on-sigterm", action="store_true",
                   help="on SIGTERM hand the segments to neighbours before exiting (Kubernetes scale-in)")
    m.add_argument("--partition", choices=MODES, default=None, help=PARTITION_HELP)
    m.add_argument("--advertise", default=None, metavar="HOST:PORT",
                   help="the address others reach this matcher at, stored in the table and gossiped "
                        "(default HOST:PORT of --host and --port; env BLUEDOVE_ADVERTISE)")
    m.add_argument("--space", default=None, metavar="FILE",
                   help="space file (YAML or JSON): on an empty store, propose the first table as `bluedove init` "
                        "does; a stored table over another space makes the matcher exit (code 2). Without it, wait "
                        "for a table (env BLUEDOVE_SPACE_FILE)")
    m.add_argument("--boot-members", default=None, metavar="ID[=HOST:PORT],…",
                   help="with --space: the owners of the first table if this matcher writes it (default: "
                        "itself alone; env BLUEDOVE_BOOT_MEMBERS)")
    m.add_argument("--seed", default=None, metavar="FILE",
                   help="with --space: a partition seed (JSON) laying out the first table if this matcher "
                        "writes it (an empty store), as `bluedove init --seed` does; matcher j of the seed is "
                        "the j-th of --boot-members (BLUEDOVE_SEED_FILE)")
    m.add_argument("--peers-dns", default=None, metavar="NAME[:PORT]",
                   help="gossip seeds: every address NAME resolves to (port default 7001), resolved again "
                        "while no peer is known; with --join and the table's members (env BLUEDOVE_PEERS_DNS)")
    m.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve Prometheus /metrics on this port of --host (docs/metrics.md; default "
                        "BLUEDOVE_METRICS_PORT, else 0 = none)")
    tls.add_flags(m, "its gRPC port (every other matcher, dispatcher and the autoscaler connect to it)")
    m.set_defaults(func=_cmd_matcher)


def _add_dispatcher(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `dispatcher` sub-command's parser."""
    from bluedove.cli.keys_cmd import add_auth_flag
    from bluedove.core.forwarding import POLICIES
    from bluedove.core.partition.modes import MODES
    from bluedove.local.flags import PARTITION_HELP

    d = sub.add_parser("dispatcher",
                       help="run one dispatcher (`up` starts them; docs/operations.md starts them by hand)")
    d.add_argument("--id", required=True)
    d.add_argument("--host", default="127.0.0.1")
    d.add_argument("--http-port", type=int, required=True)
    d.add_argument("--grpc-port", type=int, default=None, help="gRPC API port (default 50051; 0 = any free port)")
    d.add_argument("--store", required=True,
                   help="the store: redis://host:port/db, or redis+cluster://host:port,host:port for a Redis Cluster")
    d.add_argument("--space", default=None, metavar="FILE",
                   help="space file (YAML or JSON); refused (exit 2) if the stored table's space differs. Without it, "
                        "the stored table's space (waiting for a table)")
    d.add_argument("--spaces", default=None, metavar="FILE",
                   help="spaces to make at start, unless they exist as declared (YAML or JSON: a list of "
                        "POST /v1/spaces bodies); one that exists with another definition is refused (exit 2)")
    d.add_argument("--policy", choices=POLICIES, default="adaptive")
    d.add_argument("--partition", choices=MODES, default=None, help=PARTITION_HELP)
    d.add_argument("--gossip-port", type=int, default=None,
                   help="this dispatcher's own gossip port (default 7002; 0 = any free port)")
    d.add_argument("--advertise", default=None, metavar="HOST:PORT",
                   help="the gossip address other members reach it at (default HOST:gossip port)")
    d.add_argument("--join", action="append", metavar="HOST:PORT",
                   help="a member to gossip with first (repeatable); the table's members are always tried")
    d.add_argument("--peers-dns", default=None, metavar="NAME[:PORT]",
                   help="gossip seeds: every address NAME resolves to (default port 7001), re-resolved "
                        "while no peer is known")
    add_sample_flags(d)
    add_auth_flag(d)
    tls.add_flags(d, "its REST and gRPC API (no client certificate asked) and its gossip port")
    d.set_defaults(func=_cmd_dispatcher)


def add_plugin_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Commands other packages declare in the entry-point group `bluedove.commands` (the lab's
    `demo`, `bench` and `sim`): each entry point is a function that adds its parser."""
    for ep in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        ep.load()(sub)


def main(argv: list[str] | None = None) -> None:
    # BLUEDOVE_LOG_LEVEL=INFO shows table changes and hand-off timings as they happen.
    level = os.environ.get("BLUEDOVE_LOG_LEVEL", "WARNING").upper()
    logging.basicConfig(level=getattr(logging, level, logging.WARNING),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in client_cli.COMMANDS:
        client_cli.main(argv)  # the same parsers as in the whole command's (client_cli.add_parsers)
    parser = build_parser(argv[0] if argv else None)
    # Dimension flags (--x0 …) depend on the cluster's space: the client commands get them in args.extra.
    args = client_cli.parse_args(parser, argv)
    try:
        code = args.func(args)
    except MissingExtra as exc:
        print(f"bluedove: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
