"""A queue's bounds: the cap on its undelivered deliveries, its retention, its dead-letter queue,
how long it keeps acked deliveries; the optional body of `POST /v1/queues` that sets them, and
the body of `POST /v1/queues/{queue}/seek` (docs/api.md, "Queues")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bluedove.core.errors import ApiError
from bluedove.core.times import epoch_ms

# What a client may ask of one queue (the operator's default may be larger, or none).
MAX_UNDELIVERED = 1_000_000
MAX_RETENTION_S = 366 * 86_400
MAX_DELIVERIES = 1_000


@dataclass(frozen=True)
class QueueBounds:
    """One queue's bounds, fixed at creation and kept in its hash."""

    max_undelivered: int  # 0 = no cap
    retention_s: int = 0  # 0 = none
    dead_letter_queue: str | None = None
    max_deliveries: int = 0  # with dead_letter_queue: how many times a delivery is handed out
    retain_acked_s: int = 0  # how long acked deliveries are kept, for a seek (0 = not kept)

    def fields(self) -> dict[str, Any]:
        """The queue hash's fields (bluedove/store/keys.py)."""
        out: dict[str, Any] = {"max_undelivered": self.max_undelivered, "retention_s": self.retention_s}
        if self.dead_letter_queue:
            out |= {"dl_queue": self.dead_letter_queue, "dl_max": self.max_deliveries}
        if self.retain_acked_s:
            out["retain_acked_s"] = self.retain_acked_s
        return out


def _bad(field: str, message: str) -> ApiError:
    return ApiError(422, "invalid_request", message, field)


def _int(body: dict[str, Any], field: str, name: str, lo: int, hi: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _bad(field, f"{field} must be an integer from {lo:,} to {hi:,}")
    return v


def _unknown(body: dict[str, Any], known: set[str], prefix: str = "") -> None:
    extra = sorted(set(body) - known)
    if extra:
        raise _bad(prefix + extra[0], f"unknown field {prefix + extra[0]!r}")


def parse_queue_request(body: Any, default: QueueBounds) -> QueueBounds:
    """The bounds a `POST /v1/queues` body asks for, `default` for what it leaves out (no body
    at all: `default`). 422 invalid_request naming the field for a bad value; the dead-letter
    queue's existence is the caller's to check."""
    if body is None:
        return default
    if not isinstance(body, dict):
        raise _bad("body", "the body must be a JSON object (or absent)")
    _unknown(body, {"max_undelivered", "retention_s", "dead_letter", "retain_acked_s"})
    cap = _int(body, "max_undelivered", "max_undelivered", 1, MAX_UNDELIVERED)
    retention = _int(body, "retention_s", "retention_s", 0, MAX_RETENTION_S)
    kept = _int(body, "retain_acked_s", "retain_acked_s", 0, MAX_RETENTION_S) or 0
    dl, most = None, 0
    raw = body.get("dead_letter")
    if raw is not None:
        if not isinstance(raw, dict):
            raise _bad("dead_letter", "dead_letter must be an object {\"queue\", \"max_deliveries\"}")
        _unknown(raw, {"queue", "max_deliveries"}, "dead_letter.")
        dl = raw.get("queue")
        if not isinstance(dl, str) or not dl:
            raise _bad("dead_letter.queue", "dead_letter.queue must be a queue id")
        got = _int(raw, "dead_letter.max_deliveries", "max_deliveries", 1, MAX_DELIVERIES)
        if got is None:
            raise _bad("dead_letter.max_deliveries", "dead_letter.max_deliveries is required")
        most = got
    return QueueBounds(default.max_undelivered if cap is None else cap,
                       default.retention_s if retention is None else retention, dl, most, kept)


def time_ms(v: Any) -> int:
    """A seek's `time` as milliseconds since the epoch (one before it: 0), rounded down: an RFC
    3339 string or an integer of milliseconds. 422 naming `time` for anything else."""
    return max(epoch_ms(v, "time"), 0)


def parse_seek_request(body: Any) -> tuple[str, Any]:
    """The point a `POST /v1/queues/{queue}/seek` body names, with the field it is in: ("time",
    milliseconds since the epoch) or ("receipt", the receipt as sent, for the caller to check
    against the queue). 422 invalid_request naming the field for anything else."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise _bad("body", 'the body must be {"time": …} or {"receipt": …}')
    _unknown(body, {"time", "receipt"})
    if "time" in body and "receipt" in body:
        raise _bad("receipt", "give time or receipt, not both")
    if "receipt" in body:
        return "receipt", body["receipt"]
    if "time" not in body:
        raise _bad("time", 'the body must be {"time": …} (RFC 3339, or milliseconds since the epoch) '
                   'or {"receipt": …}')
    return "time", time_ms(body["time"])
