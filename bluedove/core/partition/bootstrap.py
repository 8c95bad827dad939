"""The first segment table of a cluster, written once whoever starts first.

`bluedove init`, `bluedove up` and a matcher started on an empty store all go through
`ensure_table`: it proposes `initial_table` with a compare-and-set from "no table" (epoch 0 →
1), so of several racers exactly one table is stored and every racer returns that one. A store
that already holds a table keeps it (idempotent), unless its space differs: then nothing
starts (`SpaceMismatch`), since subscriptions and messages of one space mean nothing in another.

Members are `ID[=HOST:PORT]`: an owner without an address yet ("") registers its own when
its matcher starts (`with_address`, another compare-and-set, epoch + 1).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from bluedove.core.partition.seeds import SeedError, seeded_table
from bluedove.core.partition.segments import SegmentTable, equal_partition
from bluedove.core.space import Space

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class BootError(ValueError):
    """A bootstrap input that cannot be used; the message names the flag or field."""


class SpaceMismatch(BootError):
    """The store holds a table over another space than the one given."""


class TableStore(Protocol):
    """Where the table and its seed are kept (bluedove/store/cluster_state.py)."""

    async def get_table(self) -> dict[str, Any] | None: ...

    async def put_table_if(self, expected_epoch: int, table: dict[str, Any]) -> bool: ...

    async def put_seed(self, seed: dict[str, Any]) -> None: ...


def describe_space(space: Space) -> str:
    """`x0 [0, 1000), x1 [0, 1000)`: a space's dimensions, as an error message names them."""
    def num(v: float) -> str:
        return str(int(v)) if float(v).is_integer() else repr(v)
    return ", ".join(f"{d.name} [{num(d.min)}, {num(d.max)})" for d in space.dimensions)


def check_space(stored: Space, given: Space, given_from: str = "--space") -> None:
    """Raise SpaceMismatch, naming both spaces' dimensions, unless they are the same."""
    if stored != given:
        raise SpaceMismatch(f"the store already holds a table over another space: stored {describe_space(stored)}; "
                            f"{given_from} gives {describe_space(given)}")


# -- members -------------------------------------------------------------------------------
def parse_members(spec: str, flag: str = "--members") -> dict[str, str]:
    """`m1=10.0.0.1:7001,m2` → {"m1": "10.0.0.1:7001", "m2": ""} (in order; "" = no address yet)."""
    out: dict[str, str] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            raise BootError(f"{flag} {spec!r}: an empty member (two commas, or one at an end)")
        mid, sep, addr = part.partition("=")
        mid, addr = mid.strip(), addr.strip()
        if not _ID.match(mid):
            raise BootError(f"{flag}: member id {mid!r} must be letters, digits, '.', '_' or '-'")
        if mid in out:
            raise BootError(f"{flag}: member {mid} is named twice")
        if sep:
            check_address(addr, f"{flag} {mid}=")
        out[mid] = addr
    return out


def check_address(addr: str, flag: str) -> None:
    """HOST:PORT with a port from 1 to 65535 (an IPv6 host in brackets)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BootError(f"{flag}{addr!r}: expected HOST:PORT with a port from 1 to 65535")


def numbered_members(n: int, flag: str = "--matchers") -> dict[str, str]:
    """`--matchers N`: ids m1..mN, none with an address yet."""
    if n < 1:
        raise BootError(f"{flag} {n}: at least one matcher is needed")
    return {f"m{i + 1}": "" for i in range(n)}


# -- the table -----------------------------------------------------------------------------
def load_seed(path: str | Path, flag: str = "--seed") -> dict[str, Any]:
    """Read a seed file (bluedove/core/partition/seeds.py: the version 1 form or `{"cuts": …}`); checked
    against the space and members by `initial_table`."""
    try:
        data: dict[str, Any] = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise BootError(f"{flag} {path}: {exc}") from exc
    return data


def initial_table(space: Space, members: dict[str, str], seed: dict[str, Any] | None = None) -> SegmentTable:
    """Epoch 1: every dimension cut into len(members) segments. Equal widths, member j owning
    segment j on each; or as the seed says (its boundaries and placement: bluedove/core/partition/seeds.py)."""
    if not members:
        raise BootError("a segment table needs at least one matcher")
    if seed is None:
        return equal_partition(space, members, epoch=1)
    try:
        return seeded_table(space, members, seed, epoch=1)
    except SeedError as exc:
        raise BootError(str(exc)) from exc


def spanned(members: dict[str, str], n: int | None, name: str, busy: dict[str, float] | None = None) -> dict[str, str]:
    """The `n` of `members` (all when n is None or not fewer) a new space named `name` is laid out
    over, in id order: the least busy first (`busy`: a fraction of what each can do, compared to
    a tenth; unknown counts as idle), then by rendezvous hashing of the name, so that spaces of
    one or a few matchers spread evenly over idle matchers whatever order they are created in,
    instead of all landing on the first ids."""
    if n is None or n >= len(members):
        return dict(sorted(members.items()))
    busy = busy or {}

    def rank(member: str) -> tuple[int, bytes]:
        h = hashlib.blake2b(f"{name}\0{member}".encode(), digest_size=8).digest()
        return round(10 * busy.get(member, 0.0)), h

    chosen = sorted(members, key=rank)[:max(1, n)]
    return {m: members[m] for m in sorted(chosen)}


async def ensure_table(store: TableStore, space: Space, members: dict[str, str], seed: dict[str, Any] | None = None,
                       given_from: str = "--space") -> tuple[SegmentTable, bool]:
    """The stored table, written first if there is none: (table, True if we wrote it); the
    seed it was laid out by, if any, is stored beside it.

    Compare-and-set from "no table": of any number of racers exactly one writes, and every one
    returns the stored table. Raises SpaceMismatch if the stored table's space differs."""
    proposed = initial_table(space, members, seed)  # bad members or seed fail before the store is touched
    while True:
        raw = await store.get_table()
        if raw is None:
            if await store.put_table_if(0, proposed.to_json()):
                if seed is not None:
                    await store.put_seed(seed)
                return proposed, True
            continue  # another racer wrote first: read theirs
        table = SegmentTable.from_json(raw)
        check_space(table.space, space, given_from)
        return table, False


def with_address(table: SegmentTable, member: str, address: str) -> SegmentTable:
    """The next epoch of `table` with `member`'s address set (its segments unchanged)."""
    return replace(table, epoch=table.epoch + 1, members={**table.members, member: address})


async def register_address(store: TableStore, member: str, address: str, table: SegmentTable,
                           retry_s: float = 0.05) -> SegmentTable:
    """Make the stored table list `address` for owner `member` (compare-and-set, epoch + 1),
    retrying on a newer table while `member` is still an owner with another address. Returns
    the table it ends with (unchanged if nothing was to do)."""
    while member in table.members and table.members[member] != address:
        new = with_address(table, member, address)
        if await store.put_table_if(table.epoch, new.to_json()):
            return new
        raw = await store.get_table()
        if raw is None:  # the table was removed under us: nothing to register in
            await asyncio.sleep(retry_s)
            continue
        table = SegmentTable.from_json(raw)
    return table
