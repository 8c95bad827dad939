"""Request bodies as the SDK sends them: a message's JSON, and bodies cut into batch calls."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from bluedove.client.transport import Json

MAX_BATCH = 1000
# The most a batch call of publish_many or subscribe_many carries, in bytes of JSON: half the
# dispatcher's default request limit (16 MiB, docs/api.md "Limits"), so that a batch of large
# messages is split into calls the dispatcher takes, not refused whole.
BATCH_BYTES = 8 * 1024 * 1024


def chunks(bodies: list[Json], max_bytes: int = BATCH_BYTES) -> Iterator[list[Json]]:
    """`bodies` in order, in batches of at most MAX_BATCH and `max_bytes` of JSON (a body over
    `max_bytes` goes alone: the dispatcher says whether it takes it)."""
    chunk: list[Json] = []
    size = 0
    for body in bodies:
        n = len(json.dumps(body, separators=(",", ":"))) + 1
        if chunk and (len(chunk) == MAX_BATCH or size + n > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(body)
        size += n
    if chunk:
        yield chunk


def all_have_ids(bodies: list[Json]) -> bool:
    """Whether every message names its id (a batch safe to send again)."""
    return all(b.get("id") for b in bodies)


def message(attributes: Mapping[str, Any], payload: Any, msg_id: str | None) -> Json:
    body: Json = {"attributes": dict(attributes), "payload": payload}
    if msg_id is not None:
        body["id"] = msg_id
    return body
