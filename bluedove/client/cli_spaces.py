"""The client commands about spaces, `bluedove spaces list|create|delete`, and the flag
`--space-name` of publish and subscribe (docs/api.md, "Spaces"); with what every client
command shares: its usage error and its JSON output."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Callable
from typing import Any

from bluedove.client.client import Client

Common = Callable[[argparse.ArgumentParser], None]


class UsageError(Exception):
    """Bad command-line input; the message names the flag or line."""


def print_json(obj: object) -> None:
    print(json.dumps(obj, separators=(",", ":")), flush=True)


def space_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--space-name", default=None, metavar="NAME",
                   help="publish or subscribe in this named space (default: the cluster's own, `default`); "
                        "its dimensions are the flags --NAME")


def schema(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    """The schema the dimension flags are read by: the named space's, or the cluster's own."""
    name = getattr(args, "space_name", None)
    return client.space_info(name) if name else client.space()


def spaces_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: Common) -> None:
    sp = sub.add_parser("spaces", allow_abbrev=False, help="the cluster's attribute spaces")
    spaces = sp.add_subparsers(dest="spaces_command", required=True)
    common(spaces.add_parser("list", allow_abbrev=False,
                             help="print each space (name, schema, table epoch, counts) as a JSON line"))
    create = spaces.add_parser("create", allow_abbrev=False, help="create a space from its JSON definition "
                               "(docs/api.md, \"Spaces\"); the same definition again is no change")
    common(create)
    create.add_argument("file", help="the definition: a JSON file, or - for standard input")
    delete = spaces.add_parser("delete", allow_abbrev=False, help="delete a space and its subscriptions")
    common(delete)
    delete.add_argument("name")


def cmd_spaces(client: Client, args: argparse.Namespace, dims: dict[str, str]) -> int:
    """`spaces list|create|delete`."""
    if dims:
        raise UsageError(f"spaces {args.spaces_command} takes no dimension flags (got --{next(iter(dims))})")
    if args.spaces_command == "create":
        try:
            text = sys.stdin.read() if args.file == "-" else pathlib.Path(args.file).read_text(encoding="utf-8")
            spec = json.loads(text)
        except (OSError, ValueError) as exc:
            raise UsageError(f"{args.file}: not a readable JSON definition ({exc})") from None
        print_json(client.create_space(spec))
    elif args.spaces_command == "delete":
        client.delete_space(args.name)
        print_json({"deleted": args.name})
    else:
        for space in client.spaces():
            print_json(space)
    return 0
