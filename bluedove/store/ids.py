"""The identifiers the store hands out and checks: queue ids, queue tokens (stored hashed),
delivery receipts (stream entry ids)."""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
from typing import Any

_RECEIPT_RE = re.compile(r"\d{1,20}-\d{1,20}")  # used with fullmatch: `$` would pass "1-0\n"
_RECEIPTS_RE = re.compile(r"\d{1,20}-\d{1,20}(?:,\d{1,20}-\d{1,20})*")  # an ack's receipts, joined by ","
# What a queue id can be (new_id makes 32 hex digits). No ':' above all: "<queue>:s" would
# name the queue's stream, whose HGET fails (WRONGTYPE), telling an existing queue apart.
_QUEUE_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_id() -> str:
    return uuid.uuid4().hex


TOKEN_PREFIX = "bdq_"


def new_token() -> str:
    """A queue token: 256 random bits, url-safe. The prefix makes tokens easy to spot (secret
    scanners, logs) and keeps them from starting with '-', which a command line reads as a flag."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def valid_queue_id(queue: object) -> bool:
    return isinstance(queue, str) and bool(_QUEUE_RE.fullmatch(queue))


def valid_receipt(receipt: object) -> bool:
    return isinstance(receipt, str) and bool(_RECEIPT_RE.fullmatch(receipt))


def first_invalid_receipt(receipts: list[Any]) -> int | None:
    """The index of the first item that is not a receipt, or None: one regex over the joined
    list in the usual case (an ack carries up to 1,000), item by item only to find the culprit."""
    if not receipts:
        return None
    if all(type(r) is str for r in receipts):
        joined = ",".join(receipts)
        # as many commas as joins: no item hides one ("1-0,2-0" is not a receipt)
        if joined.count(",") == len(receipts) - 1 and _RECEIPTS_RE.fullmatch(joined):
            return None
    return next((i for i, r in enumerate(receipts) if not valid_receipt(r)), None)
