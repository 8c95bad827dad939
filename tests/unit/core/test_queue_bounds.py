"""bluedove/core/queue_bounds.py: the optional body of POST /v1/queues."""

from __future__ import annotations

import pytest

from bluedove.core.errors import ApiError
from bluedove.core.queue_bounds import QueueBounds, parse_queue_request

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
