"""`bluedove export catalogue`: the subscription catalogue as Parquet files, for offline jobs
(the skew statistics of `bluedove seed`).

The catalogue is read in HSCAN pages and written one row group at a time, so memory holds one
row group, never the whole catalogue. Columns: `id`, `queue`, and `lows`/`highs`, the
subscription's bounds in the space's dimension order (a wildcard is the dimension's range),
as the matchers index them; and per attribute of the space, in its order (partition or not),
`named` (whether a condition names it) and `attr_lows`/`attr_highs`, the coordinate intervals
its conditions admit (bluedove/core/filters.py; a wildcard is the attribute's whole range), which
`bluedove seed` reports to choose the partition attributes by. OUT/space.json is the stored
table's space.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bluedove.core.errors import ApiError
from bluedove.core.filters import merge_intervals, parse_filter
from bluedove.core.model import build_subscription, only_ranges
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import Space
from bluedove.core.spaces import DEFAULT_SPACE, check_space_name
from bluedove.runtime.extras import require
from bluedove.store import keys as K
from bluedove.store.client import RedisClient, sync_client

ROW_GROUP_ROWS = 100_000  # the most rows of one Parquet row group
FILE_ROWS = 1_000_000  # rows per part file
SCAN_COUNT = 10_000  # the HSCAN page size asked for
# a subscription's row: id, queue, lows, highs, and per attribute: named, its intervals' lows and highs
Row = tuple[str, str, tuple[float, ...], tuple[float, ...], list[bool], list[list[float]], list[list[float]]]


class ExportError(Exception):
    """Bad input; the message starts with the flag it is about (exit 2)."""


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("export", help="write the catalogue out for offline jobs (Parquet)")
    what = p.add_subparsers(dest="what", required=True)
    c = what.add_parser("catalogue", help="every subscription as Parquet: bounds and per-attribute conditions",
                        description="Write OUT/subscriptions/part-NNNNN.parquet (id, queue, lows, highs: the bounds "
                                    "in the space's dimension order, a wildcard being the dimension's range; "
                                    "named, attr_lows, attr_highs: per attribute, whether a condition names it "
                                    "and the coordinate intervals it admits) and "
                                    "OUT/space.json. Part files of an earlier export in OUT are replaced.")
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--data-dir", default=None, metavar="DIR",
                     help="a stopped local cluster's data dir (`bluedove up --data-dir`): its store is started "
                          "privately for the export, then stopped")
    src.add_argument("--store", default=None, metavar="URL",
                     help="a store's URL, a running cluster's (redis://host:port/db or redis+cluster://host:port,...)")
    c.add_argument("--out", required=True, metavar="OUT", help="the folder to write")
    c.add_argument("--space-name", default=DEFAULT_SPACE, metavar="NAME",
                   help="the space whose subscriptions to write (default: the default space)")
    c.add_argument("--rows-per-file", type=int, default=FILE_ROWS, metavar="N",
                   help=f"rows per part file (default {FILE_ROWS:,})")
    c.add_argument("--row-group-rows", type=int, default=ROW_GROUP_ROWS, metavar="N",
                   help=f"rows per Parquet row group, at most {ROW_GROUP_ROWS:,} (the default)")
    c.set_defaults(func=_cmd_export_catalogue)


def _cmd_export_catalogue(args: argparse.Namespace) -> int:
    require("spark", "bluedove export catalogue", only=("pyarrow",))  # Parquet is written with pyarrow
    t0 = time.monotonic()
    try:
        if args.rows_per_file < 1:
            raise ExportError(f"--rows-per-file {args.rows_per_file}: expected 1 or more")
        if not 1 <= args.row_group_rows <= ROW_GROUP_ROWS:
            raise ExportError(f"--row-group-rows {args.row_group_rows}: expected 1 to {ROW_GROUP_ROWS}")
        try:
            check_space_name(args.space_name, "--space-name")
        except ApiError as exc:
            raise ExportError(exc.message) from None
        out = _prepare_out(args.out)
        shape = (args.rows_per_file, args.row_group_rows, args.space_name)
        if args.data_dir is not None:
            rows, files = _export_data_dir(Path(args.data_dir), out, *shape)
        else:
            rows, files = _export_store(args.store, "--store", out, *shape)
    except ExportError as exc:
        print(f"bluedove export catalogue: {exc}", file=sys.stderr)
        return 2
    print(f"exported {rows:,} subscriptions of space {args.space_name!r} to {out / 'subscriptions'} in "
          f"{files} file(s), {time.monotonic() - t0:.1f} s", flush=True)
    return 0


def _prepare_out(path: str) -> Path:
    out = Path(path)
    try:
        (out / "subscriptions").mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ExportError(f"--out {path}: not writable: {exc.strerror or exc}") from None
    return out


def running_store_port(redis_dir: Path) -> int | None:
    """The port of a redis-server running on `redis_dir`'s files (a cluster that is up), or None.
    Read from /proc: redis-server works in its --dir and titles itself `redis-server HOST:PORT`."""
    want = str(redis_dir.resolve())
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "comm").read_text().strip() != "redis-server" or os.readlink(proc / "cwd") != want:
                continue
            title = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        port = title.rsplit(":", 1)[-1].split()[0] if ":" in title else ""
        return int(port) if port.isdigit() else 0
    return None


def _export_data_dir(data_dir: Path, out: Path, file_rows: int, group_rows: int, name: str) -> tuple[int, int]:
    from bluedove.store.server import RedisServer

    redis_dir = data_dir / "redis"
    if not data_dir.is_dir():
        raise ExportError(f"--data-dir {data_dir}: no such folder")
    if not (redis_dir / "appendonlydir").is_dir() and not (redis_dir / "appendonly.aof").is_file():
        raise ExportError(f"--data-dir {data_dir}: no store there (expected {redis_dir}, as `bluedove up "
                          f"--data-dir {data_dir}` makes)")
    port = running_store_port(redis_dir)
    if port is not None:
        raise ExportError(f"--data-dir {data_dir}: its store is running (a cluster is up); export from it with "
                          f"--store redis://127.0.0.1:{port or 'PORT'}/0")
    try:
        server = RedisServer(redis_dir).start()
    except RuntimeError as exc:
        raise ExportError(f"--data-dir {data_dir}: could not start its store: {exc}") from None
    try:
        return _export_store(server.url, f"--data-dir {data_dir}", out, file_rows, group_rows, name)
    finally:
        server.stop()


def _export_store(url: str, flag: str, out: Path, file_rows: int, group_rows: int, name: str) -> tuple[int, int]:
    import redis

    try:
        r = sync_client(url, socket_connect_timeout=5, socket_timeout=60)
    except ValueError as exc:  # not a redis URL
        raise ExportError(f"--store {url}: {exc}") from None
    try:
        raw = r.get(K.TABLE if name == DEFAULT_SPACE else K.space_table(name))
        if raw is None and name != DEFAULT_SPACE:
            raise ExportError(f"--space-name {name}: no such space in the store at {url}")
        if raw is None:
            raise ExportError(f"{flag}: no segment table in the store at {url} (no cluster has run on it)")
        space = SegmentTable.from_json(json.loads(raw)).space
        (out / "space.json").write_text(json.dumps(space.to_json()))
        for old in (out / "subscriptions").glob("part-*.parquet"):  # an earlier export's, replaced
            old.unlink()
        return write_parquet(_rows(r, space, name), space, out / "subscriptions", file_rows, group_rows)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise ExportError(f"{flag}: the store at {url} is unreachable: {exc}") from None
    except OSError as exc:
        raise ExportError(f"--out {out}: {exc.strerror or exc}") from None
    finally:
        r.close()


def _rows(r: RedisClient, space: Space, name: str = DEFAULT_SPACE) -> Iterator[Row]:
    """The row of every subscription stored in space `name`, read in HSCAN pages."""
    alone = attribute_spaces(space)
    shard_key = K.catalog_hash if name == DEFAULT_SPACE else (lambda n: K.space_catalog_hash(name, n))
    for shard in range(K.CATALOG_SHARDS):
        for _, text in r.hscan_iter(shard_key(shard), count=SCAN_COUNT):
            data = json.loads(text)
            yield catalogue_row(data["id"], data["queue"], data["predicates"], space, alone)


def attribute_spaces(space: Space) -> dict[str, Space]:
    """Per attribute, the space that cuts it alone: its filter's boxes there are the intervals
    the subscription admits on it (`attribute_conditions`)."""
    return {a.name: Space.of(space.schema, (a.name,)) for a in space.schema}


def attribute_conditions(predicates: dict[str, Any], space: Space,
                         alone: dict[str, Space]) -> tuple[list[bool], list[list[float]], list[list[float]]]:
    """Per attribute of `space` in its order: whether a condition names it (in any `any_of`
    member too), and the sorted, disjoint coordinate intervals (lows, highs) its conditions
    admit, the union over the alternatives; an attribute no condition names admits its range."""
    names = set(predicates) | {n for alt in predicates.get("any_of") or () if isinstance(alt, dict) for n in alt}
    named, lows, highs = [], [], []
    for a in space.schema:
        iv = [(a.low, a.high)]
        if a.name in names:
            if space.typed or not only_ranges(predicates):
                try:
                    boxes = parse_filter(predicates, alone[a.name]).boxes
                    iv = merge_intervals(sorted((lo[0], hi[0]) for lo, hi in boxes))
                except ApiError:  # over MAX_BOXES intervals on it alone: counted as admitting its range
                    pass
            else:  # a range in a space of numbers, clipped to the space
                lo, hi = predicates[a.name]
                iv = [(max(float(lo), a.low), min(float(hi), a.high))]
                iv = iv if iv[0][0] < iv[0][1] else []
        named.append(a.name in names)
        lows.append([lo for lo, _ in iv])
        highs.append([hi for _, hi in iv])
    return named, lows, highs


def catalogue_row(sub_id: str, queue: str, predicates: dict[str, Any], space: Space,
                  alone: dict[str, Space]) -> Row:
    """A subscription's row of the export (the module docstring's columns)."""
    sub = build_subscription(sub_id, queue, predicates, space)
    return (sub.id, sub.queue, sub.lows, sub.highs, *attribute_conditions(predicates, space, alone))


def write_parquet(rows: Iterator[Row], space: Space, folder: Path, file_rows: int,
                  group_rows: int) -> tuple[int, int]:
    """`rows` into folder/part-00000.parquet, … ; returns (rows, files). One row group in memory."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    nested = pa.list_(pa.list_(pa.float64()))
    schema = pa.schema([("id", pa.string()), ("queue", pa.string()),
                        ("lows", pa.list_(pa.float64())), ("highs", pa.list_(pa.float64())),
                        ("named", pa.list_(pa.bool_())), ("attr_lows", nested), ("attr_highs", nested)],
                       metadata={"space": json.dumps(space.to_json())})
    total = files = in_file = 0
    writer = None
    cols: tuple[list[object], ...] = tuple([] for _ in schema.names)  # a row group's columns, in order

    def flush() -> None:
        nonlocal writer, files, in_file
        if writer is None:
            writer = pq.ParquetWriter(folder / f"part-{files:05d}.parquet", schema)
            files += 1
        writer.write_table(pa.table([pa.array(c, t) for c, t in zip(cols, schema.types)], schema=schema),
                           row_group_size=group_rows)
        in_file += len(cols[0])
        for c in cols:
            c.clear()
        if in_file >= file_rows:
            writer.close()
            writer, in_file = None, 0

    try:
        for row in rows:
            for c, v in zip(cols, row):
                c.append(v)
            total += 1
            if len(cols[0]) >= min(group_rows, file_rows - in_file):
                flush()
        if cols[0] or files == 0:  # the rest; an empty catalogue still gets one file with the schema
            flush()
    finally:
        if writer is not None:
            writer.close()
    return total, files

