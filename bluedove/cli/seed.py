"""`bluedove seed`: compute a partition seed with the Spark job, and lay out a cluster by one.

- `--subscriptions PATH [--messages PATH] --matchers N --out FILE` runs the skew-statistics job
  (bluedove/spark/skew_stats.py, docs/spark.md) on a local SparkSession (`local[*]`), or on `--master URL`.
- `--from FILE --apply --store URL` re-lays out a running cluster by a seed with no restart: it
  reads the stored table, builds the seed's next epoch of it (the same members in order: matcher
  j of the seed is the table's j-th member), hands it to a live owner (`ProposeTable`: the takers
  load first, then the epoch is stored and adopted), waits until the store shows it, stores the
  seed (the split planner reads its histograms) and prints each matcher's ranges before and
  after. Without --apply it only prints what would change.
- `--subscriptions … --apply --store URL` does both: the job (N defaults to the running
  cluster's matchers), then the apply of what it wrote.
- `--space-name NAME` does any of these for a named space: its table (N defaults to the
  matchers it spans), proposed to one of its owners; its subscriptions are those `bluedove
  export catalogue --space-name NAME` writes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from bluedove.core.errors import ApiError
from bluedove.core.partition.bootstrap import BootError, load_seed
from bluedove.core.partition.seeds import SeedError, reseeded
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.spaces import DEFAULT_SPACE, check_space_name
from bluedove.runtime import tls
from bluedove.runtime.extras import require
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from bluedove.runtime.settings import TlsSettings
    from bluedove.store import Store

RETRY_S = 0.5  # between proposals refused because another change was under way
# a seed as loaded (docs/spark.md), the stored table, and that table re-seeded by it
Planned = tuple[dict[str, Any], SegmentTable, SegmentTable]


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    from bluedove.spark.job import add_arguments  # the job's flags (no Spark imported until it runs)

    p = sub.add_parser("seed", help="compute a partition seed with Spark, or lay out a running cluster by one",
                       description="With --subscriptions: run the skew-statistics job (docs/spark.md) and write a "
                                   "seed. With --from FILE --apply: lay out the running cluster's segment table as "
                                   "the seed says (its boundaries and which matcher owns which segment of each "
                                   "dimension) through the usual hand-off: no restart, no message lost.")
    p.add_argument("--from", dest="from_file", metavar="FILE", default=None,
                   help="a seed file to apply (JSON, docs/spark.md)")
    p.add_argument("--apply", action="store_true",
                   help="apply it to the cluster of --store (without: print what would change)")
    p.add_argument("--store", default=None, help="the running cluster's store (redis://host:port/db or redis+cluster://host:port,...)")
    p.add_argument("--space-name", default=DEFAULT_SPACE, metavar="NAME",
                   help="the space whose table to lay out (default: the default space); its subscriptions are "
                        "`bluedove export catalogue --space-name NAME`'s")
    p.add_argument("--apply-timeout", type=float, default=120.0, metavar="S",
                   help="give up applying after S seconds (default 120)")
    p.add_argument("--master", default=None, metavar="URL",
                   help="with --subscriptions: the Spark master (default local[*], this machine's cores)")
    add_arguments(p, required=False)
    tls.add_flags(p, "nothing (a client: the certificate is presented to the matchers, with --tls-ca)")
    p.set_defaults(func=_cmd_seed)
    return p


def _cmd_seed(args: argparse.Namespace) -> int:
    try:
        check_space_name(args.space_name, "--space-name")
    except ApiError as exc:
        return _usage(exc.message)
    if args.subscriptions:
        if args.from_file:
            return _usage("--from and --subscriptions: give a seed file to apply, or the job's inputs, not both")
        return _job(args)
    if not args.from_file:
        return _usage("--from FILE (a seed to apply) or --subscriptions PATH (to compute one) is required")
    if not args.store:
        return _usage("--store is required (the running cluster's store)")
    if not args.apply_timeout > 0:
        return _usage(f"--apply-timeout {args.apply_timeout}: must be above 0")
    if not args.apply:
        return plan_seed_file(args.store, args.from_file, space=args.space_name)
    return apply_seed_file(args.store, args.from_file, args.apply_timeout, tls_files=_tls(args), space=args.space_name)


def _tls(args: argparse.Namespace) -> TlsSettings:
    """The matchers' TLS, for the table proposal (--tls-*, else BLUEDOVE_TLS_*)."""
    from bluedove.runtime.settings import TlsSettings, from_env

    return from_env(TlsSettings, **tls.overrides(args))


