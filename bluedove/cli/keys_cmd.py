"""`bluedove keys create|list|revoke`: API keys in the store (docs/security.md, "API keys"),
and the `--auth` flag of `bluedove up` and `bluedove dispatcher`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from bluedove.runtime.settings import AUTH_MODES

if TYPE_CHECKING:
    from bluedove.local.cluster import LocalCluster
    from bluedove.store.apikeys import KeyStore

T = TypeVar("T")

AUTH_HELP = ("off: anyone may publish and create queues (the default; env BLUEDOVE_AUTH); keys: publishing and "
             "creating queues and subscriptions need an API key (docs/api.md, \"API keys\")")
STORE_HELP = "the store: redis://host:port/db, or redis+cluster://host:port,host:port for a Redis Cluster"


def add_auth_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--auth", choices=AUTH_MODES, default=None, help=AUTH_HELP)


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    k = sub.add_parser("keys", help="create, list and revoke API keys (with `--auth keys`)")
    ks = k.add_subparsers(dest="keys_command", required=True)
    c = ks.add_parser("create", help="make a key; its secret is printed once, alone on the last line")
    c.add_argument("--scope", action="append", required=True, metavar="SCOPE",
                   help="publish, subscribe or admin (admin implies the others); repeat for several")
    c.add_argument("--name", default="", help="a label shown by `keys list` (e.g. who holds the key)")
    c.add_argument("--spaces", default="", metavar="A,B",
                   help="the only spaces the key may publish and subscribe in (and, with admin, create and "
                        "delete); another space is 403 (default: every space; queues are in none)")
    c.add_argument("--rate-msgs", type=float, default=0.0, metavar="R",
                   help="messages per second this key may publish, over the whole cluster (0 = no limit)")
    c.add_argument("--rate-bytes", type=float, default=0.0, metavar="B",
                   help="request bytes per second this key may publish (0 = no limit)")
    c.add_argument("--burst-msgs", type=float, default=0.0, metavar="N",
                   help="messages the key may publish at once before --rate-msgs paces it (default: one "
                        "second's worth)")
    c.add_argument("--burst-bytes", type=float, default=0.0, metavar="N",
                   help="bytes the key may publish at once before --rate-bytes paces it (default: one second's worth)")
    c.add_argument("--store", required=True, help=STORE_HELP)
    c.set_defaults(func=_create)
    ls = ks.add_parser("list", help="every key: id, name, scopes, limits, created, revoked (never the secret)")
    ls.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    ls.add_argument("--store", required=True, help=STORE_HELP)
    ls.set_defaults(func=_list)
    r = ks.add_parser("revoke", help="revoke a key (refused by every dispatcher within a second)")
    r.add_argument("key", metavar="KEY_OR_ID", help="the key itself (bdk_…) or its id (`keys list`)")
    r.add_argument("--store", required=True, help=STORE_HELP)
    r.set_defaults(func=_revoke)


async def _with_keys(url: str, fn: Callable[[KeyStore], Awaitable[T]]) -> T:
    from bluedove.store.apikeys import KeyStore
    from bluedove.store.client import async_client

    r = async_client(url)
    try:
        return await fn(KeyStore(r))
    finally:
        await r.aclose()


def _fail(message: str, code: int = 1) -> int:
    print(f"bluedove keys: {message}", file=sys.stderr)
    return code


def _create(args: argparse.Namespace) -> int:
    from bluedove.core.apikeys import check_key_spaces, check_scopes

    try:
        scopes = check_scopes(args.scope)
    except ValueError as exc:
        return _fail(f"--scope: {exc}", 2)
    try:
        spaces = check_key_spaces([n.strip() for n in args.spaces.split(",")] if args.spaces.strip() else [])
    except ValueError as exc:
        return _fail(f"--spaces: {exc}", 2)
    for flag in ("rate_msgs", "rate_bytes", "burst_msgs", "burst_bytes"):
        if not getattr(args, flag) >= 0:
            return _fail(f"--{flag.replace('_', '-')} {getattr(args, flag)}: expected a number >= 0", 2)
    try:
        key, rec = asyncio.run(_with_keys(args.store, lambda ks: ks.create(
            scopes, args.name, args.rate_msgs, args.rate_bytes, args.burst_msgs, args.burst_bytes, spaces)))
    except Exception as exc:  # noqa: BLE001 - the store unreachable or refusing: said, exit 1
        return _fail(f"cannot create the key in {args.store}: {exc}")
    where = f"; spaces {', '.join(spaces)}" if spaces else ""
    print(f"created key {rec.id} ({', '.join(scopes)}{where}{'; ' + rec.name if rec.name else ''}); "
          "the key is shown only now, on the next line:")
    print(key, flush=True)
    return 0


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t else "-"


def _limit(rate: float, burst: float) -> str:
    return "-" if not rate else f"{rate:g}/s" + (f" burst {burst:g}" if burst else "")


def _list(args: argparse.Namespace) -> int:
    try:
        recs = asyncio.run(_with_keys(args.store, lambda ks: ks.all()))
    except Exception as exc:  # noqa: BLE001
        return _fail(f"cannot read the keys in {args.store}: {exc}")
    if args.json:
        for r in recs:
            print(json.dumps(r.public()))
        return 0
    rows = [("ID", "NAME", "SCOPES", "SPACES", "MSGS", "BYTES", "CREATED", "REVOKED")]
    rows += [(r.id, r.name or "-", ",".join(r.scopes), ",".join(r.spaces) or "*", _limit(r.rate_msgs, r.burst_msgs),
              _limit(r.rate_bytes, r.burst_bytes), _when(r.created), _when(r.revoked)) for r in recs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from bluedove.core.apikeys import key_id_of

    key_id = key_id_of(args.key)
    if key_id is None:
        return _fail(f"{args.key[:8]}…: neither a key (bdk_…) nor a key id (16 hex digits)", 2)
    try:
        n = asyncio.run(_with_keys(args.store, lambda ks: ks.revoke(key_id)))
    except Exception as exc:  # noqa: BLE001
        return _fail(f"cannot revoke in {args.store}: {exc}")
    if n == 0:
        return _fail(f"no key {key_id} in {args.store}")
    print(f"key {key_id} revoked" if n == 1 else f"key {key_id} was already revoked")
    return 0


def first_admin_key(store_url: str) -> str | None:
    """For `bluedove up --auth keys`: on a store with no key at all, one admin key (else nobody
    could make the first); None when the store has keys already."""

    async def make(ks: KeyStore) -> str | None:
        if await ks.any():
            return None
        key, _ = await ks.create(("admin",), "bluedove up: first admin key")
        return key

    return asyncio.run(_with_keys(store_url, make))


def print_auth(cluster: LocalCluster) -> None:
    """`bluedove up`'s auth line, and the first admin key when it made one."""
    print(f"auth: {cluster.auth}", flush=True)
    if cluster.auth == "keys":
        assert cluster.store_url is not None, "a started cluster has its store"
        key = first_admin_key(cluster.store_url)
        if key is not None:
            print("  the store had no API key: made an admin key (shown only now; `bluedove keys create "
                  f"--store {cluster.store_url} …` makes more):\n  {key}", flush=True)
