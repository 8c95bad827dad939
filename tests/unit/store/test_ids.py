"""bluedove/store/ids.py's ids (32 hex digits, valid as queue ids, distinct) and receipts:
their shape (a stream id whose parts fit in 64 bits, as Redis takes them, with the queue's tag
or without) and their binding to a queue."""

from __future__ import annotations

import hashlib

import pytest

from bluedove.store import keys as K
from bluedove.store.ids import bound_entries, first_invalid_receipt, new_id, receipt_tag, valid_queue_id, valid_receipt

MAX = "18446744073709551615"  # 2^64 - 1: the largest part of a stream id
TAG = receipt_tag("q1")


def test_a_queues_tag_is_a_prefix_of_the_sha1_of_its_stream_key():
    """The same for every poll and ack of a queue, in every process; another queue's differs."""
    assert "." + hashlib.sha1(K.queue_stream("q1").encode()).hexdigest()[:12] == TAG
    assert receipt_tag("q2") != TAG


@pytest.mark.parametrize("receipt, ok", [
    ("1717200000000-0", True),  # issued before receipts were bound: still a receipt (it acks nothing)
    ("1717200000000-0" + TAG, True),
    (f"{MAX}-{MAX}", True),
    (f"{MAX}-{MAX}{TAG}", True),
    ("18446744073709551616-0", False),  # 2^64: Redis says "Invalid stream ID" (a 500 before)
    ("0-18446744073709551616", False),
    ("99999999999999999999-99999999999999999999", False),
    ("1-0.", False),
    ("1-0.0123456789a", False),  # a tag is 12 hex digits
    ("1-0.0123456789ABC", False),
    ("1-0" + TAG + TAG, False),
    ("1-0" + TAG + "\n", False),
])
def test_valid_receipt_takes_what_redis_takes(receipt, ok):
    assert valid_receipt(receipt) is ok


@pytest.mark.parametrize("receipts, first_bad", [
    (["1-0" + TAG, "2-0" + TAG, "3-0"], None),
    (["1-0" + TAG, f"{MAX}-0"], None),
    (["1-0" + TAG, "99999999999999999999-99999999999999999999"], 1),
    (["1-0" + TAG + ",2-0" + TAG], 0),
    (["1-0" + TAG, "2-0" + TAG + ","], 1),
])
def test_first_invalid_receipt_range_checks_every_item(receipts, first_bad):
    """Before: a part of 20 digits over 2^64 passed, and the ack answered 500 (Redis refused it)."""
    assert first_invalid_receipt(receipts) == first_bad
    assert first_bad == next((i for i, r in enumerate(receipts) if not valid_receipt(r)), None)


@pytest.mark.parametrize("receipts, entries", [
    ([], []),
    (["1-0" + TAG, "2-5" + TAG], ["1-0", "2-5"]),
    (["1-0" + receipt_tag("q2")], []),  # another queue's receipt: acks nothing here
    (["1-0"], []),  # issued before receipts were bound: acks nothing, comes back after the timeout
    (["1-0", "2-0" + TAG, "3-0" + receipt_tag("q2"), "4-0" + TAG], ["2-0", "4-0"]),
])
def test_only_receipts_bound_to_the_queue_reach_the_ack(receipts, entries):
    assert bound_entries("q1", receipts) == entries


def test_new_ids_are_32_hex_digits_valid_as_queue_ids_and_distinct():
    ids = [new_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 and valid_queue_id(i) for i in ids)
