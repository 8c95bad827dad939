"""How the SDK splits publish_many and subscribe_many into calls (bluedove/client/client.py)."""

from __future__ import annotations

import json

from bluedove.client.batches import BATCH_BYTES, MAX_BATCH, chunks


def _size(chunk: list) -> int:
    return sum(len(json.dumps(b, separators=(",", ":"))) + 1 for b in chunk)


def test_small_messages_go_a_thousand_a_call():
    bodies = [{"attributes": {"x": i}, "payload": i} for i in range(2500)]
    calls = list(chunks(bodies))
    assert [len(c) for c in calls] == [MAX_BATCH, MAX_BATCH, 500]
    assert [b for c in calls for b in c] == bodies  # in order, none lost


def test_large_messages_are_split_by_bytes_under_the_dispatcher_s_limit():
    """300 messages of 100 KiB (30 MiB) in one call, or 200 in one gRPC stream element, would
    be over the dispatcher's default 16 MiB limit and refused whole."""
    bodies = [{"attributes": {"x": i}, "payload": "p" * 100 * 1024} for i in range(300)]
    calls = list(chunks(bodies))
    assert all(_size(c) <= BATCH_BYTES for c in calls) and len(calls) == 4
    assert [b for c in calls for b in c] == bodies


def test_a_message_over_the_budget_goes_alone():
    big = {"attributes": {"x": 0}, "payload": "p" * 2000}
    small = {"attributes": {"x": 1}, "payload": 1}
    assert list(chunks([small, big, small], max_bytes=1000)) == [[small], [big], [small]]
