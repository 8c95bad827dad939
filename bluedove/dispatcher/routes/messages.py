"""Publishing: single and batch. 202 only once every delivery is stored.

Both are served by `bluedove.dispatcher.routes.hot` ahead of FastAPI's routing. The answer is written
as bytes: an id is 1-128 characters of A-Z a-z 0-9 . _ : ~ - (ours are hex), none of which
JSON escapes, so `{"ids":["…","…"]}` joined is what `json.dumps` would give, without a
pass over a list of 200 strings per request."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from bluedove.core.apikeys import PUBLISH
from bluedove.dispatcher import operations as ops
from bluedove.dispatcher.auth import caller
from bluedove.dispatcher.deps import space_of, state

router = APIRouter()
JSON = "application/json"


@router.post("/v1/messages", status_code=202)
async def publish(request: Request) -> Response:
    d = state(request)
    space = space_of(request)
    key = await caller(d.auth, request.headers.get("authorization"), PUBLISH, space)
    mid = await ops.publish_rest(d, await request.body(), key, await d.paths.get(space))
    return Response(b'{"id":"' + mid.encode() + b'"}', status_code=202, media_type=JSON)


@router.post("/v1/messages:batch", status_code=202)
async def publish_batch(request: Request) -> Response:
    d = state(request)
    space = space_of(request)
    key = await caller(d.auth, request.headers.get("authorization"), PUBLISH, space)
    ids = await ops.publish_rest_batch(d, await request.body(), key, await d.paths.get(space))
    return Response(('{"ids":["' + '","'.join(ids) + '"]}').encode(), status_code=202, media_type=JSON)
