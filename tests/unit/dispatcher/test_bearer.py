"""One bearer-token parser for REST headers and gRPC metadata."""

from __future__ import annotations

import pytest

from bluedove.dispatcher.auth import parse_bearer


@pytest.mark.parametrize("value, token", [
    ("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("BEARER abc", "abc"),
    ("Bearer ", None), ("Bearer", None), ("Basic abc", None), ("", None), (None, None),
])
def test_parse_bearer(value, token):
    assert parse_bearer(value) == token
