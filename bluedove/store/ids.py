"""The identifiers the store hands out and checks: queue ids, queue tokens (stored hashed),
delivery receipts.

A receipt is a stream entry id bound to its queue: `<ms>-<seq>.<tag>`, the tag being the first
12 hex digits of the SHA-1 of the queue's stream key, the same in every process (a poll hands
it to the POLL script, which splices it after each entry id). Two queues' streams can hold the
same entry id; the tag keeps a receipt of one from acking the other's delivery, at no cost per
receipt beyond a string compare. It binds, it does not authenticate: the queue token does.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Any

from bluedove.store import keys as K

TAG_LEN = 12
_ID = r"\d{1,19}-\d{1,19}"  # below 10^19: always within the unsigned 64 bits of a stream id part
_TAGGED = rf"{_ID}(?:\.[0-9a-f]{{{TAG_LEN}}})?"  # untagged: issued before receipts were bound
# one receipt, its parts range-checked after (used with fullmatch: `$` would pass "1-0\n")
_RECEIPT_RE = re.compile(rf"(\d{{1,20}})-(\d{{1,20}})(?:\.[0-9a-f]{{{TAG_LEN}}})?")
_RECEIPTS_RE = re.compile(rf"{_TAGGED}(?:,{_TAGGED})*")  # an ack's receipts, joined by ","
_U64 = 2**64
# What a queue id can be (new_id makes 32 hex digits). No ':' above all: "<queue>:s" would
# name the queue's stream, whose HGET fails (WRONGTYPE), telling an existing queue apart.
_QUEUE_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_id() -> str:
    """128 random bits as 32 hex digits (a UUID4's hex form took ~3 µs, ~10 % of a subscription's
    dispatcher CPU in a :batch)."""
    return secrets.token_hex(16)


TOKEN_PREFIX = "bdq_"


def new_token() -> str:
    """A queue token: 256 random bits, url-safe. The prefix makes tokens easy to spot (secret
    scanners, logs) and keeps them from starting with '-', which a command line reads as a flag."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def valid_queue_id(queue: object) -> bool:
    return isinstance(queue, str) and bool(_QUEUE_RE.fullmatch(queue))


def receipt_tag(queue: str) -> str:
    """What every receipt of `queue` ends with: "." and its tag."""
    return "." + hashlib.sha1(K.queue_stream(queue).encode()).hexdigest()[:TAG_LEN]


def valid_receipt(receipt: object) -> bool:
    """A receipt's shape: an entry id whose two parts fit in 64 bits, as Redis takes them,
    with or without a tag (which queue it is bound to is the ack's business)."""
    if not isinstance(receipt, str):
        return False
    m = _RECEIPT_RE.fullmatch(receipt)
    return m is not None and int(m[1]) < _U64 and int(m[2]) < _U64


def first_invalid_receipt(receipts: list[Any]) -> int | None:
    """The index of the first item that is not a receipt, or None: one regex over the joined
    list in the usual case (an ack carries up to 1,000), item by item only to find the culprit
    (or to range-check a part of 20 digits)."""
    if not receipts:
        return None
    if all(type(r) is str for r in receipts):
        joined = ",".join(receipts)
        # as many commas as joins: no item hides one ("1-0,2-0" is not a receipt)
        if joined.count(",") == len(receipts) - 1 and _RECEIPTS_RE.fullmatch(joined):
            return None
    return next((i for i, r in enumerate(receipts) if not valid_receipt(r)), None)


def bound_entries(queue: str, receipts: list[str]) -> list[str]:
    """The entry ids of those `receipts` (valid ones) that are bound to `queue`; the others
    (another queue's, or untagged ones issued before receipts were bound) ack nothing. A C-speed
    count over the joined list in the usual case, where every receipt is the queue's."""
    tag = receipt_tag(queue)
    joined = ",".join(receipts)
    if joined.count(tag) == len(receipts):  # a receipt holds one "." at most: each carries the tag
        return joined.replace(tag, "").split(",") if receipts else []
    return [r[:-len(tag)] for r in receipts if r.endswith(tag)]