def _job(args: argparse.Namespace) -> int:
    """Run the job; then, with --apply, apply the seed it wrote."""
    require("spark", "bluedove seed --subscriptions")
    if args.apply and not args.store:
        return _usage("--apply needs --store (the running cluster's store)")
    if args.matchers is None:
        if not args.store:
            return _usage("--matchers N is required (or --store URL of a running cluster to take N from)")
        planned = _stored_members(args.store, args.space_name)
        if isinstance(planned, str):
            return _usage(planned)
        args.matchers = planned
    from bluedove.spark.job import job_from_args

    try:
        job = job_from_args(args)
    except (OSError, ValueError) as exc:
        return _usage(str(exc))
    from pyspark.sql import SparkSession

    from bluedove.spark.skew_stats import run

    master = args.master or "local[*]"
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # never resolve the machine's own name
    spark = (SparkSession.builder.master(master).appName("bluedove-seed")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        run(spark, job, say=lambda line: print(line, flush=True))
    except Exception as exc:  # noqa: BLE001 - unreadable inputs surface as Spark's AnalysisException
        print(f"bluedove seed: the job failed: {str(exc).splitlines()[0] if str(exc) else repr(exc)}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    if not args.apply:
        return 0
    return apply_seed_file(args.store, args.out, args.apply_timeout, tls_files=_tls(args), space=args.space_name)


def read_table(store_url: str, space: str = DEFAULT_SPACE) -> SegmentTable | None:
    """`space`'s stored table in `store_url` (None if there is none); OSError if Redis is unreachable."""
    from bluedove.store import Store

    async def read() -> SegmentTable | None:
        store = Store(store_url)
        try:
            return await _stored(store, space)
        finally:
            await store.close()

    return asyncio.run(read())


def _stored_members(store_url: str, space: str = DEFAULT_SPACE) -> int | str:
    """The matchers `space`'s table spans in the running cluster, or why it cannot be read."""
    try:
        table = read_table(store_url, space)
    except OSError as exc:
        return f"--store {store_url}: {exc}"
    if table is None:
        return f"--store {store_url}: no segment table {_of(space)}there to take --matchers from"
    return len(table.members)


def _usage(message: str) -> int:
    print(f"bluedove seed: {message}", file=sys.stderr)
    return 2


def _err(message: str) -> None:
    print(f"bluedove seed: {message}", file=sys.stderr)


def _range(r: tuple[float, float] | None, kind: str = "number", high: float = 0.0) -> str:
    """A segment as a reader names it: a string dimension's as the prefixes its ends stand for."""
    from bluedove.spark.report import label

    return "none" if r is None else f"[{label(r[0], kind, high)}, {label(r[1], kind, high)})"


def describe_change(old: SegmentTable, new: SegmentTable) -> list[str]:
    """One line per matcher: its range on every dimension, before -> after."""
    names = old.space.names
    kinds = [(old.space.by_name[d.name].type, d.max) for d in old.space.dimensions]
    out = [f"epoch {old.epoch} -> {new.epoch}"]
    for m in old.members:
        before, after = old.segments_of(m), new.segments_of(m)
        parts = []
        for i, name in enumerate(names):
            b, a = before.get(i), after.get(i)
            parts.append(f"{name} {_range(b, *kinds[i])}" + ("" if a == b else f" -> {_range(a, *kinds[i])}"))
        out.append(f"  {m}: " + ", ".join(parts))
    return out


def _of(space: str) -> str:
    return "" if space == DEFAULT_SPACE else f"of space {space!r} "


async def _stored(store: Store, space: str = DEFAULT_SPACE) -> SegmentTable | None:
    raw = await store.get_table(space)
    return SegmentTable.from_json(raw) if raw else None


def _plan(store_url: str, seed_path: str, err: Callable[[str], None], space: str = DEFAULT_SPACE) -> Planned | int:
    """(seed, stored table, its re-seed) or an exit code."""
    try:
        seed = load_seed(seed_path, "--from")
    except BootError as exc:
        err(str(exc))
        return 2

    try:
        old = read_table(store_url, space)
    except OSError as exc:  # redis unreachable (redis' ConnectionError is one)
        err(f"--store {store_url}: {exc}")
        return 2
    if old is None and space != DEFAULT_SPACE:
        err(f"--space-name {space}: no such space in the store at {store_url}")
        return 2
    if old is None:
        err(f"--store {store_url}: no segment table there (is a cluster running on it?)")
        return 2
    try:
        return seed, old, reseeded(old, seed)
    except SeedError as exc:
        err(f"--from {seed_path}: {exc}")
        return 2


def plan_seed_file(store_url: str, seed_path: str, say: Callable[[str], None] = print,
                   space: str = DEFAULT_SPACE) -> int:
    """Print what applying the seed to `space`'s table would change; change nothing."""
    planned = _plan(store_url, seed_path, _err, space)
    if isinstance(planned, int):
        return planned
    _, old, new = planned
    for line in describe_change(old, new):
        say(line)
    say("not applied (add --apply)")
    return 0


def apply_seed_file(store_url: str, seed_path: str, timeout_s: float, say: Callable[[str], None] = print,
                    err: Callable[[str], None] = _err, tls_files: tls.TlsFiles | None = None,
                    space: str = DEFAULT_SPACE) -> int:
    """Re-seed `space`'s table in the cluster of `store_url` by the seed file: 0 once the store
    holds the new table (and the seed), 2 for bad input (the seed, the store, no table), 1 when
    no owner took the table within `timeout_s` (each refusal is said)."""
    planned = _plan(store_url, seed_path, err, space)
    if isinstance(planned, int):
        return planned
    seed, old, new = planned
    return asyncio.run(_apply(store_url, seed_path, (seed, old, new), timeout_s, say, err, tls_files, space))


async def _apply(store_url: str, seed_path: str, planned: Planned, timeout_s: float, say: Callable[[str], None],
                 err: Callable[[str], None], tls_files: tls.TlsFiles | None = None, space: str = DEFAULT_SPACE) -> int:
    from bluedove.store import Store

    seed, old, new = planned
    store = Store(store_url)
    deadline = time.monotonic() + timeout_s
    reason = f"re-seeded from {seed_path}"
    said: set[str] = set()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                err(f"not applied within --apply-timeout {timeout_s:g} s")
                return 1
            applied, why = await _propose(new, reason, left, tls_files, space)
            if applied:
                break
            if why not in said:
                say(f"not yet: {why}")
                said.add(why)
            await asyncio.sleep(RETRY_S)
            # Another change may have got in first: re-seed the table as it is now.
            current = await _stored(store, space)
            if current is not None and current.epoch >= new.epoch:
                if current.members != old.members:
                    err(f"the cluster's members changed meanwhile ({', '.join(current.members)}): "
                        "the seed places the old ones; make a seed for the new members")
                    return 1
                old, new = current, reseeded(current, seed)
        while (current := await _stored(store, space)) is None or current.epoch < new.epoch:
            if time.monotonic() > deadline:
                err(f"epoch {new.epoch} not in the store within --apply-timeout {timeout_s:g} s")
                return 1
            await asyncio.sleep(0.1)
        await store.put_seed(seed, space)  # the split planner's histograms
    finally:
        await store.close()
    for line in describe_change(old, current):
        say(line)
    say(f"applied: epoch {current.epoch}")
    return 0


async def _propose(new: SegmentTable, reason: str, timeout_s: float, tls_files: tls.TlsFiles | None = None,
                   space: str = DEFAULT_SPACE) -> tuple[bool, str]:
    """Hand `space`'s table to the first owner that answers: (applied, why not)."""
    why = "no owner has an address"
    req = pb.ProposeRequest(table_json=json.dumps(new.to_json()), reason=reason,
                            space="" if space == DEFAULT_SPACE else space)
    for m, addr in new.members.items():
        if not addr:
            continue
        try:
            async with tls.aio_channel(addr, tls_files) as ch:
                r = await pb_grpc.MatcherStub(ch).ProposeTable(req, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            why = f"{m} at {addr}: {exc.code().name} {exc.details()}"
            continue
        if r.ok:
            return True, ""
        return False, f"{m}: {r.reason}"
    return False, why
