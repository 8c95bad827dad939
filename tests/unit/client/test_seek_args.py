"""A seek's arguments in the SDK and the CLI, without a cluster: `Queue.seek`'s body, its gRPC
message, and `bluedove poll --from`."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from bluedove.client.cli import since
from bluedove.client.cli_spaces import UsageError
from bluedove.client.grpc_messages import seek_pb
from bluedove.client.objects import Delivery, Queue, seek_body


def test_a_seek_body_takes_a_datetime_epoch_ms_text_or_a_receipt():
    at = datetime(2026, 11, 27, 9, 0, 0, 123_456, tzinfo=timezone.utc)
    assert seek_body(at, None) == {"time": 1_795_770_000_123}
    assert seek_body(at.astimezone(timezone(timedelta(hours=5))), None) == {"time": 1_795_770_000_123}
    naive = datetime(2026, 11, 27, 9, 0, 0)
    assert seek_body(naive, None) == {"time": int(naive.timestamp() * 1000)}  # local time, as Python reads it
    assert seek_body(0, None) == {"time": 0}
    assert seek_body("2026-11-27T09:00:00Z", None) == {"time": "2026-11-27T09:00:00Z"}
    d = Delivery("m", {}, None, [], "5-1.abcdefabcdef", "", Queue("q", "t"))
    assert seek_body(None, d) == {"receipt": "5-1.abcdefabcdef"}
    assert seek_body(None, "5-1.x") == {"receipt": "5-1.x"}
    for bad in ((None, None), (0, "5-1")):
        with pytest.raises(TypeError):
            seek_body(*bad)


def test_a_seek_body_as_a_grpc_request():
    assert seek_pb("q", {"time": 5}).WhichOneof("to") == "time_ms"
    assert seek_pb("q", {"time": 0}).time_ms == 0 and seek_pb("q", {"time": 0}).HasField("time_ms")
    assert seek_pb("q", {"time": "2026-11-27T09:00:00Z"}).time == "2026-11-27T09:00:00Z"
    r = seek_pb("q", {"receipt": "5-1.x"})
    assert (r.queue, r.receipt, r.WhichOneof("to")) == ("q", "5-1.x", "receipt")


@pytest.mark.parametrize("text,point", [
    ("1h", 10_000_000 - 3_600_000),
    ("90s", 10_000_000 - 90_000),
    ("1.5m", 10_000_000 - 90_000),
    ("2d", 10_000_000 - 172_800_000),
    ("250ms", 10_000_000 - 250),
    ("2026-11-27T09:00:00Z", "2026-11-27T09:00:00Z"),
])
def test_poll_from_is_a_time_ago_or_rfc_3339(text, point):
    assert since(text, 10_000_000) == point


@pytest.mark.parametrize("text", ["1y", "h", "yesterday", "-1h", "1 h x"])
def test_poll_from_refuses_anything_else(text):
    with pytest.raises(UsageError, match="--from"):
        since(text, 10_000_000)
