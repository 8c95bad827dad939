"""A chunk of a space's message log: one matched batch's messages, as the Forward call's arrays.

A matcher appends each batch it matched, in a space with a retention, as one entry of the log
(bluedove/store/message_log.py): the points as one float64 array (a row per message, every
dimension), ids and bodies as two byte strings with the offsets where each ends, as a packed
part carries them (bluedove/core/wire.py). Appending costs one entry per batch, never a
field per message, and a replay reads a chunk back with `np.frombuffer`: a message becomes a
Python object only if it matches the subscription being replayed.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from bluedove.core.wire import ENDS, POINTS, Part, WireError

# zlib's fastest level: a stored body (JSON, a hex id) shrinks to about a third for ~0.9 µs a
# message of the matcher's CPU, and Redis keeps, writes to its AOF and rewrites a third of the
# bytes (docs/benchmarks.md, "Replay").
LEVEL = 1


def _ends(parts: Sequence[Part], field: str) -> bytes:
    """The parts' end offsets of `field` ("id_ends" or "body_ends") as one array of the joined blob."""
    out, base = [], 0
    for p in parts:
        ends = getattr(p, field)
        out.append(ends.astype(np.int64) + base)
        base += int(ends[-1]) if len(ends) else 0
    joined = np.concatenate(out) if out else np.empty(0, dtype=np.int64)
    if len(joined) and int(joined[-1]) >= 2 ** 32:
        raise WireError("a chunk of more than 4 GiB")
    return joined.astype(ENDS).tobytes()


def chunk_fields(parts: Sequence[Part], k: int) -> dict[str, bytes | int]:
    """The log entry of a batch's parts (in order): n, k, points, ids, id ends, bodies, body ends;
    the ids and bodies zlib-compressed (`z`: 1)."""
    points = np.concatenate([p.points for p in parts]) if parts else np.empty((0, k))
    return {"n": len(points), "k": k, "p": np.ascontiguousarray(points, dtype=POINTS).tobytes(),
            "i": zlib.compress(b"".join(p.ids for p in parts), LEVEL), "ie": _ends(parts, "id_ends"),
            "b": zlib.compress(b"".join(p.body_blob for p in parts), LEVEL), "be": _ends(parts, "body_ends"),
            "z": 1}


class Chunk:
    """A log entry read back: its points as an array, its ids and bodies decompressed at the first
    message asked for (a replay asks only for the messages in its filter's boxes)."""

    def __init__(self, n: int, points: np.ndarray, ids: bytes, id_ends: np.ndarray, bodies: bytes,
                 body_ends: np.ndarray, compressed: bool) -> None:
        self.n, self.points = n, points
        self._ids, self._bodies, self.id_ends, self.body_ends = ids, bodies, id_ends, body_ends
        self._compressed = compressed

    def _open(self) -> None:
        if self._compressed:
            try:
                self._ids, self._bodies = zlib.decompress(self._ids), zlib.decompress(self._bodies)
            except zlib.error as exc:
                raise WireError(f"a log chunk: {exc}") from None
            self._compressed = False
            if self.n and (int(self.id_ends[-1]) != len(self._ids) or int(self.body_ends[-1]) != len(self._bodies)):
                raise WireError(f"a log chunk: ids or bodies of another length than its {self.n} messages")

    def id(self, i: int) -> str:
        self._open()
        return self._ids[int(self.id_ends[i - 1]) if i else 0:int(self.id_ends[i])].decode()

    def body(self, i: int) -> bytes:
        self._open()
        return self._bodies[int(self.body_ends[i - 1]) if i else 0:int(self.body_ends[i])]


def chunk_part(fields: Mapping[bytes, bytes]) -> Chunk:
    """A log entry read back (WireError when its arrays do not agree)."""
    try:
        n, k = int(fields[b"n"]), int(fields[b"k"])
        points = np.frombuffer(fields[b"p"], dtype=POINTS).reshape(n, k)
        id_ends = np.frombuffer(fields[b"ie"], dtype=ENDS)
        body_ends = np.frombuffer(fields[b"be"], dtype=ENDS)
        ids, bodies = fields[b"i"], fields[b"b"]
    except (KeyError, ValueError) as exc:
        raise WireError(f"a log chunk: {exc!r}") from None
    compressed = fields.get(b"z") == b"1"
    if not len(id_ends) == len(body_ends) == n or (n and not compressed and (
            int(id_ends[-1]) != len(ids) or int(body_ends[-1]) != len(bodies))):
        raise WireError(f"a log chunk: arrays of another length than its {n} messages")
    return Chunk(n, points, ids, id_ends, bodies, body_ends, compressed)
