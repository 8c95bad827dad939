"""The gRPC calls for spaces (CreateSpace, ListSpaces, GetSpaceInfo, DeleteSpace): the
operations of bluedove/dispatcher/operations/spaces.py with their answers as `SpaceInfo`
messages, which carry the REST body whole (`info_json`) and its main fields beside it."""

from __future__ import annotations

import json
from typing import Any

from bluedove.core.errors import ApiError
from bluedove.core.space import Space
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.operations import spaces
from bluedove.v1 import pubsub_pb2 as pb


def space_pb(space: Space) -> pb.Space:
    """GET /v1/space's schema as a message."""
    return pb.Space(dimensions=[pb.Dimension(name=x.name, min=x.min, max=x.max) for x in space.dimensions],
                    attributes=[pb.Attribute(name=a.name, type=a.type, optional=a.optional, min=a.min, max=a.max)
                                for a in space.schema],
                    partition=list(space.names))


def info_pb(body: dict[str, Any], made: bool = False) -> pb.SpaceInfo:
    schema = pb.Space(dimensions=[pb.Dimension(**x) for x in body["dimensions"]],
                      attributes=[pb.Attribute(**a) for a in body["attributes"]], partition=body["partition"])
    return pb.SpaceInfo(name=body["name"], state=body["state"], epoch=body["epoch"], schema=schema,
                        info_json=json.dumps(body), made=made)


async def create(d: Dispatcher, request: pb.CreateSpaceRequest, authorization: str | None) -> pb.SpaceInfo:
    try:
        body = json.loads(request.definition_json)
    except ValueError as exc:
        raise ApiError(400, "invalid_json", f"definition_json is not valid JSON: {exc}", "definition_json") from None
    info, made = await spaces.create_space(d, body, authorization)
    return info_pb(info, made)


async def listed(d: Dispatcher) -> pb.ListSpacesReply:
    return pb.ListSpacesReply(spaces=[info_pb(body) for body in await spaces.list_spaces(d)])


async def get(d: Dispatcher, request: pb.SpaceRef) -> pb.SpaceInfo:
    return info_pb(await spaces.get_space(d, request.name))


async def delete(d: Dispatcher, request: pb.SpaceRef, authorization: str | None) -> pb.Empty:
    await spaces.delete_space(d, request.name, authorization)
    return pb.Empty()
