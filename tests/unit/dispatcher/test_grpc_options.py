"""bluedove/dispatcher/grpc_options.py: the public gRPC server's connection settings keep Listen
streams open, and the SDK's keepalive pings are ones the server takes."""

from __future__ import annotations

from bluedove.client import grpc_transport
from bluedove.dispatcher.grpc_options import MIN_CLIENT_PING_INTERVAL_MS, NEVER_MS, server_options


def test_no_connection_is_closed_for_its_age_and_only_one_without_calls_for_idleness():
    options = dict(server_options())
    assert options["grpc.max_connection_age_ms"] == NEVER_MS == 2**31 - 1  # grpc's "never"
    assert options["grpc.max_connection_idle_ms"] >= 60_000  # (idle: no call at all, no stream open)


def test_the_server_pings_quiet_connections_and_waits_less_than_a_period_for_the_answer():
    options = dict(server_options())
    assert 0 < options["grpc.keepalive_timeout_ms"] < options["grpc.keepalive_time_ms"] <= 5 * 60_000
    assert options["grpc.http2.max_pings_without_data"] == 0  # however long a stream is quiet


def test_the_sdk_pings_no_more_often_than_the_server_allows():
    sdk = dict(grpc_transport.OPTIONS)
    assert sdk["grpc.keepalive_time_ms"] >= 2 * MIN_CLIENT_PING_INTERVAL_MS  # room for timer slack
    assert 0 < sdk["grpc.keepalive_timeout_ms"] < sdk["grpc.keepalive_time_ms"]
    assert sdk["grpc.http2.max_pings_without_data"] == 0
    assert sdk["grpc.max_receive_message_length"] == -1  # a Poll answer is read whole
