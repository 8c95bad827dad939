"""`bluedove subscribe|resubscribe|publish|poll|unsubscribe|delete-queue`: a small client CLI on the SDK,
flags named after the space.

The full `bluedove` command (bluedove/cli/main.py) adds these beside the cluster's commands; the
`bluedove-client` distribution's `bluedove` is `main` below: these commands alone, with the SDK's
dependencies alone."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

from bluedove.client.cli_spaces import UsageError, cmd_spaces, print_json, schema, space_flag, spaces_parser
from bluedove.client.client import Client
from bluedove.client.errors import BlueDoveError
from bluedove.client.objects import DEFAULT_SPACE, Delivery, Subscription
from bluedove.client.where import WhereError, attributes, where
from bluedove.client.where import __doc__ as where_doc

DEFAULT_URL = "http://127.0.0.1:8080"
_INDEX_RE = re.compile(r"messages\[(\d+)\](.*)")


def common(p: argparse.ArgumentParser) -> None:
    """The flags every client command takes."""
    p.add_argument("--url", default=os.environ.get("BLUEDOVE_URL", DEFAULT_URL),
                   help=f"http(s)://host:port (REST) or grpc(s)://host:port "
                        f"(default $BLUEDOVE_URL or {DEFAULT_URL})")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="an API key (bdk_…) for a cluster run with --auth keys, sent with publishing, "
                        "subscribing and deleting (default $BLUEDOVE_API_KEY); --token still opens the queue")
    p.add_argument("--tls-ca", default=os.environ.get("BLUEDOVE_TLS_CA") or None, metavar="FILE",
                   help="PEM CA to trust for https:// and grpcs:// "
                        "(default $BLUEDOVE_TLS_CA, else the system's roots)")
    p.set_defaults(func=run, dimension_flags=True)


def filter_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The parsers of the commands that take a filter: subscribe and resubscribe."""
    s = sub.add_parser("subscribe", allow_abbrev=False, help="subscribe a queue (a new one by default)",
                       description=textwrap.fill("Each dimension of the cluster's space (GET /v1/space) is a flag "
                                   "--NAME LOW:HIGH (low <= value < high); --where COND (repeatable) gives a "
                                   "condition on any attribute. Attributes left out match anything."),
                       epilog=WHERE_HELP + "examples: bluedove subscribe --x0 100:350 --x2 0:25\n"
                              "  bluedove subscribe --where city=Paris --where amount=0:100 --where 'sku^=AB'",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    common(s)
    where_flag(s)
    space_flag(s)
    s.add_argument("--queue", help="an existing queue (needs --token)")
    s.add_argument("--token", help="the queue's token")
    s.add_argument("--replay-from", dest="replay_from", metavar="WHEN",
                   help="in a space with a log (--space-name), its messages since WHEN too: a time ago (30s, "
                        "15m, 1h, 2d) or an RFC 3339 time")

    r = sub.add_parser("resubscribe", allow_abbrev=False, help="replace a subscription's predicates in place",
                       description=textwrap.fill("Its whole filter becomes the flags --NAME LOW:HIGH and --where COND "
                                   "given (attributes left out match anything), for every message published "
                                   "afterwards."),
                       epilog=WHERE_HELP + "example: bluedove resubscribe $S --token $T --x0 400:650 "
                              "--where 'sku$=-42'",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    common(r)
    where_flag(r)
    r.add_argument("subscription", help="the subscription's id")
    r.add_argument("--token", required=True, help="the token of the subscription's queue")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The client commands' parsers, on `bluedove`'s sub-commands (this module's own, or the full CLI's)."""
    filter_parsers(sub)
    p = sub.add_parser("publish", allow_abbrev=False, help="publish one message, or JSON lines from stdin",
                       description=textwrap.fill("Each dimension of the space is a flag --NAME VALUE, and --attr "
                                   "NAME=VALUE (repeatable) gives any attribute (VALUE: a number, true, false or a "
                                   "\"quoted\" string as JSON, else the string as written). Without either, reads "
                                   "messages from stdin, one JSON object per line "
                                   '({"attributes": {...}, "payload": ..., "id": ...}), published in batches.'),
                       epilog="examples: bluedove publish --x0 120 --x1 7 --x2 3.25 --x3 999 --payload '{\"a\": 1}'\n"
                              "  bluedove publish --attr city=Paris --attr amount=12.5 --attr express=true "
                              "--attr 'zip=\"02134\"'",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    common(p)
    space_flag(p)
    p.add_argument("--attr", action="append", default=[], metavar="NAME=VALUE",
                   help="an attribute of the message (repeatable)")
    p.add_argument("--payload", default=None, help="JSON payload")
    p.add_argument("--id", default=None, help="idempotency id")
    p.add_argument("--batch", type=int, default=1000, help="messages per batch from stdin (1-1000)")

    q = sub.add_parser("poll", allow_abbrev=False, help="print a queue's deliveries as JSON lines")
    common(q)
    q.add_argument("queue")
    q.add_argument("--token", required=True, help="the queue's token")
    q.add_argument("--max", type=int, default=100, help="most deliveries per poll (1-1000)")
    q.add_argument("--wait", type=float, default=10, help="seconds to wait for the first delivery (0-20)")
    q.add_argument("--follow", action="store_true", help="keep printing deliveries until interrupted")
    q.add_argument("--ack", action="store_true", help="ack each delivery once printed")
    q.add_argument("--from", dest="since", metavar="WHEN",
                   help="first seek the queue (one created with retain_acked_s) to WHEN: a time ago (30s, 15m, "
                        "1h, 2d) or an RFC 3339 time (2026-11-27T09:00:00Z); what it keeps from then on is "
                        "handed out again")

    u = sub.add_parser("unsubscribe", allow_abbrev=False, help="remove a subscription (its queue stays)")
    common(u)
    u.add_argument("subscription", help="the subscription's id")
    u.add_argument("--token", required=True, help="the token of the subscription's queue")

    d = sub.add_parser("delete-queue", allow_abbrev=False,
                       help="delete a queue, its pending deliveries and its subscriptions")
    common(d)
    d.add_argument("queue")
    d.add_argument("--token", required=True, help="the queue's token")

    spaces_parser(sub, common)

VALUE_FLAGS = frozenset({"--url", "--tls-ca", "--queue", "--token", "--payload", "--id", "--batch", "--max", "--wait",
                         "--api-key", "--where", "--attr", "--space-name", "--from", "--replay-from"})
# the --where syntax, from bluedove/client/where.py's docstring, under the commands that take it
WHERE_HELP = "--where COND:\n" + textwrap.indent("\n\n".join((where_doc or "").split("\n\n")[1:]).strip(),
                                                 "  ") + "\n\n"


def where_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--where", action="append", default=[], metavar="COND",
                   help="a condition on an attribute (repeatable; the syntax below)")


def filter_of(dims: dict[str, str], conditions: list[str]) -> dict[str, Any]:
    """The predicates of dimension flags (ranges) and --where conditions; a name in both is an error."""
    preds: dict[str, Any] = {name: parse_range(v, name) for name, v in dims.items()}
    try:
        more = where(conditions)
    except WhereError as exc:
        raise UsageError(f"--where {exc}") from None
    for name in more:
        if name in preds:
            raise UsageError(f"--{name} and --where {name}…: give the conditions on {name} in --where alone")
    return {**preds, **more}


def attach_values(argv: list[str]) -> list[str]:
    """`--token -x…` rewritten as `--token=-x…` for the flags that take a value: argparse reads a
    value that starts with '-' as the next flag (a --payload of -5, a token from elsewhere)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in VALUE_FLAGS and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def dimension_values(tokens: list[str], space: dict[str, Any]) -> dict[str, str]:
    """{dimension: raw value} from `--NAME VALUE` / `--NAME=VALUE` tokens; unknown flags fail."""
    names = [d["name"] for d in space["dimensions"]]
    out: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            raise UsageError(f"unexpected argument {tok!r}")
        name, eq, value = tok[2:].partition("=")
        if name not in names:
            raise UsageError(f"unknown flag --{name}; the cluster's dimensions are: "
                             f"{', '.join('--' + n for n in names)}")
        if not eq:
            i += 1
            if i >= len(tokens):
                raise UsageError(f"--{name} needs a value")
            value = tokens[i]
        out[name] = value
        i += 1
    return out


def _number(text: str, flag: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v):
        raise UsageError(f"--{flag}: expected a number, got {text!r}")
    return v


def parse_range(text: str, flag: str) -> tuple[float, float]:
    """'LOW:HIGH' (negative numbers allowed: '-73.9:-73.8')."""
    m = re.fullmatch(r"\s*([^:]+?)\s*:\s*([^:]+?)\s*", text)
    if not m:
        raise UsageError(f"--{flag}: expected LOW:HIGH, got {text!r}")
    return _number(m[1], flag), _number(m[2], flag)


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{what}: not valid JSON ({exc})") from None


def cmd_subscribe(client: Client, args: argparse.Namespace, dims: dict[str, str]) -> int:
    preds = filter_of(dims, args.where)
    if bool(args.queue) != bool(args.token):
        raise UsageError("--queue and --token go together")
    queue = client.queue(args.queue, args.token) if args.queue else None
    start = None if args.replay_from is None else since(args.replay_from, int(time.time() * 1000), "--replay-from")
    sub = client.subscribe_in(args.space_name, queue, preds, start)
    out: dict[str, Any] = {"id": sub.id, "queue": sub.queue.id}
    if queue is None:
        out["token"] = sub.queue.token
    if sub.replay is not None:
        out["replay"] = sub.replay
    print_json(out)
    return 0


def _publish_lines(client: Client, args: argparse.Namespace) -> int:
    if not 1 <= args.batch <= 1000:
        raise UsageError("--batch: expected 1 to 1000")
    batch: list[dict[str, Any]] = []
    first_line = 1

    def flush() -> None:
        try:
            for mid in client.publish_many(batch, space=args.space_name):
                print(mid, flush=True)
        except BlueDoveError as exc:  # name the input line rather than the batch index
            m = _INDEX_RE.fullmatch(exc.field or "")
            if m:
                exc.field = f"line {first_line + int(m[1])}{': ' + m[2].lstrip('.') if m[2] else ''}"
            raise

    for n, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        if not batch:
            first_line = n
        body = _json(line, f"stdin line {n}")
        if not isinstance(body, dict):
            raise UsageError(f"stdin line {n}: expected a JSON object {{\"attributes\": ..., \"payload\": ...}}")
        batch.append(body)
        if len(batch) >= args.batch:
            flush()
            batch = []
    if batch:
        flush()
    return 0


def cmd_publish(client: Client, args: argparse.Namespace, dims: dict[str, str]) -> int:
    if not dims and not args.attr:
        if args.payload is not None or args.id is not None:
            raise UsageError("--payload and --id need --attr or dimension flags (stdin lines carry their own)")
        return _publish_lines(client, args)
    attrs: dict[str, Any] = {name: _number(v, name) for name, v in dims.items()}
    try:
        more = attributes(args.attr)
    except WhereError as exc:
        raise UsageError(f"--attr {exc}") from None
    for name in more:
        if name in attrs:
            raise UsageError(f"--{name} and --attr {name}=…: give {name} once")
    attrs.update(more)
    payload = _json(args.payload, "--payload") if args.payload is not None else None
    print(client.publish(attrs, payload, id=args.id, space=args.space_name), flush=True)
    return 0


def _no_dimensions(command: str, dims: dict[str, str]) -> None:
    if dims:
        raise UsageError(f"{command} takes no dimension flags (got --{next(iter(dims))})")


_AGO_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def since(text: str, now_ms: int, flag: str = "--from") -> int | str:
    """`--from`'s (or `flag`'s) point: a time ago ("90s", "15m", "1h", "2d") as milliseconds
    since the epoch, or RFC 3339 text as written (the server reads it)."""
    if m := _AGO_RE.fullmatch(text.strip()):
        return now_ms - int(float(m[1]) * _UNIT_MS[m[2]])
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt ].+", text.strip()):
        return text.strip()
    raise UsageError(f"{flag}: expected a time ago (30s, 15m, 1h, 2d) or an RFC 3339 time "
                     f"(2026-11-27T09:00:00Z), got {text!r}")


def cmd_poll(client: Client, args: argparse.Namespace, dims: dict[str, str]) -> int:
    _no_dimensions("poll", dims)
    q = client.queue(args.queue, args.token)
    if args.since is not None:
        q.seek(since(args.since, int(time.time() * 1000)))

    def show(d: Delivery) -> None:
        print_json({"id": d.id, **({"space": d.space} if d.space != DEFAULT_SPACE else {}), "attributes": d.attributes,
                    "payload": d.payload, "subscriptions": d.subscriptions, "receipt": d.receipt,
                    "published_at": d.published_at})
        if args.ack:
            d.ack()

    if not args.follow:
        for d in q.deliveries(wait=args.wait, max=args.max):
            show(d)
        return 0
    try:
        for d in q.listen(max=args.max):
            show(d)
    except KeyboardInterrupt:
        pass
    return 0


def cmd_unsubscribe(client: Client, args: argparse.Namespace, dims: dict[str, str]) -> int:
    _no_dimensions("unsubscribe", dims)
    # the API needs only the id and the queue's token; the queue's id is not asked for
    client.unsubscribe(Subscription(args.subscription, client.queue("", args.token)))
    print_json({"unsubscribed": args.subscription})
    return 0


def cmd_resubscribe(client: Client, args: argparse.Namespace, dims: dict[str, str]) -> int:
    preds = filter_of(dims, args.where)
    # as for unsubscribe, the id and the queue's token are all the API needs
    sub = client.update_subscription(Subscription(args.subscription, client.queue("", args.token)), preds)
    print_json({"id": sub.id, "predicates": sub.predicates})
    return 0


def cmd_delete_queue(client: Client, args: argparse.Namespace, dims: dict[str, str]) -> int:
    _no_dimensions("delete-queue", dims)
    client.delete_queue(client.queue(args.queue, args.token))
    print_json({"deleted": args.queue})
    return 0


Command = Callable[[Client, argparse.Namespace, dict[str, str]], int]
COMMANDS: dict[str, Command] = {"subscribe": cmd_subscribe, "resubscribe": cmd_resubscribe, "publish": cmd_publish,
                                "poll": cmd_poll, "unsubscribe": cmd_unsubscribe, "delete-queue": cmd_delete_queue,
                                "spaces": cmd_spaces}


def run(args: argparse.Namespace) -> int:
    if args.tls_ca and not os.path.isfile(args.tls_ca):
        print(f"bluedove {args.command}: error: --tls-ca {args.tls_ca}: no such file", file=sys.stderr)
        return 2
    try:
        with Client(args.url, retries=2, api_key=args.api_key, tls_ca=args.tls_ca) as client:
            dims = dimension_values(args.extra, schema(client, args)) if args.extra else {}
            return COMMANDS[args.command](client, args, dims)
    except UsageError as exc:
        print(f"bluedove {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BlueDoveError as exc:
        where = f" ({exc.field})" if exc.field else ""
        print(f"bluedove {args.command}: {exc.code}: {exc.message}{where}", file=sys.stderr)
        return 1


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`argv` parsed by `parser` (a `bluedove` parser with these commands among its sub-commands):
    the dimension flags (--x0 …, named by the cluster's space) of these commands in `args.extra`,
    any other unknown flag an error."""
    if argv and argv[0] in COMMANDS:
        argv = attach_values(argv)
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "dimension_flags", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    return args


def main(argv: list[str] | None = None) -> None:
    """The `bluedove` command of the `bluedove-client` distribution: the client commands alone."""
    parser = argparse.ArgumentParser(prog="bluedove", description="The client commands of BlueDove, an elastic "
                                     "attribute-based publish/subscribe service (the bluedove-client distribution).")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    sys.exit(run(parse_args(parser, sys.argv[1:] if argv is None else list(argv))))
