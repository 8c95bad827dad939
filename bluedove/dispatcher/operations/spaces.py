"""Spaces: create, list, read and delete them (docs/api.md, "Spaces"), for the REST routes
(bluedove/dispatcher/routes/spaces.py) and the gRPC calls (bluedove/dispatcher/grpc_spaces.py).

The registry (bluedove/store/spaces.py) holds every space; each dispatcher keeps a copy
(bluedove/dispatcher/space_registry.py). A space is answered as GET /v1/spaces/{space} gives
it: its definition, its table's epoch, its counts, when it was made and its state. The
default space's schema, epoch and matchers are the dispatcher's (its segment table's); another
space's are its own table's, laid out when the space is made: every dimension cut equally
over the cluster's matchers (over `matchers` of them, the least busy, when the space asks for fewer).
"""

from __future__ import annotations

import asyncio
from typing import Any

from bluedove.core.apikeys import ADMIN
from bluedove.core.errors import ApiError
from bluedove.core.partition.bootstrap import initial_table, spanned
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.spaces import (
    DEFAULT_SPACE,
    SpaceSpec,
    check_space_name,
    default_spec,
    parse_space_spec,
    space_conflict,
)
from bluedove.dispatcher.auth import caller
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.space_paths import no_space
from bluedove.store.spaces import ACTIVE, SpaceConflict, SpaceRecord


def space_json(d: Dispatcher, rec: SpaceRecord, subs: int, table: SegmentTable | None = None) -> dict[str, Any]:
    """The space as the API shows it; `table`: a named space's (the default's is the dispatcher's)."""
    spec = rec.spec
    default = spec.name == DEFAULT_SPACE
    table = d.cluster.table if default else table
    schema = (d.space if default else spec.space).api_json()
    return {"name": spec.name, **schema, "matchers": spec.matchers, "retention_s": spec.retention_s,
            "quotas": spec.quotas.to_json(), "epoch": table.epoch if table else 0,
            "counts": {"subscriptions": subs, "matchers": len(table.members) if table else 0},
            "created": rec.created, "state": rec.state}


async def _described(d: Dispatcher, rec: SpaceRecord) -> dict[str, Any]:
    """A named space as GET shows it: with a log, the chunks it holds too (docs/api.md, "Replay"; the
    default space's, `_default`, as well)."""
    name = rec.spec.name
    subs, raw = await asyncio.gather(d.registry.spaces.subscriptions(name), d.store.get_table(name))
    out = space_json(d, rec, subs, SegmentTable.from_json(raw) if raw else None)
    if rec.spec.retention_s:
        out["log_chunks"] = await d.store.log_entries(name)
    return out


def first_table(d: Dispatcher, spec: SpaceSpec) -> SegmentTable:
    """A named space's first table: its dimensions cut equally over the cluster's matchers (the
    default table's members), or over `spec.matchers` of them when it asks for fewer: the least
    busy, spread by the space's name among equally busy ones (`spanned`)."""
    members = spanned(d.cluster.current().members, spec.matchers, spec.name, d.cluster.busy())
    return initial_table(spec.space, members)


async def _default(d: Dispatcher) -> dict[str, Any]:
    """The default space, also before a matcher of this version has registered it (created: null)."""
    spaces = d.registry.spaces
    rec, subs = await asyncio.gather(spaces.get(DEFAULT_SPACE), spaces.subscriptions(DEFAULT_SPACE))
    if rec is None:
        return {**space_json(d, SpaceRecord(default_spec(d.space), 0, ACTIVE), subs), "created": None}
    out = space_json(d, rec, subs)
    if rec.spec.retention_s:
        out["log_chunks"] = await d.store.log_entries(DEFAULT_SPACE)
    return out


async def create_space(d: Dispatcher, body: Any, authorization: str | None) -> tuple[dict[str, Any], bool]:
    """(the space, True) when made now; (it, False) when it exists with this very definition;
    409 `conflict` naming the first field that differs (or `state` while it is being deleted).
    With keys on: the admin scope, and a key that may use the space."""
    await caller(d.auth, authorization, ADMIN)
    spec = parse_space_spec(body)
    await caller(d.auth, authorization, ADMIN, spec.name)
    try:
        rec, made = await d.registry.spaces.create(spec)
    except SpaceConflict as exc:
        raise space_conflict(spec.name, exc.field) from None
    # Its table next: a create cut short before it is finished by the client's retry (200).
    if await d.registry.spaces.lay_out(rec, first_table(d, spec).to_json()) is None:
        raise no_space(spec.name)  # deleted meanwhile
    d.registry.remember(spec.name, rec)
    return await _described(d, rec), made


async def list_spaces(d: Dispatcher) -> list[dict[str, Any]]:
    """Every space, by name, `default` first, those being deleted included (state `deleting`)."""
    others = [rec for rec in await d.registry.spaces.list() if rec.spec.name != DEFAULT_SPACE]
    return [await _default(d), *await asyncio.gather(*(_described(d, rec) for rec in others))]


async def get_space(d: Dispatcher, space: str) -> dict[str, Any]:
    if space == DEFAULT_SPACE:
        return await _default(d)
    check_space_name(space, "space")
    rec = await d.registry.spaces.get(space)
    if rec is None:
        raise no_space(space)
    return await _described(d, rec)


async def delete_space(d: Dispatcher, space: str, authorization: str | None) -> None:
    """Mark the space deleting (publishing to it is a 404 from now on) and purge it in the
    background; its subscriptions go, queues stay. 404 for no such space (or one already being
    deleted), 409 for `default`, the cluster's own."""
    check_space_name(space, "space")
    await caller(d.auth, authorization, ADMIN, space)
    if space == DEFAULT_SPACE:
        raise ApiError(409, "conflict", f"the space {DEFAULT_SPACE!r} is the cluster's own: it cannot be deleted",
                       "space")
    if await d.registry.spaces.delete(space) != 1:
        raise no_space(space)
    d.registry.remember(space, None)
    d.registry.purge_soon(space)
