"""bluedove/core/queue_bounds.py: the optional body of POST /v1/queues."""

from __future__ import annotations

import pytest

from bluedove.core.errors import ApiError
from bluedove.core.queue_bounds import QueueBounds, parse_queue_request, parse_seek_request

DEFAULT = QueueBounds(max_undelivered=100_000, retention_s=0)


def test_no_body_or_an_empty_one_is_the_default():
    assert parse_queue_request(None, DEFAULT) is DEFAULT
    assert parse_queue_request({}, DEFAULT) == DEFAULT


def test_each_field_overrides_the_default_and_the_rest_stays():
    assert parse_queue_request({"retention_s": 60}, DEFAULT) == QueueBounds(100_000, 60)
    got = parse_queue_request({"max_undelivered": 5, "dead_letter": {"queue": "q1", "max_deliveries": 3}}, DEFAULT)
    assert got == QueueBounds(5, 0, "q1", 3)
    assert got.fields() == {"max_undelivered": 5, "retention_s": 0, "dl_queue": "q1", "dl_max": 3}
    assert DEFAULT.fields() == {"max_undelivered": 100_000, "retention_s": 0}


@pytest.mark.parametrize("body,field", [
    ({"max_undelivered": 0}, "max_undelivered"),
    ({"max_undelivered": None, "retention_s": 1.5}, "retention_s"),
    ({"retention_s": False}, "retention_s"),
    ({"dead_letter": []}, "dead_letter"),
    ({"dead_letter": {"queue": "", "max_deliveries": 1}}, "dead_letter.queue"),
    ({"dead_letter": {"queue": "q", "max_deliveries": 1001}}, "dead_letter.max_deliveries"),
    ({"dead_letter": {"queue": "q", "max_deliveries": 2, "delay": 1}}, "dead_letter.delay"),
    ({"max_undelivered": 5, "zzz": 1, "aaa": 2}, "aaa"),
    ("x", "body"),
])
def test_a_bad_value_is_a_422_naming_its_field(body, field):
    with pytest.raises(ApiError) as e:
        parse_queue_request(body, DEFAULT)
    assert (e.value.status, e.value.code, e.value.field) == (422, "invalid_request", field)


def test_retain_acked_s_is_kept_in_the_hash_only_when_set():
    got = parse_queue_request({"retain_acked_s": 3600}, DEFAULT)
    assert got == QueueBounds(100_000, 0, None, 0, 3600)
    assert got.fields() == {"max_undelivered": 100_000, "retention_s": 0, "retain_acked_s": 3600}
    assert parse_queue_request({"retain_acked_s": 0}, DEFAULT).fields() == DEFAULT.fields()


@pytest.mark.parametrize("value", [-1, 366 * 86_400 + 1, "60", True, 2.5, [60]])
def test_a_bad_retain_acked_s_is_a_422_naming_it(value):
    with pytest.raises(ApiError) as e:
        parse_queue_request({"retain_acked_s": value}, DEFAULT)
    assert (e.value.status, e.value.code, e.value.field) == (422, "invalid_request", "retain_acked_s")


@pytest.mark.parametrize("value,ms", [
    ("1970-01-01T00:00:01Z", 1000),
    ("1970-01-01t00:00:01.0019z", 1001),  # rounded down to the millisecond
    ("1970-01-01 01:00:00+01:00", 0),
    ("2026-11-27T09:00:00Z", 1_795_770_000_000),
    ("1969-12-31T23:59:59Z", 0),  # before the epoch: from the start
    (1_795_770_000_000, 1_795_770_000_000),
    (-5, 0),
])
def test_a_seek_time_is_rfc_3339_or_epoch_ms(value, ms):
    assert parse_seek_request({"time": value}) == ("time", ms)


@pytest.mark.parametrize("body,field", [
    (None, "time"),
    ({}, "time"),
    ({"time": "2026-11-27"}, "time"),
    ({"time": "2026-11-27T09:00:00"}, "time"),  # RFC 3339 has a zone
    ({"time": "2026-11-27T25:00:00Z"}, "time"),
    ({"time": "tomorrow"}, "time"),
    ({"time": 1.0}, "time"),
    ({"time": False}, "time"),
    ({"time": 1, "receipt": "1-0"}, "receipt"),
    ({"time": 1, "from": 2}, "from"),
    ("1h", "body"),
])
def test_a_bad_seek_body_is_a_422_naming_its_field(body, field):
    with pytest.raises(ApiError) as e:
        parse_seek_request(body)
    assert (e.value.status, e.value.code, e.value.field) == (422, "invalid_request", field)


def test_a_receipt_is_handed_back_for_the_caller_to_check():
    assert parse_seek_request({"receipt": "5-1.abc"}) == ("receipt", "5-1.abc")
    assert parse_seek_request({"receipt": 7}) == ("receipt", 7)
