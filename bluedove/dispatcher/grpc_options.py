"""The public gRPC server's HTTP/2 connection settings, chosen for `Listen` streams that stay open
for as long as their subscriber wants (docs/operations.md, "gRPC streams and load balancers").

gRPC's defaults suit short calls: the server pings a quiet connection only after two hours, and
it answers a client that pings a quiet connection more often than every five minutes with a
GOAWAY (`too_many_pings`) that ends every stream on it. A `Listen` stream can be quiet for
hours, and the SDK pings its connection (bluedove/client/grpc_transport.py, `OPTIONS`).
"""

from __future__ import annotations

# grpc's "never" for a time in ms (a C int)
NEVER_MS = 2**31 - 1

# Every 60 s of quiet the server pings the client and drops the connection if no answer comes
# within 20 s: a subscriber that vanished without closing (a phone off the network, a NAT or
# balancer that forgot the connection) frees its streams and parked reads within 80 s instead
# of never. The pings also keep the connection's state fresh in NATs and TCP balancers.
KEEPALIVE_TIME_MS = 60_000
KEEPALIVE_TIMEOUT_MS = 20_000

# A client may ping as often as every 10 s while no data flows (the SDK pings every 30 s).
# Each ping sooner is a strike; past MAX_PING_STRIKES the connection ends (GOAWAY
# `too_many_pings`, UNAVAILABLE for every stream on it).
MIN_CLIENT_PING_INTERVAL_MS = 10_000
MAX_PING_STRIKES = 2

# A connection without a call for 5 minutes is closed (the server pings only connections with
# calls: one a vanished client left idle would otherwise stay forever). Its client's next call
# opens another. A connection with a Listen stream open is never idle.
MAX_IDLE_MS = 5 * 60_000


def server_options() -> list[tuple[str, int]]:
    """The connection settings of the public gRPC server (grpc.aio.server's `options`)."""
    return [
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        # a quiet Listen stream sends nothing: keep pinging it (grpc stops after 2 pings by default)
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
        # Never closed for its age: an age (and its grace) would end every Listen stream on the
        # connection, a reconnect the subscriber did not ask for.
        ("grpc.max_connection_age_ms", NEVER_MS),
        ("grpc.max_connection_idle_ms", MAX_IDLE_MS),
    ]
