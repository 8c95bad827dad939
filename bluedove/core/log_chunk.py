"""A chunk of a space's message log: one matched batch's messages, as the Forward call's arrays.

A matcher appends each batch it matched, in a space with a retention, as one entry of the log
(bluedove/store/message_log.py): the points as one float64 array (a row per message, every
dimension), ids and bodies as two byte strings with the offsets where each ends, as a packed
part carries them (bluedove/core/wire.py). Appending costs one entry per batch, never a
field per message, and a replay reads a chunk back with `np.frombuffer`: a message becomes a
Python object only if it matches the subscription being replayed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from bluedove.core.wire import ENDS, POINTS, Part, WireError


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
    """The log entry of a batch's parts (in order): n, k, points, ids, id ends, bodies, body ends."""
    points = np.concatenate([p.points for p in parts]) if parts else np.empty((0, k))
    return {"n": len(points), "k": k, "p": np.ascontiguousarray(points, dtype=POINTS).tobytes(),
            "i": b"".join(p.ids for p in parts), "ie": _ends(parts, "id_ends"),
            "b": b"".join(p.body_blob for p in parts), "be": _ends(parts, "body_ends")}


def chunk_part(fields: Mapping[bytes, bytes]) -> Part:
    """A log entry read back as a part (its dimension -1, no publisher marks); WireError when
    its arrays do not agree."""
    try:
        n, k = int(fields[b"n"]), int(fields[b"k"])
        points = np.frombuffer(fields[b"p"], dtype=POINTS).reshape(n, k)
        id_ends = np.frombuffer(fields[b"ie"], dtype=ENDS)
        body_ends = np.frombuffer(fields[b"be"], dtype=ENDS)
        ids, bodies = fields[b"i"], fields[b"b"]
    except (KeyError, ValueError) as exc:
        raise WireError(f"a log chunk: {exc!r}") from None
    if not len(id_ends) == len(body_ends) == n or (n and (int(id_ends[-1]) != len(ids)
                                                          or int(body_ends[-1]) != len(bodies))):
        raise WireError(f"a log chunk: arrays of another length than its {n} messages")
    return Part(-1, points, ids, id_ends, bodies, body_ends, np.zeros(n, dtype=np.bool_))
