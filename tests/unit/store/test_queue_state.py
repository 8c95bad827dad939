"""bluedove/store/queue_state.py without a store: the stream id a seek's group starts after."""

from __future__ import annotations

import pytest

from bluedove.store.queue_state import entry_before


@pytest.mark.parametrize("ms,seq,before", [
    (1000, 5, "1000-4"),
    (1000, 0, "999-18446744073709551615"),
    (0, 1, "0-0"),
    (0, 0, "0-0"),
    (5, 18446744073709551615, "5-18446744073709551614"),
])
def test_the_id_just_before_a_point(ms, seq, before):
    assert entry_before(ms, seq) == before
