"""The Forward call's messages on the wire: what a dispatcher builds and a matcher reads.

A dispatcher sends each dimension's messages as one `PackedPart`: the points as one float64
array, ids and bodies as two byte strings with the offsets where each ends, the publisher-id
flags as one byte each (proto/bluedove/v1/matcher.proto). Protobuf then handles a handful of
fields per part instead of four per message, and a matcher reads the arrays with
`np.frombuffer`: a message becomes a Python object only if it matched or needs a mark of its
own (`Part.id`, `Part.body`). The older form, one `ForwardMessage` per message, is still read
(`Part.from_messages`), for a dispatcher of the version before and for tools.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import msgspec
import numpy as np

from bluedove.v1 import matcher_pb2 as pb

ENDS = np.dtype("<u4")
POINTS = np.dtype("<f8")


# -- the dispatcher's side ----------------------------------------------------------------------
def new_ids(n: int) -> list[str]:
    """`n` fresh message ids, 32 hex digits each (128 random bits, as uuid4().hex gives), from
    one read of the system's random source."""
    h = os.urandom(16 * n).hex()
    return [h[i:i + 32] for i in range(0, 32 * n, 32)]


def iso_time(t: float) -> bytes:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z").encode()


def body_template(names: Iterable[str]) -> bytes:
    """The stored body {id, attributes, payload, published_at} as a %-template: the id, every
    value's JSON text, the payload's JSON text, the time (all bytes)."""
    attrs = b",".join(json.dumps(x).encode() + b":%s" for x in names)
    return b'{"id":"%s","attributes":{' + attrs + b'},"payload":%s,"published_at":"%s"}'


_FLOATS = msgspec.json.Encoder()


def bodies(template: bytes, ids: list[bytes], points: np.ndarray, payloads: list[bytes], at: bytes) -> list[bytes]:
    """Each message's stored body. The values' texts come from one msgspec encode of the whole
    batch, split at its commas: the shortest text that reads back as the same double, as
    `repr` gives (an exponent written `1e16` rather than `1e+16`), at a sixth of the cost of a
    `%r` per value (docs/benchmarks.md, "Publish")."""
    n, k = points.shape
    vals = _FLOATS.encode(points.ravel().tolist())[1:-1].split(b",") if n else []
    return [template % (i, *vals[j:j + k], p, at) for j, i, p in zip(range(0, n * k, k), ids, payloads)]


# A typed space's stored body: the id, the attributes' JSON text (made by the dispatcher's
# decoder), the payload's JSON text, the time.
TYPED_BODY = b'{"id":"%s","attributes":%s,"payload":%s,"published_at":"%s"}'


def typed_bodies(ids: list[bytes], attributes: list[bytes], payloads: list[bytes], at: bytes) -> list[bytes]:
    """Each message's stored body in a typed space: its attributes as the text given."""
    return [TYPED_BODY % (i, a, p, at) for i, a, p in zip(ids, attributes, payloads)]


def _joined(items: list[bytes]) -> tuple[bytes, bytes]:
    ends = np.fromiter(map(len, items), dtype=np.int64, count=len(items)).cumsum()
    return b"".join(items), ends.astype(ENDS).tobytes()


def encode_part(dim: int, points: np.ndarray, ids: list[bytes], bodies_: list[bytes],
                client: np.ndarray) -> pb.PackedPart:
    ids_blob, id_ends = _joined(ids)
    body_blob, body_ends = _joined(bodies_)
    return pb.PackedPart(dimension=dim, count=len(ids), points=np.ascontiguousarray(points, dtype=POINTS).tobytes(),
                         ids=ids_blob, id_ends=id_ends, bodies=body_blob, body_ends=body_ends,
                         client_ids=np.asarray(client, dtype=np.uint8).tobytes())


# -- the matcher's side -------------------------------------------------------------------------
class WireError(ValueError):
    """A packed part whose arrays do not agree with its count or the space."""


@dataclass
class Part:
    """One dimension's messages of a request, as arrays."""

    dim: int
    points: np.ndarray  # (n, k): one row per message, every dimension
    ids: bytes
    id_ends: np.ndarray
    body_blob: bytes
    body_ends: np.ndarray
    # Per message: the publisher chose the id (the message gets a mark of its own for the whole
    # window, matched or not: publishing it again writes nothing). An id the dispatcher made
    # needs only its deliveries' marks, which stop the dispatcher's own retry from writing them
    # twice.
    client: np.ndarray  # bool

    @property
    def n(self) -> int:
        return len(self.points)

    def id(self, i: int) -> str:
        return self.ids[self.id_ends[i - 1] if i else 0:self.id_ends[i]].decode()

    def body(self, i: int) -> bytes:
        return self.body_blob[self.body_ends[i - 1] if i else 0:self.body_ends[i]]

    @classmethod
    def from_packed(cls, p: pb.PackedPart, k: int) -> "Part":
        n = p.count
        try:
            points = np.frombuffer(p.points, dtype=POINTS).reshape(n, k)
            id_ends = np.frombuffer(p.id_ends, dtype=ENDS)
            body_ends = np.frombuffer(p.body_ends, dtype=ENDS)
            client = np.frombuffer(p.client_ids, dtype=np.uint8).astype(np.bool_)
        except ValueError as exc:
            raise WireError(f"part of dimension {p.dimension}: {exc}") from None
        if not len(id_ends) == len(body_ends) == len(client) == n or (n and (
                int(id_ends[-1]) != len(p.ids) or int(body_ends[-1]) != len(p.bodies)
                or (np.diff(id_ends.astype(np.int64)) < 0).any() or (np.diff(body_ends.astype(np.int64)) < 0).any())):
            raise WireError(f"part of dimension {p.dimension}: arrays of another length than its {n} messages")
        return cls(p.dimension, points, p.ids, id_ends, p.bodies, body_ends, client)

    @classmethod
    def from_messages(cls, dim: int, msgs: Sequence[pb.ForwardMessage], k: int) -> "Part":
        """The older form: one ForwardMessage per message."""
        points = np.array([list(m.point) for m in msgs], dtype=np.float64).reshape(len(msgs), -1)
        if points.shape[1] != k:
            raise WireError(f"part of dimension {dim}: points of {points.shape[1]} values in a space of {k}")
        ids, id_ends = _joined([m.id.encode() for m in msgs])
        body_blob, body_ends = _joined([m.body for m in msgs])
        return cls(dim, points, ids, np.frombuffer(id_ends, dtype=ENDS), body_blob,
                   np.frombuffer(body_ends, dtype=ENDS), np.array([m.client_id for m in msgs], dtype=np.bool_))
