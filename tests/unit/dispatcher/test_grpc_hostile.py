"""The gRPC servicer's guards against hostile input: error fields made valid metadata values,
and request bytes that do not parse handed on as an error to answer, not raised."""

from __future__ import annotations

from bluedove.dispatcher.grpc_api import FIELD_MAX, Undecodable, header_safe, lenient
from bluedove.v1 import pubsub_pb2 as pb


def test_header_safe_escapes_what_metadata_cannot_carry_and_cuts_long_paths():
    assert header_safe("predicates.x0") == "predicates.x0"
    assert header_safe("predicates.x0\x00") == "predicates.x0\\x00"
    assert header_safe("attributes.\u00e9\u4e2d") == "attributes.\\xe9\\u4e2d"
    long = header_safe("predicates." + "y" * 70_000)
    assert len(long) == FIELD_MAX + 3 and long.endswith("...")
    assert all(" " <= c <= "~" for c in header_safe("".join(map(chr, range(0, 400)))))


def test_lenient_parses_good_bytes_and_hands_on_bad_ones():
    parse = lenient(pb.PollRequest)
    assert parse(pb.PollRequest(queue="q", max=5).SerializeToString()) == pb.PollRequest(queue="q", max=5)
    bad = parse(b"\xff" * 10)
    assert isinstance(bad, Undecodable)
    err = bad.error("messages[3]")
    assert (err.status, err.code, err.field) == (400, "invalid_json", "messages[3]")
    assert "bluedove.v1.PollRequest" in err.message
