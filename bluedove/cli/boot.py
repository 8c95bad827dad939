"""`bluedove init`, and the space a dispatcher or matcher takes from its flags or the store."""

from __future__ import annotations

import argparse
import asyncio
import sys

from bluedove.core.partition.bootstrap import (
    BootError,
    check_space,
    ensure_table,
    load_seed,
    numbered_members,
    parse_members,
)
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import Space, SpaceError, load_space, read_space_file

MEMBERS_HELP = ("the initial owners, comma-separated: ID or ID=HOST:PORT (an owner without an address "
                "registers its own when its matcher starts)")


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("init", help="write the first segment table to the store (idempotent)",
                       description="Write the cluster's first segment table (compare-and-set from no table). "
                                   "A store that already holds one over the same space is left as it is (exit 0); "
                                   "one over another space is refused (exit 2).")
    p.add_argument("--store", required=True,
                   help="the store: redis://host:port/db, or redis+cluster://host:port,host:port for a Redis Cluster")
    p.add_argument("--space", required=True, metavar="FILE",
                   help="space file, YAML or JSON: attributes and partition (docs/api.md, \"Typed attributes\"), "
                        "or dimensions: name, min, max")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--matchers", type=int, default=None, metavar="N",
                     help="N owners m1..mN, none with an address yet (default 1)")
    who.add_argument("--members", default=None, metavar="ID[=HOST:PORT],…", help=MEMBERS_HELP)
    p.add_argument("--seed", default=None, metavar="FILE",
                   help="a partition seed (JSON, docs/operations.md \"Seeds\"): each dimension's boundaries and "
                        "which owner holds which segment (default: equal widths, owner j holding segment j)")
    p.set_defaults(func=_cmd_init)


def describe_owners(table: SegmentTable) -> str:
    return ", ".join(f"{m}={a}" if a else f"{m} (no address yet)" for m, a in table.members.items())


def _cmd_init(args: argparse.Namespace) -> int:
    from bluedove.store import Store
    from bluedove.store.spaces import SpaceStore

    try:
        space, retention = read_space_file(args.space)
    except SpaceError as exc:
        return _usage("init", f"--space {exc}" if str(exc).startswith(str(args.space))
                      else f"--space {args.space}: {exc}")
    try:
        members = (parse_members(args.members) if args.members is not None
                   else numbered_members(1 if args.matchers is None else args.matchers))
        seed = load_seed(args.seed) if args.seed else None
    except BootError as exc:
        return _usage("init", str(exc))

    async def run() -> tuple[SegmentTable, bool]:
        store = Store(args.store)
        try:
            out, _ = await SpaceStore(store.r).declare_default(
                store, space, retention, lambda: ensure_table(store, space, members, seed,
                                                              given_from=f"--space {args.space}"))
            return out
        finally:
            await store.close()

    try:
        table, created = asyncio.run(run())
    except BootError as exc:  # a bad seed, or the store's table over another space
        return _usage("init", str(exc))
    except OSError as exc:  # redis unreachable (redis' ConnectionError is one)
        print(f"bluedove init: --store {args.store}: {exc}", file=sys.stderr)
        return 1
    if created:
        print(f"initialised the segment table: epoch {table.epoch}, owners {describe_owners(table)}")
    else:
        print(f"already initialised (epoch {table.epoch}), owners {describe_owners(table)}; left as it is")
    return 0


def _usage(cmd: str, message: str) -> int:
    print(f"bluedove {cmd}: {message}", file=sys.stderr)
    return 2


def dispatcher_space(store_url: str, space_file: str | None, poll_s: float = 0.5) -> Space:
    """The space a dispatcher serves: --space if given (refused if the stored table's differs),
    else the stored table's, waiting for one. Raises SpaceError or SpaceMismatch."""
    from bluedove.store import Store
    from bluedove.store.store import wait_ready

    given = load_space(space_file) if space_file else None

    async def run() -> Space:
        store = Store(store_url)
        try:
            await wait_ready(store)
            said = False
            while True:
                raw = await store.get_table()
                if raw is not None:
                    stored = SegmentTable.from_json(raw).space
                    if given is not None:
                        check_space(stored, given, f"--space {space_file}")
                    return stored
                if given is not None:  # no table yet: the given space, the table comes later
                    return given
                if not said:
                    print(f"no segment table in {store_url} yet: waiting for one (bluedove init, or a matcher "
                          "started with --space)", file=sys.stderr, flush=True)
                    said = True
                await asyncio.sleep(poll_s)
        finally:
            await store.close()

    return asyncio.run(run())



def declare_spaces(store_url: str, path: str) -> list[str]:
    """Make the spaces `path` declares (`bluedove dispatcher --spaces`), each unless it exists with
    that very definition: what every dispatcher does at its start, so a chart's spaces are made at
    install and the same again on every upgrade is no change. ValueError for a bad file or a space
    that exists with another definition (naming it and the first field that differs). The names."""
    from bluedove.core.spaces import load_spaces_file
    from bluedove.store.client import async_client
    from bluedove.store.spaces import SpaceConflict, SpaceStore

    specs = load_spaces_file(path)

    async def run() -> list[str]:
        r = async_client(store_url)
        try:
            spaces = SpaceStore(r)
            for spec in specs:
                try:
                    await spaces.create(spec)
                except SpaceConflict as exc:
                    raise ValueError(f"{path}: space {spec.name!r} exists with another {exc.field}; delete it "
                                     "first (DELETE /v1/spaces/{space}), or declare it as it was made") from None
            return [spec.name for spec in specs]
        finally:
            await r.aclose()

    return asyncio.run(run())
