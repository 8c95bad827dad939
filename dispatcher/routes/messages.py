"""Publishing: single and batch. 202 only once every delivery is stored."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from bluedove.model import parse_batch, parse_message
from bluedove.store.store import new_id
from bluedove.v1 import matcher_pb2 as pb
from dispatcher.deps import json_body, state

router = APIRouter()


def _forward_message(msg_id: str | None, point, payload, names, published: float) -> pb.ForwardMessage:
    mid = msg_id or new_id()
    body = {
        "id": mid,
        "attributes": dict(zip(names, point)),
        "payload": payload,
        "published_at": datetime.fromtimestamp(published, timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z"),
    }
    return pb.ForwardMessage(id=mid, point=point, body=json.dumps(body, separators=(",", ":")).encode(),
                             client_id=msg_id is not None)


async def _publish(request: Request, parsed) -> list[str]:
    d = state(request)
    now = time.time()
    names = d.space.names
    msgs = [_forward_message(mid, point, payload, names, now) for mid, point, payload in parsed]
    t0 = time.perf_counter()
    try:
        await d.forwarder.publish(msgs)
    except Exception:
        d.metrics.publish_failures.inc(len(msgs))
        raise
    d.metrics.publish_seconds.observe(time.perf_counter() - t0)
    d.metrics.published.inc(len(msgs))
    return [m.id for m in msgs]


@router.post("/v1/messages", status_code=202)
async def publish(request: Request):
    d = state(request)
    parsed = parse_message(await json_body(request), d.space, max_payload=d.s.max_payload_bytes)
    ids = await _publish(request, [parsed])
    return JSONResponse({"id": ids[0]}, status_code=202)


@router.post("/v1/messages:batch", status_code=202)
async def publish_batch(request: Request):
    d = state(request)
    parsed = parse_batch(await json_body(request), d.space, d.s.max_batch, d.s.max_payload_bytes)
    ids = await _publish(request, parsed)
    return JSONResponse({"ids": ids}, status_code=202)
